# Shared settings of ci/slurm/*.sh (sourced, not run).
# State directory: config copies, spool, logs, and the pid list of the daemons *we* started.
DASK_STRADS_SLURM_DIR=${DASK_STRADS_SLURM_DIR:-/tmp/dask-strads-slurm}
SLURM_CONF_PATH=${SLURM_CONF:-/etc/slurm/slurm.conf}
# the daemons one start.sh run started (set it per run so that stop.sh stops only those)
PIDS_FILE=${DASK_STRADS_SLURM_PIDS:-"$DASK_STRADS_SLURM_DIR/started.pids"}
MARKER="# dask-strads single-node SLURM"

log() { echo "[slurm] $*" >&2; }

munge_ok() { command -v munge >/dev/null && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
slurm_ok() { command -v scontrol >/dev/null && timeout 10 scontrol ping 2>/dev/null | grep -q "is UP"; }
node_ok() {
    # at least one node idle / mixed / allocated in a responding controller
    command -v sinfo >/dev/null && timeout 10 sinfo -h -o "%t" 2>/dev/null | grep -qE "^(idle|mix|alloc)"
}
