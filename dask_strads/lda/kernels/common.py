"""What every LDA kernel loop shares: the jit options, the software prefetch and the
sampler's random numbers (xorshift64*, seeded per call)."""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

_JIT = {"nogil": True, "cache": True}
_AHEAD = 16  # tokens between prefetching a token's topic and using it
_PREFETCH_LIST = 256  # doc-list entries prefetched per token ahead (16 cache lines)


@intrinsic
def _prefetch(typingctx, arr, index):
    """Software prefetch of ``arr[index]`` (1-d array): hides the latency of the random
    reads of the next tokens' topics and doc-topic counts (the sampler is memory bound)."""
    sig = types.void(arr, index)

    def codegen(context, builder, signature, args):
        arrty, idxty = signature.args
        ary = context.make_array(arrty)(context, builder, args[0])
        idx = context.cast(builder, args[1], idxty, types.intp)
        ptr = cgutils.get_item_pointer2(
            context, builder, ary.data, cgutils.unpack_tuple(builder, ary.shape),
            cgutils.unpack_tuple(builder, ary.strides), arrty.layout, [idx])
        # one declaration for every array type in a module: the address as a byte pointer
        ptr = builder.bitcast(ptr, cgutils.voidptr_t)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [cgutils.voidptr_t, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(nogil=True, cache=True, inline="always")
def _next(state):
    """xorshift64* step: returns the new state and a uniform float in [0, 1)."""
    x = state
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    mixed = (x * np.uint64(0x2545F4914F6CDD1D)) >> np.uint64(11)
    return x, float(mixed) * (1.0 / 9007199254740992.0)


@numba.njit(nogil=True, cache=True)
def _seed_state(seed):
    """A non-zero xorshift state from any integer seed (splitmix64 scrambling)."""
    z = np.uint64(seed) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    if z == np.uint64(0):
        z = np.uint64(0x2545F4914F6CDD1D)
    return z
