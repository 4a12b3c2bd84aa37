"""Shards handed to the workers on the client's machine through shared memory.

A worker process on the client's machine maps a large shard's arrays from a file in
``/dev/shm`` instead of receiving their bytes over a socket: the client copies them
into the file once, the worker copies nothing (a socket costs a copy out, one in and
the kernel's two). The worker receives a :class:`SharedShard`, a small handle, and
:func:`attach` turns it into the shard, its arrays views of a private (copy-on-write)
mapping of the file: writable like received arrays, and a page written to is the
worker's own, so the file stays as the client wrote it for later placements. The
client removes the files when the fit ends; a worker's mapping lives on until it lets
the block go.
"""

from __future__ import annotations

import mmap
import os
import pickle
import uuid
from dataclasses import dataclass

SHM_DIR = "/dev/shm"
ALIGN = 64  # each array starts on a cache line (and numpy's SIMD alignment)


@dataclass(frozen=True)
class SharedShard:
    """A shard pickled with its buffers in the file at ``path`` (``spans``: offset and
    length of each buffer there)."""

    path: str
    pickled: bytes
    spans: tuple


def available() -> bool:
    return os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)


def new_path(prefix: str) -> str:
    return os.path.join(SHM_DIR, f"{prefix}-{uuid.uuid4().hex}")


def reserve(path: str, nbytes: int) -> int | None:
    """A new file at ``path`` with room for ``nbytes``, open for reading and writing
    (the caller closes it); None, and no file, when ``/dev/shm`` has no room."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        # the room now, or ENOSPC here: writing to pages a full tmpfs cannot back would
        # kill the process with SIGBUS
        os.posix_fallocate(fd, 0, nbytes)
    except OSError:
        os.close(fd)
        os.unlink(path)
        return None
    return fd


def share(obj, path: str) -> SharedShard | None:
    """``obj`` written to a new file at ``path``; None if it has no buffers to share or
    ``/dev/shm`` has no room for them (a container's is often 64 MB)."""
    buffers: list = []
    pickled = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    spans, end = [], 0
    for raw in raws:
        start = -(-end // ALIGN) * ALIGN
        spans.append((start, raw.nbytes))
        end = start + raw.nbytes
    if end == 0:
        return None
    fd = reserve(path, end)
    if fd is None:
        return None
    try:
        # written, not mapped: a mapping would fault on every page it copies to
        for (start, n), raw in zip(spans, raws, strict=True):
            done = 0
            while done < n:  # raw(): flat bytes
                done += os.pwrite(fd, raw[done:], start + done)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)
    return SharedShard(path, pickled, tuple(spans))


def attach(shard):
    """The shard a :class:`SharedShard` stands for, mapped copy-on-write (anything else
    is returned as it is)."""
    if not isinstance(shard, SharedShard):
        return shard
    with open(shard.path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    view = memoryview(mm)
    return pickle.loads(shard.pickled, buffers=[view[s:s + n] for s, n in shard.spans])


def sees(path: str) -> bool:
    """Whether this process sees the file at ``path`` (run on a worker: whether it
    shares the client's ``/dev/shm``)."""
    return os.path.exists(path)


def remove(paths) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
