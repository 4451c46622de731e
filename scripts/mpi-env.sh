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
# Open MPI 4.1.4 with Debian's external PMIx 4.2.2: now and then a process started by
# MPI_Comm_spawn (a grow or a migration) never returns from PMIx_Init while mpirun idles, so the
# spawn, the prepare and the switch hang until the watchdog ends the job (openpmix/openpmix#2735).
# PMIx's hash job-info store avoided it: 0 hangs in 18 loaded runs of edm_mpi_migrate, against
# 2 in 13 without it (docs/edm.md).
export PMIX_MCA_gds=hash
