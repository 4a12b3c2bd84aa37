"""glibc ``malloc`` settings and numpy's huge-page advice while a process runs a fit.

Dask's nanny starts worker processes with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``) so that freed memory goes back to the OS
at once. Setting it also switches off glibc's dynamic mmap threshold: from then on
every allocation of 128 KiB or more is a fresh ``mmap``, unmapped when freed, whose
pages fault in again when first written, and the heap's top is trimmed after any
free of 64 KiB. Pushes allocate such arrays every round (a copy of the residual, a
sweep's scratch, the partials), so they would pay for page faults round after round.

So while a worker process started with that variable holds blocks of a fit, large
allocations come from the heap and freed memory stays for the next round
(``M_MMAP_THRESHOLD`` 32 MiB, ``M_TRIM_THRESHOLD`` 64 MiB); when its last fit is
released, the environment's settings come back and ``malloc_trim(0)`` returns the
free memory to the OS. Processes without the variable keep glibc's dynamic
threshold, which already behaves this way, and are not touched; neither are
platforms without glibc.

numpy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on
every new array of 4 MiB or more. Where the kernel serves such requests by
compacting memory on the spot (its ``defrag`` setting ``madvise``, a common
default), each first write of a fresh array stalls, and a fit's first rounds
allocate many (a block's column statistics, a gap round's buffers, the client's
moved coefficients). So while a worker holds blocks of a fit, and while the client
runs one, numpy's advice is off, and back as it was when the last fit lets go
(``hold_hugepage_off`` / ``release_hugepage_off``).

Both changes have a switch (``dask-strads.process.malloc-reuse`` and
``dask-strads.process.hugepage-advice-off``); the client reads them when a fit starts
and the fit's blocks carry them to the workers (see :meth:`WorkerStore.add`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import logging
import os
import sys
import threading

logger = logging.getLogger("dask_strads")

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's initial mmap threshold, and the one that stays when it is not dynamic
GLIBC_MMAP_THRESHOLD = 128 * 1024
FIT_MMAP_THRESHOLD = 32 * 2**20
FIT_TRIM_THRESHOLD = 64 * 2**20
ENV_TRIM = "MALLOC_TRIM_THRESHOLD_"
ENV_MMAP = "MALLOC_MMAP_THRESHOLD_"

_libc = None


def _glibc():
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux"):
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                lib.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
                lib.malloc_trim.argtypes = [ctypes.c_size_t]
                _libc = lib
            except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
                pass
    return _libc or None


def _env_int(name: str, default: int | None) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return default


def applies() -> bool:
    """Whether this process's allocator is set up the nanny's way (and is glibc)."""
    return _env_int(ENV_TRIM, None) is not None and _glibc() is not None


def tune() -> bool:
    """Heap reuse for a fit's rounds; True when the settings were changed."""
    if not applies():
        return False
    lib = _glibc()
    ok = lib.mallopt(M_MMAP_THRESHOLD, FIT_MMAP_THRESHOLD) == 1
    ok = lib.mallopt(M_TRIM_THRESHOLD, FIT_TRIM_THRESHOLD) == 1 and ok
    if not ok:
        logger.debug("dask_strads: mallopt refused the fit's settings")
    return ok


def restore() -> None:
    """The environment's settings again, and the free memory back to the OS."""
    if not applies():
        return
    lib = _glibc()
    lib.mallopt(M_TRIM_THRESHOLD, _env_int(ENV_TRIM, 0))
    lib.mallopt(M_MMAP_THRESHOLD, _env_int(ENV_MMAP, GLIBC_MMAP_THRESHOLD))
    lib.malloc_trim(0)


def _hugepage_switch():
    """numpy's switch of its huge-page advice (None when this numpy has none)."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            return importlib.import_module(module)._set_madvise_hugepage
        except (ImportError, AttributeError):
            continue
    return None


def hugepage_advice(enabled: bool) -> bool | None:
    """Turn numpy's huge-page advice on new large arrays on or off; returns the
    previous setting (None: this numpy cannot switch it, nothing changed)."""
    switch = _hugepage_switch()
    if switch is None:
        return None
    return bool(switch(bool(enabled)))


# process-wide: fits on a client and blocks on a worker may share a process (a
# LocalCluster without processes), so the advice goes back only when the last lets go
_HOLDS = {"count": 0, "before": None}
_HOLDS_LOCK = threading.Lock()


def hold_hugepage_off() -> None:
    """numpy's huge-page advice off until every hold is released."""
    with _HOLDS_LOCK:
        if _HOLDS["count"] == 0:
            _HOLDS["before"] = hugepage_advice(False)
        _HOLDS["count"] += 1


def release_hugepage_off() -> None:
    """Release one hold; the last one sets the advice back as it was before the first."""
    with _HOLDS_LOCK:
        if _HOLDS["count"] == 0:
            return
        _HOLDS["count"] -= 1
        if _HOLDS["count"] == 0 and _HOLDS["before"] is not None:
            hugepage_advice(_HOLDS["before"])
            _HOLDS["before"] = None
