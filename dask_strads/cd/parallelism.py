"""How much parallelism a coordinate-descent fit uses, from what the data say.

Two choices, both by the same rule: split work over workers only where the time it
saves exceeds what the coordination costs.

* **Blocks** (:func:`n_blocks`): a gap round reads every column once, in parallel over
  the blocks, and costs a round trip besides. A block should hold enough stored entries
  that its pass is several round trips long; a problem smaller than two such blocks
  runs on one worker, and extra workers cost nothing.
* **Solvers of a phase** (:func:`phase_solvers`): one solver sweeps the whole working
  set after the others ship it their columns once (nothing is shipped of the columns it
  reads where they lie, see :mod:`dask_strads.cd.phase`); several solvers sweep their shares
  at once but pay an exchange after every sweep (and need more sweeps, their updates
  being Jacobi between blocks). The cheaper of the two, by the costs measured so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from dask_strads import config


def setting(name: str):
    """The ``dask-strads.cd.<name>`` setting (defaults in ``dask_strads.yaml``)."""
    return config.get(f"cd.{name}")


def n_blocks(nnz: int, n_workers: int, min_block_nnz: float) -> int:
    """Column blocks for ``X`` with ``nnz`` stored entries on ``n_workers`` workers."""
    return int(max(1, min(n_workers, nnz // max(min_block_nnz, 1))))


@dataclass
class Costs:
    """What a phase costs, learned from the phases run so far (moving averages)."""

    sweep_per_nnz: float
    exchange: float
    bandwidth: float
    peer_factor: float
    epochs: float = 10.0
    # shares of sweep_per_nnz (the machine's speed drifts alike for all three): per
    # entry of a Gram matrix a sweep reads, per multiply-add forming it
    gram_step: float = 0.75
    gram_build: float = 0.02

    @classmethod
    def from_settings(cls) -> Costs:
        return cls(sweep_per_nnz=float(setting("sweep-seconds-per-nnz")),
                   exchange=float(setting("exchange-seconds")),
                   bandwidth=float(setting("bandwidth")),
                   peer_factor=float(setting("peer-sweeps-factor")),
                   gram_step=float(setting("gram-step-cost")),
                   gram_build=float(setting("gram-build-cost")))

    def observe(self, epochs: int, sweep_s: float, swept_nnz: int, exchanges: int,
                wait_s: float) -> None:
        """Fold in a phase's measurements."""
        a = 0.5
        if swept_nnz > 0 and sweep_s > 0:
            self.sweep_per_nnz = (1 - a) * self.sweep_per_nnz + a * sweep_s / swept_nnz
        if exchanges > 0 and wait_s > 0:
            self.exchange = (1 - a) * self.exchange + a * wait_s / exchanges
        if epochs > 0:
            self.epochs = (1 - a) * self.epochs + a * epochs

    def observe_gram(self, sweep_s: float, entries: int, build_s: float, madds: int) -> None:
        """Fold in what a phase's Gram matrix cost to sweep and to form (a small
        forming's time is mostly reading the columns, not multiply-adds)."""
        a = 0.5
        unit = self.sweep_per_nnz
        if entries > 0 and sweep_s > 0:
            self.gram_step = (1 - a) * self.gram_step + a * sweep_s / entries / unit
        if madds >= 10**8 and build_s > 0:
            self.gram_build = (1 - a) * self.gram_build + a * build_s / madds / unit


class Choice(NamedTuple):
    """A phase's solvers, and whether the solo solver sweeps the Gram matrix."""

    solvers: tuple
    gram: bool = False


def phase_solvers(ws_nnz: list[int], bytes_per_entry: int, costs: Costs,
                  reads_in_place=lambda block, solver: False,
                  gram_cost=lambda solver, epochs, rent: None) -> Choice:
    """The blocks that solve the next phase: all that hold part of the working set
    (peers), or the one for which solving it all is cheapest (solo), whichever is
    expected to be faster. ``reads_in_place(b, s)``: whether solver ``s`` reads block
    ``b``'s columns where they lie (nothing shipped); ``gram_cost(s, epochs, rent)``:
    the seconds that many sweeps cost solver ``s`` on the working set's Gram matrix,
    where that pays against sweeps of ``rent`` seconds each (None where it does not;
    see :mod:`dask_strads.cd.gram`)."""
    holders = [b for b, w in enumerate(ws_nnz) if w > 0]
    if len(holders) <= 1:
        return Choice(tuple(holders[:1]))
    total = sum(ws_nnz)
    E = costs.epochs

    def shipping(solver):
        return sum(ws_nnz[b] for b in holders
                   if b != solver and not reads_in_place(b, solver)) * bytes_per_entry \
            / costs.bandwidth

    # ties go to the block holding most of the working set
    solo, _, solver = min((costs.sweep_per_nnz * E * total + shipping(b), -ws_nnz[b], b)
                          for b in holders)
    peer = costs.peer_factor * E * (costs.sweep_per_nnz * max(ws_nnz) + costs.exchange)
    best = Choice(tuple(holders)) if peer < solo else Choice((solver,))
    on_gram = [(g + shipping(b), -ws_nnz[b], b) for b in holders
               if (g := gram_cost(b, E, min(solo, peer) / E)) is not None]
    if on_gram and min(on_gram)[0] < min(solo, peer):
        return Choice((min(on_gram)[2],), gram=True)
    return best
