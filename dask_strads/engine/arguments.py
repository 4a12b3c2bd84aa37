"""What a fit is given, checked before any cluster work: ``run``'s arguments, and the
``dask-strads.engine.*`` settings, read once per fit."""

from __future__ import annotations

import os
from collections.abc import Mapping

from dask.utils import parse_bytes

from dask_strads import config
from dask_strads.engine import checkpoint as ckpt
from dask_strads.engine.program import Program
from dask_strads.engine.transport import TRANSPORTS

# hooks without a useful default: run() refuses a program without them, before any work
REQUIRED_HOOKS = ("push", "schedule", "pull")

def _check_args(program, data, max_rounds, staleness, time_limit, transport,
                checkpoint, checkpoint_every, resume):
    if not isinstance(program, Program):
        raise TypeError(f"program: expected a dask_strads.Program, got {type(program).__name__}")
    missing = [hook for hook in REQUIRED_HOOKS
               if getattr(type(program), hook) is getattr(Program, hook)]
    if missing:
        raise TypeError(f"program: {type(program).__name__} does not define "
                        f"{', '.join(missing)} (every program must)")
    if checkpoint is not None or resume is not None:
        missing = [hook for hook in ("state_arrays", "load_state")
                   if getattr(type(program), hook) is getattr(Program, hook)]
        if missing:
            raise TypeError(f"program: {type(program).__name__} does not define "
                            f"{', '.join(missing)}, which checkpoints need")
    if not isinstance(data, Mapping) or not data:
        raise ValueError("data: expected a non-empty dict block_id -> shard, "
                         f"got {type(data).__name__}{'' if data else ' (empty)'}")
    if not isinstance(max_rounds, int) or isinstance(max_rounds, bool) or max_rounds < 1:
        raise ValueError(f"max_rounds: expected an integer >= 1, got {max_rounds!r}")
    if not isinstance(staleness, int) or isinstance(staleness, bool) or staleness < 0:
        raise ValueError(f"staleness: expected an integer >= 0, got {staleness!r}")
    if time_limit is not None and not (time_limit > 0):
        raise ValueError(f"time_limit: expected seconds > 0 or None, got {time_limit!r}")
    t = transport if transport is not None else program.transport
    if t not in TRANSPORTS:
        raise ValueError(f"transport: expected one of {TRANSPORTS}, got {t!r}")
    if checkpoint_every is not None and (not isinstance(checkpoint_every, int)
                                         or checkpoint_every < 1):
        raise ValueError(f"checkpoint_every: expected an integer >= 1 or None, got "
                         f"{checkpoint_every!r}")
    if resume is not None and not os.path.exists(os.path.join(os.fspath(resume), ckpt.FILENAME)):
        raise FileNotFoundError(f"resume: no checkpoint found in {os.fspath(resume)!r}")
    _engine_settings()
    return t


def _engine_settings() -> dict:
    """``dask-strads.engine.*``, checked (see dask_strads.yaml)."""
    budget = float(config.get("engine.snapshot-budget"))
    if not 0 < budget <= 1:
        raise ValueError(f"dask-strads.engine.snapshot-budget: expected a share of the fit's "
                         f"time in (0, 1], got {budget!r}")
    probe = config.get("engine.auto-probe-rounds")
    if not isinstance(probe, int) or isinstance(probe, bool) or probe < 1:
        raise ValueError(f"dask-strads.engine.auto-probe-rounds: expected an integer >= 1, "
                         f"got {probe!r}")
    relay = config.get("engine.relay-above")
    if relay is not None and (not isinstance(relay, int) or isinstance(relay, bool)
                              or relay < 1):
        raise ValueError(f"dask-strads.engine.relay-above: expected an integer >= 1 or "
                         f"None, got {relay!r}")
    given = config.get("engine.shared-memory-above")
    try:
        above = None if given is None else parse_bytes(given)
    except (TypeError, ValueError):
        above = -1
    if isinstance(given, bool) or above is not None and above < 0:
        raise ValueError(f"dask-strads.engine.shared-memory-above: expected a size in bytes "
                         f"(like '32MiB') or None, got {given!r}")
    return {
        "relay_above": relay,
        "shared_memory_above": above,
        "snapshot_interval": config.seconds("engine.snapshot-interval") or 0.0,
        "snapshot_budget": budget,
        "dashboard_interval": config.seconds("engine.dashboard-interval"),
        "dashboard_workers": int(config.get("engine.dashboard-workers")),
        "auto_probe_rounds": probe,
        "auto_direct_below": config.seconds("engine.auto-direct-below") or 0.0,
        "reply_channel": bool(config.get("engine.reply-channel")),
        "snapshots_on_cluster": _snapshots_on_cluster(),
        "handover_timeout": handover_timeout(),
    }


def _snapshots_on_cluster() -> bool | str:
    given = config.get("engine.snapshots-on-cluster")
    if not (given is True or given is False or given == "auto"):
        raise ValueError(f"dask-strads.engine.snapshots-on-cluster: expected true, false or "
                         f"'auto', got {given!r}")
    return given


def handover_timeout() -> float:
    """``dask-strads.engine.handover-timeout`` in seconds (0: a retired worker's close is
    never held); read on the client and on the workers."""
    given = config.get("engine.handover-timeout")
    try:
        seconds = config.seconds("engine.handover-timeout")
    except (TypeError, ValueError, KeyError):
        seconds = -1
    if seconds is None or seconds < 0 or isinstance(given, bool):
        raise ValueError(f"dask-strads.engine.handover-timeout: expected a duration >= 0 "
                         f"(like '30s' or 0), got {given!r}")
    return seconds
