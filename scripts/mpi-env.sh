# Sourced by scripts that start mpirun: lets Open MPI run as root in containers and place more
# ranks than cores (the machines here have 2).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Lets a process leave a running job (`dynatrain train` shrinking its world) without waiting in
# MPI_Finalize for the rest of its job (docs/edm.md).
export OMPI_MCA_orte_allowed_exit_without_sync=1
# No Open MPI banners after dynatrain's one-line errors (docs/errors.md, failure handling);
# unset it to see Open MPI's own help messages when mpirun itself cannot start a job.
export OMPI_MCA_orte_execute_quiet=1
