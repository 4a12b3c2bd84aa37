"""How a dense column block is made: as the block uses it, once.

A block sweeps Fortran columns, centred when the fit centres ``X`` for its intercept.
From dask input, a worker makes it piece by piece and the shard is then the block's own
matrix (no copy per block, none at a recovery), so a block costs its columns' bytes
once; a piece of a chunk that another worker holds is cut there, so only the block's
columns of it move. X that is still a graph is computed once for all blocks where the
workers have room for it. From ``X`` in the client's memory, columns that are not
Fortran float64, or that the fit centres, are laid out (and centred) where they go
(:class:`ColumnsAsGiven`), not copied on the client first.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

import numpy as np
from dask.core import flatten
from distributed.client import _wait  # without the data

from dask_strads.engine import shared


@dataclass
class CentredColumns:
    """Columns of ``X`` minus their ``means``, as a Fortran array; ``squares``, their
    squared norms when the pass that centred them took them (else None)."""

    values: np.ndarray
    means: np.ndarray
    squares: np.ndarray | None = None

    @property
    def shape(self) -> tuple:
        return self.values.shape

    def __sizeof__(self) -> int:  # what Dask counts for it (sys.getsizeof)
        return object.__sizeof__(self) + self.values.nbytes + self.means.nbytes


# Rows copied at a time into Fortran columns from an array that is not Fortran-ordered:
# a band's rows stay in cache (and their pages in the TLB) while numpy walks down the
# columns, where a whole C-ordered array is read a cache line per row for every column.
BAND_ROWS = 256


def copy_columns(src: np.ndarray, out: np.ndarray, shift: np.ndarray | None = None) -> None:
    """``out[...] = src`` (minus ``shift``, one value per column), ``out`` Fortran-ordered;
    by bands of rows where ``src`` is not Fortran-ordered."""
    src = np.asarray(src)
    step = max(src.shape[0], 1) if src.flags.f_contiguous else BAND_ROWS
    for lo in range(0, src.shape[0], step):
        rows = slice(lo, lo + step)
        if shift is None:
            out[rows] = src[rows]
        else:
            np.subtract(src[rows], shift, out=out[rows])


# Bytes of the Fortran buffer a block's columns go through on their way to /dev/shm.
SHARE_CHUNK_BYTES = 4 * 2**20


@dataclass(frozen=True, eq=False)  # array fields: compared by identity
class ColumnsAsGiven:
    """Columns of ``X`` as the user's array holds them, and the ``means`` to take off
    them when the fit centres ``X`` (None: it does not): made into a block's matrix
    once, where they go. Written into their Fortran form in ``/dev/shm`` through a small
    buffer (not a copy of the block on the client), or, sent to a worker, laid out
    there."""

    source: np.ndarray
    means: np.ndarray | None = None

    @property
    def shape(self) -> tuple:
        return self.source.shape

    def __sizeof__(self) -> int:  # what Dask counts: the block it becomes
        means = 0 if self.means is None else self.means.nbytes
        return object.__sizeof__(self) + int(np.prod(self.shape)) * 8 + means

    def __reduce__(self):
        return lay_out, (self.source, self.means)

    def laid_out(self):
        return lay_out(self.source, self.means)

    def write_shared(self, path: str):
        """The block's matrix written into a new file at ``path`` (see
        :func:`dask_strads.engine.shared.share`)."""
        n, p = self.shape
        fd = shared.reserve(path, n * p * 8)
        if fd is None:
            return None
        try:
            step = max(1, SHARE_CHUNK_BYTES // (8 * max(n, 1)))
            buffer = np.empty((n, min(step, p)), order="F")
            # the centred columns' norms while they are in cache (the client's check of
            # X took those of uncentred ones)
            squares = None if self.means is None else np.empty(p)
            for lo in range(0, p, step):
                part = buffer[:, :min(step, p - lo)]
                shift = None if self.means is None else self.means[lo:lo + step]
                copy_columns(self.source[:, lo:lo + step], part, shift)
                shared.write_at(fd, memoryview(part.T).cast("B"), lo * n * 8)
                if squares is not None:
                    np.einsum("ij,ij->j", part, part, out=squares[lo:lo + step])
        except BaseException:
            shared.remove([path])
            raise
        finally:
            os.close(fd)
        values = np.empty((n, p), order="F")  # a template: its pages are never touched
        shard = values if self.means is None else CentredColumns(values, self.means, squares)
        return shared.handle(path, shard, values)


def column_means(chunk) -> np.ndarray:
    """The means a centred block takes off its columns."""
    return np.asarray(chunk, dtype=np.float64).mean(axis=0)


def lay_out(source: np.ndarray, means: np.ndarray | None):
    """A block's matrix made here from ``source``: Fortran float64 columns, minus
    ``means`` (as :class:`CentredColumns`) unless None."""
    values = np.empty(source.shape, dtype=np.float64, order="F")
    copy_columns(source, values, means)
    return values if means is None else CentredColumns(values, means)


def dense_shard(chunk, centre: bool):
    """A dense chunk as a block's matrix: Fortran float64 (the chunk itself if it is
    one), centred if ``centre``."""
    chunk = np.asarray(chunk)
    if not centre and chunk.dtype == np.float64 and chunk.flags.f_contiguous:
        return chunk
    return lay_out(chunk, column_means(chunk) if centre else None)


# Most bytes of a block's pieces that one wave computes and copies in (at least a piece).
WAVE_BYTES = 64 * 2**20


def piece_bounds(chunk_widths, starts) -> list[list[tuple[int, int]]]:
    """Per block, the column ranges of its pieces: X's column chunks cut at the block
    starts (a chunk is never split otherwise: each piece is computed once)."""
    cuts = np.union1d(np.cumsum((0,) + tuple(chunk_widths)), starts)
    return [[(int(lo), int(hi)) for lo, hi in zip(inner[:-1], inner[1:])]
            for inner in (cuts[(cuts >= a) & (cuts <= b)]
                          for a, b in zip(starts[:-1], starts[1:]))]


def waves(nbytes: list[int]) -> list[list[int]]:
    """A block's pieces (of ``nbytes`` each) grouped in order, each group up to
    WAVE_BYTES (at least one piece)."""
    out: list[list[int]] = []
    size = 0
    for i, piece_bytes in enumerate(nbytes):
        if not out or size + piece_bytes > WAVE_BYTES:
            out.append([])
            size = 0
        out[-1].append(i)
        size += piece_bytes
    return out


@dataclass(frozen=True)
class _BlockPieces:
    """One block's pieces of ``X``: dask arrays optimized together (one graph, culled to
    the block's pieces) with their first row and their first column in the block.
    ``held``: the same pieces cut from X as computed once for this fit, read instead
    while the cluster holds it (empty: none). Wrapped so that ``submit`` hands them over
    uncomputed."""

    arrays: tuple
    rows: tuple
    offsets: tuple
    waves: list
    held: tuple = ()


def _make_block(pieces: _BlockPieces, n_rows: int, n_cols: int, centre: bool):
    """A block's shard, made on this worker: each wave of pieces is computed (the task
    secedes meanwhile) and copied into the block as it arrives. Dask counts the block
    once, as this task's result."""
    from distributed import Client, as_completed, get_worker, rejoin, secede

    worker = get_worker()
    values = np.empty((n_rows, n_cols), dtype=np.float64, order="F")
    whole_columns = all(r == 0 for r in pieces.rows)  # X has one chunk of rows
    means = np.zeros(n_cols)
    secede()
    try:
        # a client of the task's own: the worker's would become the default client of
        # a process whose workers are threads
        with Client(worker.scheduler.address, loop=worker.loop, security=worker.security,
                    set_as_default=False, direct_to_workers=True,
                    name="dask_strads-block") as client:
            arrays = pieces.arrays
            graph = dict(arrays[0].__dask_graph__())  # all pieces', optimized together
            if pieces.held:
                held_graph = dict(pieces.held[0].__dask_graph__())
                inputs = sorted(_held_inputs(held_graph, [a.__dask_keys__()
                                                          for a in pieces.held]), key=str)
                # X as computed once, unless it has been let go (a block made again)
                if all(client.sync(client.scheduler.who_has, keys=inputs).values()):
                    arrays, graph = pieces.held, held_graph
            for wave in pieces.waves:
                futures = _pieces_here(client, graph, [arrays[i] for i in wave],
                                       worker.address)
                where = {f.key: i for f, i in zip(futures, wave)}
                for future in as_completed(futures, loop=client.loop):
                    piece = client.gather(future)  # from this worker's memory
                    i = where[future.key]
                    lo = pieces.offsets[i]
                    rows = slice(pieces.rows[i], pieces.rows[i] + piece.shape[0])
                    cols = slice(lo, lo + piece.shape[1])
                    if not centre:
                        copy_columns(piece, values[rows, cols])
                        continue
                    with np.errstate(invalid="ignore"):  # the fit reports a non-finite X
                        if whole_columns:  # centred as they are copied in: one pass
                            means[cols] = column_means(piece)
                            copy_columns(piece, values[rows, cols], means[cols])
                        else:
                            means[cols] += piece.sum(axis=0)
                            copy_columns(piece, values[rows, cols])
                del futures, future, piece
    finally:
        rejoin()
    if centre and not whole_columns:
        means /= n_rows
        with np.errstate(invalid="ignore"):
            np.subtract(values, means, out=values)
    return CentredColumns(values, means) if centre else values


