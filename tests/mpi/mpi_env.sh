# mpi_env.sh - sourced by the MPI tests: finds mpirun (Debian: openmpi-bin) or exits 77 (Skipped), and lets
# OpenMPI run as root, as CI does. `mpi N ARGS...` runs ARGS on N ranks on this machine, oversubscribed (CI
# has 2 cores), unbound (bound ranks would share one core each).
MPIRUN=${MPIRUN:-$(command -v mpirun || true)}
if [ -z "$MPIRUN" ]; then
  echo "SKIP: mpirun not found (Debian: openmpi-bin)"
  exit 77
fi
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mpi() {
  n=$1
  shift
  "$MPIRUN" --oversubscribe --bind-to none -np "$n" "$@"
}
