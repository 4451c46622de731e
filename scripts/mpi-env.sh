# Sourced by scripts that start mpirun: lets Open MPI run as root in containers and place more
# ranks than cores (the machines here have 2).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
