#!/usr/bin/env bash
# Install Debian's SLURM and munge (as root). Safe to re-run.
set -euo pipefail
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    echo "[slurm] slurm-wlm and munge already installed" >&2; exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
echo "[slurm] installed: $(slurmctld -V)" >&2
