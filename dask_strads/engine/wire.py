"""What travels in handler messages, and how it arrives.

``pack`` / ``unpack`` put payloads of the direct channel, of replies and of exchanges
into the cheapest message form for their size; ``realign`` fixes the float arrays that
Dask hands a worker at unaligned offsets, which numpy could not pass to BLAS.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
from distributed.protocol.serialize import ToPickle

# Payloads of the direct channel and of replies: pickled in-band into one bytes object
# when small (the cheapest message); from this size on, pickled with their buffers (numpy
# arrays) out of band as separate frames, which skips copying them into and out of the
# message (the copies outweigh the extra frames from about this size).
FRAMES_BYTES = 256 * 1024


def pack(obj) -> Any:
    """``obj`` ready for a handler message (see FRAMES_BYTES); ``unpack`` reverses it.

    Its size is measured by a pickle that leaves the buffers (numpy arrays) out of band,
    which copies none of them; only an object small enough for one bytes object is then
    pickled in-band (cheap, being small), and one without buffers only once: measuring
    with an in-band pickle would copy every large payload once for nothing, every round."""
    buffers: list = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    size = len(data) + sum(memoryview(b).nbytes for b in buffers)
    if size >= FRAMES_BYTES:
        return ToPickle(obj)
    return pickle.dumps(obj, protocol=5) if buffers else data


def unpack(msg) -> Any:
    """The object ``pack`` made ``msg`` from (frames arrive deserialized; an in-process
    comm hands the wrapper over as it is)."""
    if isinstance(msg, bytes | bytearray | memoryview):
        return pickle.loads(msg)
    return msg.data if isinstance(msg, ToPickle) else msg


def forward(msg) -> Any:
    """A packed ``msg`` that arrived in a handler message, ready to travel on as it
    came: frames arrive deserialized and must be wrapped again (not pickled anew)."""
    if isinstance(msg, bytes | bytearray | memoryview | ToPickle):
        return msg
    return ToPickle(msg)


def realign(obj: Any, depth: int = 0) -> Any:
    """``obj`` with its floating-point numpy arrays aligned for their element type.

    Arrays that reach a worker through Dask (a scattered shard, a task argument, a
    carried block moved from another worker) are often views at an arbitrary byte
    offset of the received message. numpy cannot hand a misaligned array to BLAS and
    falls back to a much slower loop. A misaligned float or complex array is copied;
    scipy.sparse and pydata sparse arrays come back as shallow copies with aligned
    copies of such buffers (the object passed in is never changed); dicts, lists and
    tuples are walked a few levels deep, and copied only when something in them was.
    Anything else is returned as it is.

    Integer arrays stay where they are: numba kernels read them misaligned without a
    penalty on x86 (no BLAS call takes them), and copying a large index array or count
    block would cost time and fresh memory every time one arrives (LDA's carried count
    blocks arrive every sub-round).
    """
    if isinstance(obj, np.ndarray):
        if obj.flags.aligned or not np.issubdtype(obj.dtype, np.inexact):
            return obj
        out = np.empty_like(obj, order="K")
        out[...] = obj
        if not obj.flags.writeable:
            out.flags.writeable = False
        return out
    if depth > 3:
        return obj
    kind = type(obj)
    if kind is dict:
        out = {k: realign(v, depth + 1) for k, v in obj.items()}
        return obj if all(out[k] is v for k, v in obj.items()) else out
    if kind is tuple or kind is list:
        items = [realign(v, depth + 1) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj, strict=True)) else kind(items)
    if kind.__module__.split(".")[0] not in ("scipy", "sparse"):
        return obj
    for attrs in (("data", "indices", "indptr"), ("row", "col", "data"), ("coords", "data")):
        arrays = [getattr(obj, a, None) for a in attrs]
        if all(isinstance(a, np.ndarray) for a in arrays):
            fixed = [realign(a) for a in arrays]
            if any(f is not a for f, a in zip(fixed, arrays, strict=True)):
                obj = copy.copy(obj)  # never change an object Dask (or the user) holds
                for name, f in zip(attrs, fixed, strict=True):
                    setattr(obj, name, f)
            break
    return obj
