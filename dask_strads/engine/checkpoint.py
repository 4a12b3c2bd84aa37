"""Atomic checkpoints of a fit, loadable without pickle.

A checkpoint is one ``.npz`` file (``allow_pickle=False``) holding the client state's
arrays, each resident block's arrays, each carried block's value and a JSON header
(round number, block ids). It is written to a temporary file in the same directory and
renamed over the previous one, so a reader never sees a half-written checkpoint.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Snapshot", "load", "read_state", "save", "FILENAME"]

FILENAME = "checkpoint.npz"
FORMAT = 1


@dataclass
class Snapshot:
    """Everything needed to rebuild a fit at the end of round ``round``."""

    round: int
    state: dict[str, Any]
    blocks: dict[Hashable, dict[str, Any] | None] = field(default_factory=dict)
    carried: dict[Hashable, Any] = field(default_factory=dict)
    elapsed: float = 0.0


def _id_to_json(block_id: Hashable):
    if isinstance(block_id, tuple):
        return {"tuple": [_id_to_json(b) for b in block_id]}
    if isinstance(block_id, (bool, np.bool_)):
        raise TypeError(f"block id {block_id!r}: booleans are not supported as block ids")
    if isinstance(block_id, (int, np.integer)):
        return int(block_id)
    if isinstance(block_id, str):
        return block_id
    raise TypeError(f"block id {block_id!r}: checkpoints need int, str or tuple block ids")


def _id_from_json(obj) -> Hashable:
    if isinstance(obj, dict):
        return tuple(_id_from_json(b) for b in obj["tuple"])
    return obj


def _check_array(name: str, value: Any) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == object:
        raise TypeError(f"checkpoint entry {name!r}: object arrays cannot be saved without pickle")
    return arr


def save(directory: str | os.PathLike, snap: Snapshot) -> str:
    """Write ``snap`` atomically to ``directory/checkpoint.npz``; return the path."""
    os.makedirs(directory, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    header = {"format": FORMAT, "round": int(snap.round), "elapsed": float(snap.elapsed),
              "state": [], "blocks": [], "carried": []}
    for name, value in snap.state.items():
        arrays[f"s.{len(header['state'])}"] = _check_array(name, value)
        header["state"].append(name)
    for i, (block_id, block_arrays) in enumerate(snap.blocks.items()):
        names = []
        for name, value in (block_arrays or {}).items():
            arrays[f"b.{i}.{len(names)}"] = _check_array(f"{block_id}/{name}", value)
            names.append(name)
        header["blocks"].append([_id_to_json(block_id), None if block_arrays is None else names])
    for i, (carried_id, value) in enumerate(snap.carried.items()):
        arrays[f"c.{i}"] = _check_array(f"carried {carried_id}", value)
        header["carried"].append(_id_to_json(carried_id))
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    path = os.path.join(os.fspath(directory), FILENAME)
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", suffix=".npz.tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _open(directory: str | os.PathLike):
    path = os.path.join(os.fspath(directory), FILENAME)
    if not os.path.exists(path):
        raise FileNotFoundError(f"resume: no checkpoint at {path!r}")
    z = np.load(path, allow_pickle=False)
    header = json.loads(bytes(z["header"]).decode())
    if header.get("format") != FORMAT:
        z.close()
        raise ValueError(f"resume: {path!r} has checkpoint format {header.get('format')!r}, "
                         f"expected {FORMAT}")
    return z, header


def load(directory: str | os.PathLike) -> Snapshot:
    """Read the checkpoint in ``directory`` (never unpickles anything)."""
    z, header = _open(directory)
    with z:
        state = {name: _unwrap(z[f"s.{i}"]) for i, name in enumerate(header["state"])}
        blocks: dict[Hashable, Mapping[str, Any] | None] = {}
        for i, (bid, names) in enumerate(header["blocks"]):
            blocks[_id_from_json(bid)] = None if names is None else {
                n: _unwrap(z[f"b.{i}.{j}"]) for j, n in enumerate(names)}
        carried = {_id_from_json(cid): z[f"c.{i}"] for i, cid in enumerate(header["carried"])}
    return Snapshot(round=header["round"], state=state, blocks=blocks, carried=carried,
                    elapsed=header.get("elapsed", 0.0))


def read_state(directory: str | os.PathLike) -> dict[str, Any]:
    """Only the client state's arrays of the checkpoint in ``directory`` (the blocks are
    not read): what an estimator needs to set a resumed fit up like the checkpointed one."""
    z, header = _open(directory)
    with z:
        return {name: _unwrap(z[f"s.{i}"]) for i, name in enumerate(header["state"])}


def _unwrap(arr: np.ndarray) -> Any:
    """0-d arrays come back as numpy scalars, so ``state_arrays`` may hold plain numbers."""
    return arr[()] if arr.ndim == 0 else arr
