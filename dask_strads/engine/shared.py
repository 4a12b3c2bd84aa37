"""Shards handed to the workers on the client's machine through shared memory.

A worker process on the client's machine maps a large shard's arrays from a file in
``/dev/shm`` instead of receiving their bytes over a socket: the client copies them
into the file once, the worker copies nothing (a socket costs a copy out, one in and
the kernel's two). The worker receives a :class:`SharedShard`, a small handle, and
:func:`attach` turns it into the shard, its arrays views of a private (copy-on-write)
mapping of the file: writable like received arrays, and a page written to is the
worker's own, so the file stays as the client wrote it for later placements. The
client removes the files when the fit ends; a worker's mapping lives on until it lets
the block go. A file's name tells the process that made it: files of a process killed
mid-fit are removed by the next fit on the machine (:func:`remove_orphans`).
"""

from __future__ import annotations

import mmap
import os
import pickle
import re
import uuid
import weakref
from dataclasses import dataclass
from functools import cache

import numpy as np

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
    """A new file's path, naming the process that makes it (see :func:`remove_orphans`)."""
    return os.path.join(SHM_DIR, f"{prefix}-n{_pid_namespace()}p{os.getpid()}-"
                                 f"{uuid.uuid4().hex}")


# the maker's pid namespace and pid in a name that new_path made
_MAKER = re.compile(r"^dask-strads-.*-n(\d+)p(\d+)-[0-9a-f]{32}$")


@cache
def _pid_namespace() -> int:
    """This process's pid namespace: a pid read from a file name means the same
    process only in the namespace that wrote it (containers may share /dev/shm)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def remove_orphans() -> list[str]:
    """Remove the files in ``/dev/shm`` whose maker, a process of this pid namespace, is
    gone: a client or worker killed mid-fit leaves them behind, and they hold memory
    until the machine restarts. Returns their paths."""
    if not available():
        return []
    removed = []
    for name in os.listdir(SHM_DIR):
        maker = _MAKER.match(name)
        if maker is None or int(maker[1]) != _pid_namespace() or _alive(int(maker[2])):
            continue
        path = os.path.join(SHM_DIR, name)
        try:
            os.unlink(path)
        except OSError:  # another user's, or removed meanwhile
            continue
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


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
    ``/dev/shm`` has no room for them (a container's is often 64 MB). An object with a
    ``write_shared(path)`` method writes itself (an array laid out anew as it is written,
    say) and returns the same."""
    if hasattr(obj, "write_shared"):
        return obj.write_shared(path)
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
        for (start, _), raw in zip(spans, raws, strict=True):
            write_at(fd, raw, start)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)
    return SharedShard(path, pickled, tuple(spans))


def write_at(fd: int, raw: memoryview, offset: int) -> None:
    """The flat bytes ``raw`` written at ``offset`` of the open file ``fd`` (written, not
    mapped: a mapping would fault on every page it copies to)."""
    done = 0
    while done < raw.nbytes:
        done += os.pwrite(fd, raw[done:], offset + done)


def handle(path: str, obj, written: np.ndarray) -> SharedShard:
    """The handle of ``obj``, one of whose arrays, ``written`` (an untouched stand-in of
    the same shape and layout), was written alone at the start of the file at ``path``:
    the worker maps it from there; the rest of ``obj`` travels in the handle."""
    start = written.__array_interface__["data"][0]

    def in_band(buffer: pickle.PickleBuffer) -> bool:
        return np.frombuffer(buffer.raw(), np.uint8).ctypes.data != start

    pickled = pickle.dumps(obj, protocol=5, buffer_callback=in_band)
    return SharedShard(path, pickled, ((0, written.nbytes),))


def attach(shard):
    """The shard a :class:`SharedShard` stands for, mapped copy-on-write (anything else
    is returned as it is)."""
    if not isinstance(shard, SharedShard):
        return shard
    with open(shard.path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    _remember(mm, shard.path)
    view = memoryview(mm)
    return pickle.loads(shard.pickled, buffers=[view[s:s + n] for s, n in shard.spans])


# the live mappings attach() made: id -> (path, first address, length)
_MAPPED: dict[int, tuple[str, int, int]] = {}


def _remember(mm: mmap.mmap, path: str) -> None:
    key = id(mm)
    if len(mm):
        _MAPPED[key] = (path, np.frombuffer(mm, np.uint8).ctypes.data, len(mm))
        weakref.finalize(mm, _MAPPED.pop, key, None)  # before the id can be reused


def mapped_at(array: np.ndarray) -> tuple[str, int] | None:
    """``(path, offset)`` of the file an attached shard's ``array`` is a view of, where
    its first element lies; None for an array elsewhere. The array holds the file's
    bytes only while nobody wrote to it (the mapping is copy-on-write)."""
    address = array.__array_interface__["data"][0]
    for path, start, length in list(_MAPPED.values()):
        if start <= address and address + array.nbytes <= start + length:
            return path, address - start
    return None


@cache
def shm_id() -> str:
    """Which ``/dev/shm`` this process sees: processes with the same id open the same
    files there (the kernel's boot and the mount's device tell hosts and containers
    apart)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = uuid.uuid4().hex  # unknown: this process matches no other
    try:
        device = os.stat(SHM_DIR).st_dev
    except OSError:
        device = -1
    return f"{boot}:{device}"


def open_mapped(path: str, offset: int, shape: tuple, cache: dict) -> np.ndarray:
    """The Fortran float64 array of ``shape`` at ``offset`` of the file at ``path``
    (another process's :func:`mapped_at`), mapped copy-on-write so that it types like
    the worker's own arrays (numba compiles read-only arrays apart); the mapping is
    kept in ``cache`` for the next call."""
    mm = cache.get(path)
    if mm is None:
        with open(path, "rb") as fh:
            mm = cache[path] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    return np.ndarray(shape, dtype=np.float64, buffer=mm, offset=offset, order="F")


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