def _pieces_here(client, graph: dict, arrays: list, here: str) -> list:
    """Futures of ``arrays`` (pieces of ``graph``) in the memory of the worker at
    ``here``. A piece cut from a chunk that another worker holds is cut there and only
    the cut moves here (worker to worker, not the whole chunk); the others, and pieces
    of a graph held nowhere yet, are computed here."""
    inputs = [_held_inputs(graph, a.__dask_keys__()) for a in arrays]
    wanted = sorted(set().union(*inputs), key=str)
    held = client.sync(client.scheduler.who_has, keys=wanted) if wanted else {}
    by_maker: dict[str, list[int]] = {}
    for i, keys in enumerate(inputs):
        holders = Counter(w for k in keys for w in held.get(k, ()))
        maker = here if not holders or here in holders else holders.most_common(1)[0][0]
        by_maker.setdefault(maker, []).append(i)
    futures = [None] * len(arrays)
    for maker, idx in by_maker.items():  # one compute per worker: each culls the graph
        made = client.compute([arrays[i] for i in idx], workers=[maker],
                              allow_other_workers=maker != here)
        for i, future in zip(idx, made, strict=True):
            futures[i] = future if maker == here else client.submit(
                _moved, future, workers=[here], allow_other_workers=False, pure=False)
    return futures


