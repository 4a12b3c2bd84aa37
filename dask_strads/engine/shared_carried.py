"""Carried blocks handed between workers of one machine through shared memory.

Between two worker processes that share ``/dev/shm``, a carried block that is a numpy
array need not travel through a socket (a copy out, one in, and the kernel's two, and
the receiving thread's CPU taken from the push running beside it). The holder copies the
block into a file there once (if it is not already in one), maps it shared, and answers
with a small :class:`CarriedFile`; the next holder maps the same file and updates the
block in place. Every worker keeps its mappings for the rest of the fit, so a block that
goes round the workers of a machine is copied once. A holder drops its pages of a block
it hands on (the data stays in the file), so a worker's resident memory, which Dask's
memory limits watch, counts the blocks it holds, not all it ever held.

A block is mapped by several workers but held by one at a time (the engine hands a
carried block to one next holder), so no two writes overlap. A value in a mapping is
never recycled as scratch memory (:func:`mapped`). Each worker removes the files it made
or mapped when the fit's blocks leave it; the client removes any left under the fit's
prefix (a worker that died).

Setting: ``dask-strads.engine.shared-carried`` (read on the workers).
"""

from __future__ import annotations

import glob
import math
import mmap
import os
from dataclasses import dataclass

import numpy as np

from dask_strads import config
from dask_strads.engine import shared


@dataclass(frozen=True)
class CarriedFile:
    """A carried array in the shared file at ``path``."""

    path: str
    shape: tuple
    dtype: str


def prefix(fit_id: str) -> str:
    return f"dask-strads-carried-{fit_id}"


def enabled() -> bool:
    return bool(config.get("engine.shared-carried")) and shared.available()


def mapped(value) -> bool:
    """Whether ``value``'s memory is a mapping (shared with other workers)."""
    return _mapping(value) is not None


def _mapping(value) -> mmap.mmap | None:
    while isinstance(value, np.ndarray):
        value = value.base
    if isinstance(value, memoryview):
        value = value.obj
    return value if isinstance(value, mmap.mmap) else None


class CarriedFiles:
    """One worker's shared files of one fit's carried blocks."""

    def __init__(self, fit_id: str, epoch: int):
        self.fit_id = fit_id
        self.epoch = epoch
        self.views: dict[str, np.ndarray] = {}  # path -> this worker's mapping of it
        self.paths: dict = {}  # carried id -> the path of its file here
        self._marker: str | None = None

    def marker(self) -> str | None:
        """A file this worker made, which a holder sees only if it shares this worker's
        ``/dev/shm`` (None when shared carried blocks are off or impossible here)."""
        if self._marker is None and enabled():
            path = shared.new_path(f"{prefix(self.fit_id)}-{self.epoch}-marker")
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except OSError:
                return None
            self._marker = path
        return self._marker

    def hand(self, cid, value, room: float = 0.0) -> CarriedFile | None:
        """Carried block ``cid``'s ``value`` in a shared file: the block's file this
        worker maps (copied there unless ``value`` is that mapping), or a new one; None
        if it is no plain array or ``/dev/shm`` has no room. ``room``: the bytes this
        worker may still add to its resident memory (:func:`memory_room`); the block's
        pages stay only if two more blocks about as large fit in that: the next one it
        takes, and a copy in flight (a snapshot's, a block's on its way)."""
        if not isinstance(value, np.ndarray) or value.dtype.hasobject or value.size == 0:
            return None
        path = self.paths.get(cid)
        view = self.views.get(path)
        if view is None or view.shape != value.shape or view.dtype != value.dtype \
                or not os.path.exists(path):  # its maker left the fit and removed it
            path = shared.new_path(f"{prefix(self.fit_id)}-{self.epoch}")
            view = _create(path, value.shape, value.dtype)
            if view is None:
                return None
            self._keep(cid, path, view)
        if not _same_memory(view, value):
            np.copyto(view, value)
        if 2 * view.nbytes > room:  # the data stays in the file; a touch faults it in
            _mapping(view).madvise(mmap.MADV_DONTNEED)
        return CarriedFile(path, view.shape, view.dtype.str)

    def open(self, cid, handle: CarriedFile) -> np.ndarray:
        """Carried block ``cid`` in this worker's mapping of ``handle``'s file."""
        view = self.views.get(handle.path)
        if view is None or view.shape != tuple(handle.shape):
            fd = os.open(handle.path, os.O_RDWR)
            try:
                view = _map(fd, tuple(handle.shape), np.dtype(handle.dtype))
            finally:
                os.close(fd)
        self._keep(cid, handle.path, view)
        return view

    def _keep(self, cid, path: str, view: np.ndarray) -> None:
        self.paths[cid] = path
        self.views[path] = view

    def close(self) -> None:
        """Remove the files this worker made or mapped (a mapping still in use elsewhere
        stays valid; the memory goes with the last one)."""
        paths = list(self.views)
        if self._marker is not None:
            paths.append(self._marker)
        self.views.clear()
        self.paths.clear()
        self._marker = None
        shared.remove(paths)


def memory_room(worker) -> float:
    """How many more bytes ``worker`` may keep resident before the first level at which
    Dask acts on its memory (its ``distributed.worker.memory`` target, else spill, else
    pause fraction of the memory limit); infinite without a limit or any such level."""
    manager = getattr(worker, "memory_manager", None)
    limit = getattr(manager, "memory_limit", None)
    fractions = [getattr(manager, f"memory_{level}_fraction", False)
                 for level in ("target", "spill", "pause")]
    fractions = [f for f in fractions if f]
    if not limit or not fractions:
        return math.inf
    return limit * min(fractions) - worker.monitor.get_process_memory()


def _create(path: str, shape: tuple, dtype: np.dtype) -> np.ndarray | None:
    """A new shared file at ``path`` for such an array, mapped; None without room."""
    fd = shared.reserve(path, int(np.prod(shape)) * dtype.itemsize)
    if fd is None:
        return None
    try:
        return _map(fd, shape, dtype)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


def _map(fd: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
    size = int(np.prod(shape)) * dtype.itemsize
    mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
    return np.frombuffer(mm, dtype=dtype).reshape(shape)


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.shape == b.shape and a.strides == b.strides)


def remove_all(fit_id: str) -> None:
    """The client's sweep at the end of a fit: files of workers that died before
    removing theirs (only those on the client's machine can be seen)."""
    if shared.available():
        shared.remove(glob.glob(os.path.join(shared.SHM_DIR, prefix(fit_id) + "-*")))
