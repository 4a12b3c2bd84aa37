#!/usr/bin/env bash
# Stop the daemons that ci/slurm/start.sh started (and only those), by pid, newest first.
# Jobs still queued or running in a controller we started are cancelled first.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$here/common.sh"

[[ -s $PIDS_FILE ]] || { log "nothing to stop"; exit 0; }

if grep -q "^slurmctld " "$PIDS_FILE" && slurm_ok; then
    jobs=$(squeue -h -o %i 2>/dev/null || true)
    if [[ -n $jobs ]]; then
        log "cancelling jobs left in our controller: $(echo "$jobs" | tr '\n' ' ')"
        # shellcheck disable=SC2086
        scancel $jobs || true
    fi
fi

tac "$PIDS_FILE" | while read -r name pid; do
    [[ -n ${pid:-} ]] || continue
    # only signal the pid if it is still the daemon we started (pids are reused)
    if [[ -r /proc/$pid/comm ]] && [[ $(cat "/proc/$pid/comm") == "$name" ]]; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do [[ -e /proc/$pid ]] || break; sleep 0.1; done
        if [[ -e /proc/$pid ]]; then log "$name (pid $pid) ignored SIGTERM: SIGKILL"; kill -KILL "$pid" || true; fi
        log "stopped $name (pid $pid)"
    else
        log "$name (pid $pid) is already gone"
    fi
done
rm -f "$PIDS_FILE"