def _held_inputs(graph: dict, keys) -> set:
    """The keys that computing ``keys`` reads but ``graph`` does not make: data already
    on the cluster (a persisted X's chunks)."""
    todo, seen, held = list(flatten(keys)), set(), set()
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        if key not in graph:
            held.add(key)
        else:
            todo.extend(getattr(graph[key], "dependencies", ()))
    return held


def _moved(piece):
    return piece


def _cut(X, chunk_starts: np.ndarray, i: int, lo: int, hi: int):
    """Columns ``lo:hi`` of X's ``i``-th chunk of rows, all in one chunk of X: a view of
    that chunk where it is computed (a rechunk would copy it first)."""
    j = int(np.searchsorted(chunk_starts, lo, side="right")) - 1
    chunk = X.blocks[i, j]
    a, z = lo - int(chunk_starts[j]), hi - int(chunk_starts[j])
    return chunk if (a, z) == (0, chunk.shape[1]) else chunk[:, a:z]


def dense_shards(client, X, starts, centre: bool) -> dict:
    """The dense column blocks of the dask array ``X`` (float64), each made by one task
    on its worker from X's pieces (its chunks cut at the block starts), a wave at a time.
    A worker holds its block and about a wave, where a block made as one chunk and then
    made Fortran is held twice.

    A block lost with its worker is made again the same way from X's graph, on another
    worker. Returns ``{block: future of its shard}``."""
    import dask

    n = X.shape[0]
    pieces = piece_bounds(X.chunks[1], starts)
    chunk_starts = np.cumsum((0,) + X.chunks[1])
    row_starts = np.cumsum((0,) + X.chunks[0][:-1])
    workers = client.scheduler_info(n_workers=-1)["workers"]
    addresses = sorted(workers)
    held = _computed_once(client, X, starts, chunk_starts, workers)
    shards = {}
    for b, block in enumerate(pieces):
        # rows in an order of the block's own, so that each worker holding chunks of
        # rows serves about one block at a time, not all of them at once
        order = np.roll(np.arange(len(row_starts)), -(b * len(row_starts) // len(pieces)))
        grid = [(int(i), lo, hi) for lo, hi in block for i in order]
        arrays = dask.optimize(*(_cut(X, chunk_starts, i, lo, hi) for i, lo, hi in grid))
        cut_held = () if held is None else dask.optimize(
            *(_cut(held, chunk_starts, i, lo, hi) for i, lo, hi in grid))
        spec = _BlockPieces(tuple(arrays), tuple(int(row_starts[i]) for i, _, _ in grid),
                            tuple(lo - int(starts[b]) for _, lo, _ in grid),
                            waves([X.chunks[0][i] * (hi - lo) * 8 for i, lo, hi in grid]),
                            tuple(cut_held))
        # a worker for each block (any other if it leaves)
        shards[b] = client.submit(_make_block, spec, n, int(starts[b + 1] - starts[b]),
                                  centre, pure=False, workers=[addresses[b % len(addresses)]],
                                  allow_other_workers=True)
    client.sync(_wait, list(shards.values()))
    del held  # the blocks hold their columns now
    return shards


def _computed_once(client, X, starts, chunk_starts, workers: dict):
    """``X`` persisted, for the blocks to cut where its chunks are held, when it is a
    graph held nowhere yet whose chunks each feed more than one block (else every block
    would compute them again) and the workers have room for it beside the blocks (half
    their memory holds both); None otherwise."""
    from distributed import futures_of

    if futures_of(X) or np.isin(starts[1:-1], chunk_starts).all():
        return None  # held already (in part: what it is made of), or cut along its chunks
    limits = [w.get("memory_limit") or 0 for w in workers.values()]
    if all(limits) and 4 * X.nbytes > sum(limits):
        return None
    held = client.persist(X)
    client.sync(_wait, futures_of(held))
    return held
