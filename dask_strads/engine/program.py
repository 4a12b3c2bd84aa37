"""The Program contract: what a model must provide to run on the STRADS engine.

A program is a plain picklable Python object (no numba jitclass, no client, no data)
that is shipped once to every worker of a fit. It describes one model-parallel
algorithm as three primitives:

``schedule`` (client)
    choose which blocks push this round and what each of them is told (``Plan``);
``push`` (worker)
    update a worker-resident block from its local data and return a small partial;
``pull`` (client)
    combine the partials of a round and commit the new values to the client state.

Committed values reach the workers through the next round's plan parts
("automatic sync"): the engine guarantees that the pushes of one block run in round
order, so a part may carry deltas relative to what that block saw last.

Blocks come in two kinds:

* *resident* blocks (the keys of ``data`` given to :func:`dask_strads.engine.run`) live
  in a worker-local store on the worker they are placed on, together with their data
  shard; they never move unless a worker is lost;
* *carried* blocks (LDA's vocabulary blocks, matrix factorisation factor blocks) are
  produced by one push and consumed by a push on another worker in a later round.
  They travel worker to worker as Dask data, never through the client, in the compact
  form :meth:`Program.pack_carried` gives them when they leave a worker (a block
  consumed where it was produced is not packed).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Plan", "Program"]


@dataclass
class Plan:
    """What one round does.

    Parameters
    ----------
    parts : dict
        ``block_id -> part``: the resident blocks that push this round and the
        (small, picklable) instruction each receives. Blocks absent do not push.
    carry : dict, optional
        ``block_id -> carried_id``: the carried block each pushing resident block
        receives this round. The push must then return ``(partial, new_carried)``;
        the new value replaces the carried block and is handed on by later plans.
    info : object, optional
        Anything the program wants back in :meth:`Program.pull` (e.g. the scheduled
        coordinates); never sent to workers.
    exchange : bool
        The pushes of this round may call :func:`dask_strads.engine.exchange`, an
        all-gather among them that travels worker to worker: a round can then hold
        several steps whose reduction each push repeats for itself, without the
        client. Only while the round's ``ctx.can_exchange``; never with ``carry``. Such
        a round always takes the direct channel (the task stream does not show it).
    """

    parts: dict[Hashable, Any]
    carry: dict[Hashable, Hashable] = field(default_factory=dict)
    info: Any = None
    exchange: bool = False


@dataclass(frozen=True)
class RoundContext:
    """What the engine tells :meth:`Program.schedule` about the round it plans."""

    #: the round's number, from 0 (a resumed fit continues its numbering)
    round: int
    #: whether a plan may ask for ``exchange`` now: every block on a worker of its own,
    #: pushes sent directly. It changes when a lost worker's blocks move.
    can_exchange: bool = False
    #: rounds the engine schedules ahead of the last pull (``run``'s ``staleness``)
    staleness: int = 0


class Program:
    """Base class of a schedule / push / pull program.

    Subclasses override the methods below. Methods marked *worker* run on the workers
    and must not touch the client; methods marked *client* run in the scheduler
    coroutine and must be cheap (they sit on the round's critical path).

    Attributes
    ----------
    name : str
        Short model name; task keys are ``strads-{name}-push-...`` and the fit is
        a ``distributed.span`` named ``dask_strads.{name}``.
    transport : {"auto", "tasks", "direct"}
        How pushes travel. ``"tasks"`` submits one future per worker and round (full
        Dask diagnostics, needed for carried blocks); ``"direct"`` calls a handler
        that the engine's worker plugin registers on each worker (sub-millisecond
        rounds, for algorithms made of many tiny rounds); ``"auto"`` lets the engine
        pick from measured push times.
    """

    name: str = "program"
    transport: str = "auto"

    # ----------------------------------------------------------------- worker
    def init_block(self, block_id: Hashable, shard: Any) -> Any:
        """*worker*: build the resident state of ``block_id`` from its data shard.

        The engine has realigned the shard's float arrays (see
        :func:`dask_strads.engine.wire.realign`); integer arrays may be misaligned.
        """
        return shard

    def block_summary(self, block_id: Hashable, block: Any) -> Any:
        """*worker*: a small summary of a fresh block sent to :meth:`init_state`."""
        return None

    def push(self, block: Any, part: Any, carried: Any = None) -> Any:
        """*worker*: update ``block`` (mutable, worker-local) and return a partial.

        When the plan carries a block to this one, ``carried`` is its current value
        and the return value must be ``(partial, new_carried)``. The push owns
        ``carried``: it may update it in place and return it (a large block is then never
        copied). The engine hands each value to one push only, and what it keeps for
        itself (snapshots) is a copy.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement push")

    def init_carried(self, carried_id: Hashable) -> Any:
        """*worker*: initial value of a carried block, built on its first holder."""
        raise NotImplementedError(
            f"{type(self).__name__} plans carried blocks but does not define init_carried"
        )

    def pack_carried(self, carried_id: Hashable, value: Any) -> Any:
        """*worker*: a compact form of a carried block for the wire, or None (the
        default) to send the value as it is.

        Called when Dask moves the block to another worker, or to the client, or spills
        it: a block consumed by the worker that produced it is never packed. It may be
        called more than once and must not change ``value``. The returned object must
        pickle and have a method ``unpack(scratch)`` that returns the value (``scratch``:
        the fit's worker-local dict, or None on the client).
        """
        return None

    def recycle_carried(self, carried_id: Hashable, value: Any, packed: Any,
                        scratch: dict) -> None:
        """*worker*: ``value`` left this worker (``packed``: the form it was sent in, or
        None when it was dropped unsent); its memory may serve the next ``unpack`` into
        ``scratch``, the fit's worker-local dict. Called from any thread. Default: let
        it go."""

    def block_result(self, block_id: Hashable, block: Any) -> Any:
        """*worker*: what the client gets back from this block when the fit ends
        (e.g. its rows of a factor matrix); ``None`` by default."""
        return None

    def block_arrays(self, block: Any) -> Mapping[str, Any] | None:
        """*worker*: numpy arrays to checkpoint for this block (None: rebuilt from
        its shard and the client state)."""
        return None

    def restore_block(self, block_id: Hashable, shard: Any, state_arrays: Mapping[str, Any],
                      block_arrays: Mapping[str, Any] | None) -> Any:
        """*worker*: rebuild a block after a worker loss or on resume.

        ``state_arrays`` is the client state's checkpoint (:meth:`state_arrays`);
        ``block_arrays`` the block's own checkpoint if it had one. The default
        rebuilds it fresh, which is right only for programs whose blocks hold no
        model state of their own.
        """
        return self.init_block(block_id, shard)

    # ----------------------------------------------------------------- client
    def init_state(self, summaries: Mapping[Hashable, Any]) -> Any:
        """*client*: the initial client-side state, given every block's summary."""
        return {}

    def schedule(self, state: Any, ctx: RoundContext) -> Plan | None:
        """*client*: the plan of round ``ctx.round``; ``None`` means nothing left to do.

        With ``ctx.staleness = s`` up to ``s + 1`` rounds are in flight, so ``state``
        may not yet include the pulls of the last ``s`` rounds. A plan may ask for
        ``exchange`` only while ``ctx.can_exchange``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement schedule")

    def pull(self, state: Any, partials: Mapping[Hashable, Any], plan: Plan) -> Any:
        """*client*: combine the partials of one round and commit; return the state."""
        raise NotImplementedError(f"{type(self).__name__} must implement pull")

    def objective(self, state: Any) -> float | None:
        """*client*: the latest objective value known to the state, if any."""
        return None

    def converged(self, state: Any) -> bool:
        """*client*: whether the fit may stop (checked after every pull)."""
        return False

    def why_stopped(self, state: Any) -> str | None:
        """*client*: why :meth:`converged` said to stop when the fit did not converge
        (``"max_iter"``, ``"diverged"``), for the progress bar; None: it converged."""
        return None

    def metrics(self, state: Any) -> Mapping[str, float] | None:
        """*client*: extra per-round numbers for the history (e.g. duality gap)."""
        return None

    def progress(self, state: Any) -> tuple[int, int, str] | None:
        """*client*: ``(done, total, unit)`` for the progress bar, in the program's own
        units (say rank updates, when rounds per unit vary); ``None`` (the default):
        the bar counts rounds against the fit's ``max_rounds``."""
        return None

    # ------------------------------------------------------------- checkpoint
    def state_arrays(self, state: Any) -> Mapping[str, Any]:
        """*client*: the client state as a dict of numpy arrays / scalars (no objects)."""
        raise NotImplementedError(f"{type(self).__name__} does not support checkpoints")

    def load_state(self, arrays: Mapping[str, Any]) -> Any:
        """*client*: the inverse of :meth:`state_arrays`."""
        raise NotImplementedError(f"{type(self).__name__} does not support checkpoints")
