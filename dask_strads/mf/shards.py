"""What a matrix factorisation block starts from: row ranges balanced by observed
entries, a block's shard (its rows of the ratings as a CSR, its held-out entries) and the
random initial factors, generated tile by tile so that any block can make its own."""

from __future__ import annotations

import numpy as np

# Tiles of the random initial factors: each (row tile, rank tile) has its own seed, so
# any sub-rectangle can be generated on its own and results do not depend on blocking.
ROW_TILE = 4096
RANK_TILE = 64
_WHICH = {"W": 0, "H": 1}


def random_factor(seed: int, which: str, row0: int, row1: int, t0: int, t1: int,
                  scale: float) -> np.ndarray:
    """Rows ``row0:row1``, columns ``t0:t1`` of the random initial factor ``which``.

    Entries are ``scale * N(0, 1)``, drawn tile by tile from seeds derived from
    ``(seed, which, row tile, rank tile)``: the same entry has the same value whichever
    rectangle it is generated in.
    """
    out = np.empty((row1 - row0, t1 - t0), dtype=np.float64)
    if out.size == 0:
        return out
    code = _WHICH[which]
    for rt in range(row0 // ROW_TILE, (row1 - 1) // ROW_TILE + 1):
        r_lo, r_hi = max(row0, rt * ROW_TILE), min(row1, (rt + 1) * ROW_TILE)
        for kt in range(t0 // RANK_TILE, (t1 - 1) // RANK_TILE + 1):
            k_lo, k_hi = max(t0, kt * RANK_TILE), min(t1, (kt + 1) * RANK_TILE)
            rng = np.random.default_rng([int(seed), code, rt, kt])
            tile = rng.standard_normal((ROW_TILE, RANK_TILE))
            r_base, k_base = rt * ROW_TILE, kt * RANK_TILE
            out[r_lo - row0:r_hi - row0, k_lo - t0:k_hi - t0] = tile[
                r_lo - r_base:r_hi - r_base, k_lo - k_base:k_hi - k_base]
    out *= scale
    return out


def factor_chunk(init: tuple, which: str, row0: int, row1: int, t0: int, t1: int) -> np.ndarray:
    """Rows ``row0:row1``, columns ``t0:t1`` of initial factor ``which`` ("W" or "H").

    ``init`` is ``("random", seed, scale)`` or ``("given", W0, H0)``.
    """
    if init[0] == "random":
        return random_factor(init[1], which, row0, row1, t0, t1, init[2])
    factor = init[1] if which == "W" else init[2]
    return np.ascontiguousarray(factor[row0:row1, t0:t1], dtype=np.float64)


def balanced_bounds(counts: np.ndarray, n_blocks: int) -> np.ndarray:
    """Cut ``len(counts)`` indices into ``n_blocks`` contiguous ranges of similar total count.

    Returns ``n_blocks + 1`` non-decreasing boundaries from 0 to ``len(counts)``.
    """
    n = len(counts)
    cum = np.concatenate([[0], np.cumsum(counts, dtype=np.float64)])
    if cum[-1] == 0:
        return np.linspace(0, n, n_blocks + 1).astype(np.int64)
    targets = cum[-1] * np.arange(1, n_blocks) / n_blocks
    inner = np.searchsorted(cum, targets, side="left")
    # take whichever neighbouring boundary is nearer its target
    below = np.maximum(inner - 1, 0)
    inner = np.where(targets - cum[below] < cum[inner] - targets, below, inner)
    bounds = np.concatenate([[0], inner, [n]]).astype(np.int64)
    return np.maximum.accumulate(np.clip(bounds, 0, n))


def _compress(major: np.ndarray, minor: np.ndarray, values: np.ndarray, lo: int, hi: int):
    """Entries with ``lo <= major < hi`` as (indptr, minor indices, values), sorted."""
    keep = (major >= lo) & (major < hi)
    major, minor, values = major[keep] - lo, minor[keep], values[keep]
    order = np.lexsort((minor, major))
    indptr = np.zeros(hi - lo + 1, dtype=np.int64)
    np.cumsum(np.bincount(major, minlength=hi - lo), out=indptr[1:])
    return (indptr, np.ascontiguousarray(minor[order], dtype=np.int64),
            np.ascontiguousarray(values[order], dtype=np.float64))


def shard_from_matrices(csr, row_range: tuple[int, int], col_range: tuple[int, int],
                        validation: tuple | None = None, init: tuple | None = None) -> dict:
    """The data of one resident block sliced from a canonical scipy CSR matrix.

    Same result as :func:`build_shard` on the matrix's entries, without sorting.
    """
    r0, r1 = int(row_range[0]), int(row_range[1])
    indptr = csr.indptr[r0:r1 + 1].astype(np.int64)
    start, stop = indptr[0], indptr[-1]
    return {
        "shape": (int(csr.shape[0]), int(csr.shape[1])),
        "row_range": (r0, r1), "col_range": (int(col_range[0]), int(col_range[1])),
        "csr": (indptr - start, csr.indices[start:stop].astype(np.int64),
                csr.data[start:stop].astype(np.float64)),
        "val": _validation_part(validation, r0, r1), "init": init,
    }


def _validation_part(validation, r0: int, r1: int):
    """Held-out entries of rows ``r0:r1``: (local rows, global columns, values)."""
    if validation is None:
        return None
    vr, vc, vv = (np.asarray(a) for a in validation)
    keep = (vr >= r0) & (vr < r1)
    return ((vr[keep] - r0).astype(np.int64), vc[keep].astype(np.int64),
            vv[keep].astype(np.float64))


def build_shard(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, shape: tuple[int, int],
                row_range: tuple[int, int], col_range: tuple[int, int],
                validation: tuple | None = None, init: tuple | None = None) -> dict:
    """The data of one resident block from (a superset of) the observed entries.

    ``rows, cols, values`` may hold any entries: those in ``row_range`` form the block's
    CSR. ``col_range`` is the block's share of the rows of ``H``. ``validation`` is
    ``(rows, cols, values)`` of held-out entries (those in ``row_range`` are kept).
    ``init`` is a ``("given", W0, H0)`` initialisation to ship with the shard (random
    ones are drawn on the worker).
    """
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    r0, r1 = int(row_range[0]), int(row_range[1])
    return {
        "shape": (int(shape[0]), int(shape[1])),
        "row_range": (r0, r1), "col_range": (int(col_range[0]), int(col_range[1])),
        "csr": _compress(rows, cols, values, r0, r1),
        "val": _validation_part(validation, r0, r1),
        "init": init,
    }
