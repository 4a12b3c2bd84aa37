"""How a dense column block of dask input is kept on the cluster: as the block uses it.

A block sweeps Fortran columns, centred when the fit centres ``X`` for its intercept.
Made once on a worker, piece by piece, the shard is then the block's own matrix (no copy
per block, none at a recovery), so a block costs its columns' bytes once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from distributed.client import _wait  # without the data


@dataclass
class CentredColumns:
    """Columns of ``X`` minus their ``means``, as a Fortran array."""

    values: np.ndarray
    means: np.ndarray

    @property
    def shape(self) -> tuple:
        return self.values.shape

    def __sizeof__(self) -> int:  # what Dask counts for it (sys.getsizeof)
        return object.__sizeof__(self) + self.values.nbytes + self.means.nbytes


def dense_shard(chunk, centre: bool):
    """A dense chunk as a block's matrix: Fortran float64, centred if ``centre``."""
    if not centre:
        return np.asfortranarray(chunk, dtype=np.float64)
    means = np.asarray(chunk, dtype=np.float64).mean(axis=0)
    values = np.empty(chunk.shape, dtype=np.float64, order="F")
    np.subtract(chunk, means, out=values)
    return CentredColumns(values, means)


# Most bytes of a block's pieces that one wave computes and copies in (at least a piece).
WAVE_BYTES = 64 * 2**20


def piece_bounds(chunk_widths, starts) -> list[list[tuple[int, int]]]:
    """Per block, the column ranges of its pieces: X's column chunks cut at the block
    starts (a chunk is never split otherwise: each piece is computed once)."""
    cuts = np.union1d(np.cumsum((0,) + tuple(chunk_widths)), starts)
    return [[(int(lo), int(hi)) for lo, hi in zip(inner[:-1], inner[1:])]
            for inner in (cuts[(cuts >= a) & (cuts <= b)]
                          for a, b in zip(starts[:-1], starts[1:]))]


def waves(pieces: list[tuple[int, int]], n_rows: int) -> list[list[int]]:
    """A block's pieces grouped in order, each group up to WAVE_BYTES (at least one)."""
    out: list[list[int]] = []
    size = 0
    for i, (lo, hi) in enumerate(pieces):
        nbytes = (hi - lo) * n_rows * 8
        if not out or size + nbytes > WAVE_BYTES:
            out.append([])
            size = 0
        out[-1].append(i)
        size += nbytes
    return out


class _Unfilled:
    """A block being filled: its Fortran columns and their means, as one link of the
    block's chain holds them. Each link takes the arrays from the one before, which is
    left empty: Dask counts the block's bytes for the link that holds it (so that the
    scheduler never finds a link cheap to move to another worker), and a link it spills
    while the next one is stored costs nothing to write."""

    __slots__ = ("values", "means")

    def __init__(self, n_rows: int, n_cols: int):
        self.values = np.empty((n_rows, n_cols), dtype=np.float64, order="F")
        self.means = np.zeros(n_cols)

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """The arrays, which this link no longer holds."""
        if self.values is None:
            raise RuntimeError("a link of a block's chain was read twice")
        values, means = self.values, self.means
        self.values = self.means = None
        return values, means

    def __sizeof__(self) -> int:
        held = 0 if self.values is None else self.values.nbytes + self.means.nbytes
        return object.__sizeof__(self) + held


def _copy_in(block: _Unfilled, piece, offset: int, centre: bool) -> _Unfilled:
    """The next link of a block's chain: ``block``'s arrays with ``piece`` (whole
    columns) in its columns from ``offset``, centred with ``centre``."""
    out = _Unfilled.__new__(_Unfilled)
    out.values, out.means = block.take()
    cols = slice(offset, offset + piece.shape[1])
    if centre:
        out.means[cols] = piece.mean(axis=0)
        np.subtract(piece, out.means[cols], out=out.values[:, cols])
    else:
        out.values[:, cols] = piece
    return out


def _finish(block: _Unfilled, centre: bool):
    values, means = block.take()
    return CentredColumns(values, means) if centre else values


def dense_shards(client, X, starts, centre: bool) -> dict:
    """The dense column blocks of the dask array ``X`` (float64), made on the cluster a
    piece at a time: each block is allocated on a worker, and a wave at a time every
    block's next piece is computed and copied in. A worker holds its block and about a
    piece, where a block made as one chunk and then made Fortran is held twice.

    Each block is a chain of tasks (allocate, copy a piece in, ..., finish) whose links
    hand the same array on, so a block lost with its worker is made again the same way
    from X's graph. Returns ``{block: future of its shard}``."""
    n = X.shape[0]
    pieces = piece_bounds(X.chunks[1], starts)
    X = X.rechunk({0: -1, 1: tuple(hi - lo for block in pieces for lo, hi in block)})
    addresses = sorted(client.scheduler_info(n_workers=-1)["workers"])
    # a worker for each block's chain and the pieces it copies in (any other if it leaves)
    where = {b: {"workers": [addresses[b % len(addresses)]], "allow_other_workers": True}
             for b in range(len(pieces))}
    blocks = {b: client.submit(_Unfilled, n, int(starts[b + 1] - starts[b]), pure=False,
                               **where[b]) for b in range(len(pieces))}
    first = np.cumsum([0] + [len(block) for block in pieces])
    groups = {b: waves(block, n) for b, block in enumerate(pieces)}
    for wave in range(max(len(g) for g in groups.values())):
        todo = [b for b in blocks if wave < len(groups[b])]
        for b in todo:
            for i in groups[b][wave]:
                piece = client.compute(X.blocks[0, int(first[b]) + i], **where[b])
                offset = pieces[b][i][0] - int(starts[b])
                blocks[b] = client.submit(_copy_in, blocks[b], piece, offset, centre,
                                          pure=False, **where[b])
        client.sync(_wait, [blocks[b] for b in todo])  # one wave's pieces at a time
        del piece
    shards = {b: client.submit(_finish, f, centre, pure=False, **where[b])
              for b, f in blocks.items()}
    client.sync(_wait, list(shards.values()))
    return shards
