#!/usr/bin/env bash
# Start a single-node SLURM on 127.0.0.1: munged, slurmctld, slurmd (no systemd needed).
#
# Usage: sudo ci/slurm/start.sh            (as root; installs nothing: see install.sh)
#
# Daemons that are already running are reused and left alone; the pids of the daemons this
# script starts are appended to $DASK_STRADS_SLURM_DIR/started.pids, and ci/slurm/stop.sh
# stops exactly those. Writes /etc/slurm/slurm.conf only if it is absent or was written by
# this script.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$here/common.sh"

if [[ $(id -u) -ne 0 ]]; then
    log "must run as root (slurmd and munged need it)"; exit 1
fi
for exe in munged slurmctld slurmd scontrol sinfo; do
    command -v "$exe" >/dev/null || { log "$exe not found: run ci/slurm/install.sh first"; exit 1; }
done

mkdir -p "$DASK_STRADS_SLURM_DIR"/{ctld,slurmd}
touch "$PIDS_FILE"

record() { echo "$1 $2" >> "$PIDS_FILE"; log "started $1 (pid $2)"; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local deadline=$((SECONDS + $1)) what=$2; shift 2
    until "$@"; do
        if (( SECONDS >= deadline )); then log "timed out waiting for $what"; return 1; fi
        sleep 0.2
    done
}

# ---------------------------------------------------------------- munge
if munge_ok; then
    log "munged already running: reusing it"
else
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating /etc/munge/munge.key"
        mkdir -p /etc/munge
        if command -v mungekey >/dev/null; then mungekey --create --force; else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; fi
        chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
    fi
    # /run/munge is not created without systemd/tmpfiles; munged refuses lax permissions
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
    runuser -u munge -- /usr/sbin/munged --force
    wait_for 10 munged munge_ok
    record munged "$(cat /run/munge/munged.pid)"
fi

# ---------------------------------------------------------------- slurm.conf
if [[ -f $SLURM_CONF_PATH ]] && ! grep -qF "$MARKER" "$SLURM_CONF_PATH"; then
    if slurm_ok; then
        log "$SLURM_CONF_PATH is not ours and SLURM is up: reusing the running SLURM"
        exit 0
    fi
    log "$SLURM_CONF_PATH exists and was not written by this script; refusing to replace it"
    log "(move it away or set SLURM_CONF to another path)"
    exit 1
fi
if slurm_ok && node_ok; then
    log "slurmctld and slurmd already up: reusing them"
    exit 0
fi
host=$(hostname -s)
# the node line as slurmd itself sees the machine, memory trimmed by 2% so that the node
# never registers with less than it declares (it would be drained)
node=$(slurmd -C | head -n 1)
mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node")
mem=$((mem * 98 / 100))
cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$node")
node=$(sed "s/RealMemory=[0-9]*/RealMemory=$mem/" <<<"$node")
defmem=$((mem / cpus))
mkdir -p "$(dirname "$SLURM_CONF_PATH")"
sed -e "s|@HOST@|$host|" -e "s|@STATE@|$DASK_STRADS_SLURM_DIR|g" -e "s|@NODE@|$node|" \
    -e "s|@DEFMEM@|$defmem|" "$here/slurm.conf.in" > "$SLURM_CONF_PATH"
log "wrote $SLURM_CONF_PATH (node: $node)"

# ---------------------------------------------------------------- daemons
if ! slurm_ok; then
    # -i: ignore stale state left by an earlier run in the same state directory
    slurmctld -i
    wait_for 30 slurmctld slurm_ok
    record slurmctld "$(cat "$DASK_STRADS_SLURM_DIR/slurmctld.pid")"
fi
if ! pgrep -x slurmd >/dev/null; then
    slurmd
    wait_for 30 "slurmd pid file" test -s "$DASK_STRADS_SLURM_DIR/slurmd.pid"
    record slurmd "$(cat "$DASK_STRADS_SLURM_DIR/slurmd.pid")"
fi
# a node left down/drained by an earlier run comes back
scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
wait_for 60 "node $host to be idle" node_ok
sinfo >&2
log "SLURM is up (state in $DASK_STRADS_SLURM_DIR)"
