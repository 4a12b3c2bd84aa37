"""LDA by word rotation on the STRADS engine.

Resident blocks are document shards (stationary, with their tokens' topics and the
doc-topic counts); carried blocks are vocabulary blocks (the word-topic counts of
their words). With P shards and P vocabulary blocks, sub-round ``s`` hands vocabulary
block ``(p + s) mod P`` to shard ``p``: no two shards ever hold the same words, every
shard sees every block once per rotation, and one iteration is one rotation. With
``threads`` T > 1 a shard is a group of T shards and a vocabulary block T fine blocks,
which the group's threads rotate among themselves inside each push
(:mod:`~dask_strads.lda.groups`).

The first rotation (``mode="count"``) builds the word-topic table on the workers:
every vocabulary block starts as zeros on its first holder and each shard adds its
counts of that block's words as the block passes by, so the table never travels
through the client.

The topic totals ``n_k`` are the only shared state. Each shard samples with its own
copy, changed by its own moves; its moves are returned as a delta partial, summed in
the pull, and the global totals are sent back in the parts of every ``sync_every``-th
sub-round (always at the start of a rotation). With the fit's staleness ``s > 0`` (the
engine's, which every schedule reads from its ``RoundContext``) the totals sent with
round ``r`` are those as of round ``r - s`` (the client keeps the last ``s`` rounds'
deltas to take them back), whatever the engine happened to have pulled: snapshots drain
the pipeline, and the chain must not depend on when they were taken. A shard keeps the
deltas of its own pushes from round ``r - s`` on, and adds them.

Checkpoints (taken with no round in flight) hold each shard's topic assignments, its copy
of the topic totals, the doc-topic prior it samples with (the client state holds the
updates of a learned alpha not yet in effect; see ``LDAProgram``), the deltas it keeps for
the next sync and, for the sparse sampler,
its doc-topic lists as they are laid out
(the sampler's draws depend on the list order); the doc-topic counts are recounted from
the assignments, and the vocabulary blocks are the engine's carried blocks. Every draw is
seeded from (seed, iteration, sub-round, shard), so a restored fit continues the very
chain it was on, whichever workers the shards land on.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from dask_strads import config
from dask_strads.engine.program import Plan, Program, RoundContext
from dask_strads.lda import kernels
from dask_strads.lda.alpha import minka_update
from dask_strads.lda.checkpoint_state import CheckpointState
from dask_strads.lda.count_block import CountBlock, give_buffer
from dask_strads.lda.doc_shard import DocShard
from dask_strads.lda.groups import ShardGroup, carried_partition
from dask_strads.lda.partition import partition_documents, partition_vocabulary

__all__ = ["CountBlock", "DocShard", "LDAProgram", "as_alpha", "partition_documents",
           "partition_vocabulary"]

SAMPLERS = tuple(kernels.SAMPLERS)
_NO_LISTS = (np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32))


def _worker_name():
    try:
        from distributed import get_worker

        return get_worker().name
    except ValueError:
        return None


def _mix(*values: int) -> int:
    """A 63-bit seed from integers (splitmix-style; stable across processes)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (int(v) & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
    return h & 0x7FFFFFFFFFFFFFFF


def as_alpha(alpha, n_topics: int, name: str = "alpha") -> np.ndarray:
    """The doc-topic prior as the kernels take it: (K,) float64, positive and finite (a
    scalar is a symmetric prior); else a ValueError naming the argument ``name``."""
    try:
        values = np.asarray(alpha, dtype=np.float64)
    except (TypeError, ValueError):
        values = None
    if values is not None and values.ndim == 0:
        values = np.full(n_topics, float(values))
    if (values is None or values.shape != (n_topics,) or not np.all(np.isfinite(values))
            or not np.all(values > 0)):
        raise ValueError(f"{name}: expected a positive finite number or {n_topics} of them "
                         f"(one per topic), got {alpha!r}")
    return np.ascontiguousarray(values)


class LDAProgram(CheckpointState, Program):
    """Collapsed LDA (Gibbs or Metropolis-Hastings sampling) with word rotation.

    Parameters
    ----------
    n_topics : int
        K.
    alpha : float or array of K floats
        Doc-topic prior (a number: symmetric); with ``optimize_interval`` its start.
    beta : float
        Symmetric topic-word prior.
    word_block, word_local, block_words : ndarray
        The vocabulary partition (:func:`partition_vocabulary`) into ``n_blocks x
        threads`` fine blocks.
    threads : int
        Shards per resident block, sampled in parallel threads by an inner rotation over
        the fine blocks of the vocabulary block they hold (:mod:`~dask_strads.lda.groups`):
        a block's data is then a sequence of ``threads`` shards.
    max_iter : int
        Iterations (rotations) after the counting rotation.
    sync_every : int
        Sub-rounds between two syncs of the topic totals (1 = every sub-round; at
        most ``n_blocks``; a rotation always starts with one).
    sampler : {"sparse", "dense", "mh", "gibbs"}
        ``kernels.sample_sparse`` (exact, O(nnz_d) per token), ``kernels.sample_dense``
        (exact, O(K) vectorised), ``kernels.sample_mh`` (exact MH, O(1)) or
        ``kernels.sample_gibbs`` (O(K), the reference).
    mh_steps : int
        Doc + word proposal pairs per token for ``"mh"``.
    seed : int
        Seed of the initial topics and of every sub-round's draws.
    check : bool
        Debug mode: after every iteration recount everything and record consistency
        checks in ``state["checks"]`` (moves this shard's whole word-topic recount to
        the client: tests only).
    return_doc_topic : bool
        Return each shard's doc-topic counts as its block result.
    optimize_interval, optimize_burn_in : int
        With ``optimize_interval > 0``, alpha is updated (``alpha.minka_update``) after
        every iteration ``it > optimize_burn_in`` with ``it % optimize_interval == 0``,
        from histograms the shards compute in that iteration's last sub-round. The new
        alpha takes effect at the first iteration start at least ``staleness + 1`` rounds
        later (the rounds in flight keep the alpha they were scheduled with), reaches the
        shards with that round's parts, and the iteration it starts ends with a full
        recount of the log-likelihood (the running one is in terms of the old alpha). The
        chain is thus a function of the seed, the rounds and the staleness only.
    """

    name = "lda"
    transport = "tasks"

    def __init__(self, n_topics: int, alpha: float, beta: float, word_block: np.ndarray,
                 word_local: np.ndarray, block_words: np.ndarray, *, max_iter: int,
                 threads: int = 1, sync_every: int = 1, sampler: str = "sparse",
                 mh_steps: int = 2, seed: int = 0, check: bool = False,
                 return_doc_topic: bool = False, optimize_interval: int = 0,
                 optimize_burn_in: int = 0):
        self.n_topics = int(n_topics)
        self.alpha = as_alpha(alpha, self.n_topics)
        self.beta = float(beta)
        self.word_block = np.ascontiguousarray(word_block, dtype=np.int32)
        self.word_local = np.ascontiguousarray(word_local, dtype=np.int32)
        self.block_words = np.asarray(block_words, dtype=np.int64)
        self.threads = int(threads)
        if self.threads < 1 or len(self.block_words) % self.threads:
            raise ValueError(f"threads: expected a whole divisor of the {len(self.block_words)} "
                             f"vocabulary blocks, got {threads!r}")
        self.n_blocks = len(self.block_words) // self.threads
        self.n_vocab = len(self.word_block)
        # the rotation's vocabulary blocks: each word's block and row, rows per block, and
        # where each fine block starts inside its block
        (self.carried_block, self.carried_local, self.carried_words,
         self.fine_offsets) = carried_partition(self.word_block, self.word_local,
                                                self.block_words, self.threads)
        self.max_iter = int(max_iter)
        self.sync_every = int(sync_every)
        self.sampler = sampler
        self.mh_steps = int(mh_steps)
        self.seed = int(seed)
        self.check = bool(check)
        self.return_doc_topic = bool(return_doc_topic)
        self.optimize_interval = int(optimize_interval)
        self.optimize_burn_in = int(optimize_burn_in)
        if self.optimize_interval < 0 or self.optimize_burn_in < 0:
            raise ValueError("optimize_interval, optimize_burn_in: expected integers >= 0, got "
                             f"{optimize_interval!r}, {optimize_burn_in!r}")
        if sampler not in kernels.SAMPLERS:
            raise ValueError(f"sampler: expected one of {SAMPLERS}, got {sampler!r}")
        if not 1 <= self.sync_every <= self.n_blocks:
            raise ValueError(f"sync_every: expected an integer in [1, n_blocks={self.n_blocks}], "
                             f"got {sync_every!r}")

    @property
    def n_rounds(self) -> int:
        """Rounds of a full fit: the counting rotation plus ``max_iter`` rotations."""
        return self.n_blocks * (self.max_iter + 1)

    # ------------------------------------------------------------------ worker
    def _tokens(self, shard: Any) -> tuple:
        """The shard's token layout (``kernels.build_tokens``): a function of the data and
        the vocabulary partition only."""
        indptr, indices, counts = shard
        offset = np.concatenate(([0], np.cumsum(self.block_words))).astype(np.int64)
        return kernels.build_tokens(
            np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int32),
            np.asarray(counts, dtype=np.int64), self.word_block, self.word_local, offset)

    def _group_data(self, block_id: Hashable, data: Any) -> list:
        """The shards of a block's data: the data itself with one thread per block, else
        a sequence of ``threads`` shards."""
        if self.threads == 1:
            return [data]
        shards = list(data)
        if len(shards) != self.threads:
            raise ValueError(f"block {block_id!r}: expected {self.threads} shards (one per "
                             f"thread), got {len(shards)}")
        return shards

    def init_block(self, block_id: Hashable, data: Any) -> ShardGroup:
        kernels.warm_up()
        shards = self._group_data(block_id, data)
        return ShardGroup(block_id, [self._init_shard(block_id * self.threads + t, shard)
                                     for t, shard in enumerate(shards)])

    def _init_shard(self, shard_id: int, shard: Any) -> DocShard:
        doc_ptr, tok_doc, tok_pos, run_word, run_ptr, block_run_ptr = self._tokens(shard)
        rng = np.random.default_rng(_mix(self.seed, 0xD0C5, shard_id))
        zd = rng.integers(0, self.n_topics, size=int(doc_ptr[-1]), dtype=np.int32)
        ndk = kernels.count_doc_topic(doc_ptr, zd, self.n_topics)
        nk = np.bincount(zd, minlength=self.n_topics).astype(np.int64)
        block = DocShard(shard_id, doc_ptr, zd, tok_doc, tok_pos, run_word, run_ptr,
                         block_run_ptr, ndk, nk, self.alpha.copy())
        if self.sampler == "sparse":
            block.use_doc_lists()
        return block

    @staticmethod
    def _prefix(t: int) -> str:
        """The prefix of shard ``t``'s arrays in its block's checkpoint (none for the
        first, so that one shard per block keeps its names)."""
        return f"{t}." if t else ""

    def block_arrays(self, block: ShardGroup) -> dict:
        """The shards' model state (:meth:`_shard_arrays`), each under its prefix."""
        return {self._prefix(t) + k: v for t, shard in enumerate(block.shards)
                for k, v in self._shard_arrays(shard).items()}

    def _shard_arrays(self, block: DocShard) -> dict:
        """The shard's model state: assignments, its topic totals and (sparse sampler) its
        doc-topic lists. Copies: the block keeps changing after the snapshot."""
        rounds = sorted(block.pending)
        arrays = {"zd": block.zd.copy(), "nk": block.nk.copy(), "alpha": block.alpha.copy(),
                  "pending_rounds": np.asarray(rounds, dtype=np.int64),
                  "pending_deltas": np.array([block.pending[r] for r in rounds],
                                             dtype=np.int64).reshape(-1, self.n_topics)}
        if block.doc_lists is not None:
            topic, count, nnz = block.doc_lists
            arrays.update(dl_topic=topic.copy(), dl_count=count.copy(), dl_nnz=nnz.copy())
        return arrays

    def restore_block(self, block_id: Hashable, data: Any, state_arrays: Mapping[str, Any],
                      block_arrays: Mapping[str, Any] | None) -> ShardGroup:
        """Rebuild a block's shards from their data and its checkpoint."""
        if block_arrays is None:
            raise ValueError(f"restore_block: no saved arrays for block {block_id!r}; the LDA "
                             "program keeps its topic assignments in its blocks")
        kernels.warm_up()
        shards = []
        for t, shard in enumerate(self._group_data(block_id, data)):
            prefix = self._prefix(t)
            if prefix + "zd" not in block_arrays:
                raise ValueError(f"resume: block {block_id!r} of the checkpoint has fewer "
                                 f"shards than the {self.threads} threads per block")
            shards.append(self._restore_shard(
                block_id * self.threads + t, shard,
                {k[len(prefix):]: v for k, v in block_arrays.items()
                 if k.startswith(prefix) and "." not in k[len(prefix):]}))
        if self._prefix(self.threads) + "zd" in block_arrays:
            raise ValueError(f"resume: block {block_id!r} of the checkpoint has more shards "
                             f"than the {self.threads} threads per block")
        return ShardGroup(block_id, shards)

    def _restore_shard(self, shard_id: int, shard: Any,
                       block_arrays: Mapping[str, Any]) -> DocShard:
        """Rebuild a shard from its data and its checkpoint; the doc-topic counts are
        recounted from the assignments, so they agree with them by construction."""
        doc_ptr, tok_doc, tok_pos, run_word, run_ptr, block_run_ptr = self._tokens(shard)
        n_tokens = int(doc_ptr[-1])
        zd = np.array(block_arrays["zd"], dtype=np.int32)
        nk = np.array(block_arrays["nk"], dtype=np.int64)
        if zd.shape != (n_tokens,):
            raise ValueError(f"resume: document shard {shard_id!r} of the checkpoint has "
                             f"{zd.size} tokens but its data has {n_tokens}: not the same "
                             "corpus")
        if nk.shape != (self.n_topics,) or (
                zd.size and (int(zd.min()) < 0 or int(zd.max()) >= self.n_topics)):
            raise ValueError(f"resume: document shard {shard_id!r} of the checkpoint does not "
                             f"hold {self.n_topics} topics")
        ndk = kernels.count_doc_topic(doc_ptr, zd, self.n_topics)
        # the alpha the shard sampled with when it was learned; else the fixed prior (also
        # for a checkpoint from before alpha was kept)
        alpha = self.alpha.copy()
        if self.optimize_interval > 0 and "alpha" in block_arrays:
            alpha = as_alpha(np.array(block_arrays["alpha"], dtype=np.float64), self.n_topics)
        block = DocShard(shard_id, doc_ptr, zd, tok_doc, tok_pos, run_word, run_ptr,
                         block_run_ptr, ndk, nk, alpha)
        deltas = np.asarray(block_arrays["pending_deltas"], dtype=np.int64)
        block.pending = {int(r): deltas[i].copy()
                         for i, r in enumerate(np.asarray(block_arrays["pending_rounds"]))}
        if self.sampler == "sparse":
            if "dl_topic" in block_arrays:
                block.doc_lists = tuple(np.array(block_arrays[k], dtype=np.int32)
                                        for k in ("dl_topic", "dl_count", "dl_nnz"))
                block.ndk = np.zeros((0, self.n_topics), dtype=np.int32)
            else:  # checkpoint of another sampler: a valid state, in list order of topics
                block.use_doc_lists()
        return block

    def block_summary(self, block_id: Hashable, block: ShardGroup) -> dict:
        return {"nk": sum(s.nk for s in block.shards).copy(), "n_tokens": block.n_tokens,
                "n_docs": sum(len(s.doc_ptr) - 1 for s in block.shards)}

    def init_carried(self, carried_id: Hashable) -> np.ndarray:
        return np.zeros((int(self.carried_words[carried_id]), self.n_topics), dtype=np.int32)

    def pack_carried(self, carried_id: Hashable, value: np.ndarray) -> CountBlock | None:
        return CountBlock.pack(value)

    def recycle_carried(self, carried_id: Hashable, value: np.ndarray, packed: Any,
                        scratch: dict) -> None:
        give_buffer(scratch, value, packed)

    def push(self, block: ShardGroup, part: dict, carried: np.ndarray | None = None):
        t0 = time.perf_counter()
        cpu0 = time.thread_time()
        q, T = part["vblock"], self.threads
        nwk = carried  # this push owns the block: sampled in place, never copied
        offsets = self.fine_offsets[q]

        def fine(t: int, u: int) -> tuple[DocShard, tuple[int, int], np.ndarray, int]:
            """Shard t at inner step u (see groups.py): its token runs of its fine block,
            that block's rows of ``nwk``, and the step's index in the iteration."""
            j = (t + u) % T
            rows = nwk[offsets[j]:offsets[j + 1]]
            return block.shards[t], block.shards[t].runs(q * T + j), rows, part["sub"] * T + u

        partial = {"block": block.block_id, "vblock": q, "iter": part["iter"],
                   "sub": part["sub"], "worker": _worker_name()}
        if part["mode"] == "count":
            def work(t, u):
                shard, (lo, hi), rows, _ = fine(t, u)
                cpu = time.thread_time()
                kernels.add_block_counts(lo, hi, shard.run_word, shard.run_ptr, shard.tok_pos,
                                         shard.zd, rows)
                return int(shard.run_ptr[hi] - shard.run_ptr[lo]), 0, 0.0, 0.0, \
                    time.thread_time() - cpu

            partial["delta"] = None
        else:
            for shard in block.shards:
                self._sync(shard, part)
            before = [shard.nk.copy() for shard in block.shards]
            sample = kernels.SAMPLERS[self.sampler]

            def work(t, u):
                shard, (lo, hi), rows, step = fine(t, u)
                cpu = time.thread_time()
                moved, d_doc, d_word = sample(
                    lo, hi, shard.run_word, shard.run_ptr, shard.tok_doc, shard.tok_pos,
                    shard.zd, shard.doc_ptr, shard.ndk, rows, shard.nk, shard.alpha, self.beta,
                    self.n_vocab * self.beta, self.mh_steps,
                    _mix(self.seed, part["iter"], step, shard.block_id),
                    *(shard.doc_lists or _NO_LISTS))
                return int(shard.run_ptr[hi] - shard.run_ptr[lo]), int(moved), \
                    float(d_doc), float(d_word), time.thread_time() - cpu

        by_shard = block.rotate(work)
        done = [step for steps in by_shard for step in steps]
        partial["n_tokens"] = sum(d[0] for d in done)
        partial["d_doc"] = sum(d[2] for d in done)
        partial["d_word"] = sum(d[3] for d in done)
        if part["mode"] != "count":
            partial["moved"] = sum(d[1] for d in done)
            deltas = [shard.nk - b for shard, b in zip(block.shards, before, strict=True)]
            for shard, delta in zip(block.shards, deltas, strict=True):
                shard.pending[part["round"]] = delta
            partial["delta"] = sum(deltas)
        if part.get("alpha_stats"):
            stats = [shard.alpha_histograms() for shard in block.shards]
            partial["alpha_stats"] = {k: np.concatenate([h[k] for h in stats])
                                      for k in stats[0]}
        if part["full_ll"]:
            partial["doc_ll"] = sum(shard.doc_loglik() for shard in block.shards)
            partial["word_ll"] = float(kernels.word_loglik(nwk, self.beta))
        if part["last"] and self.check:
            partial["check"] = self._check_block(block, nwk)
        partial["seconds"] = time.perf_counter() - t0
        # this thread's, which ran shard 0, and the other shards' threads'
        partial["cpu_seconds"] = time.thread_time() - cpu0 + sum(
            d[4] for steps in by_shard[1:] for d in steps)
        return partial, nwk

    @staticmethod
    def _sync(shard: DocShard, part: dict) -> None:
        """The shard's totals from the parts' global ones (plus its own moves since), and
        the prior the round samples with."""
        if part["nk"] is not None:
            nk_global, as_of = part["nk"]
            shard.pending = {r: d for r, d in shard.pending.items() if r >= as_of}
            nk = np.array(nk_global, dtype=np.int64)
            for d in shard.pending.values():
                nk += d
            shard.nk[:] = nk
        if part.get("alpha") is not None:
            shard.alpha = np.array(part["alpha"], dtype=np.float64)

    def _check_block(self, block: ShardGroup, nwk: np.ndarray) -> dict:
        """Every vocabulary block's counts recounted from this block's shards, and their
        doc-topic counts recounted from the assignments."""
        local = []
        for q in range(self.n_blocks):
            counts = np.zeros((int(self.carried_words[q]), self.n_topics), dtype=np.int64)
            offsets = self.fine_offsets[q]
            for j in range(self.threads):
                rows = counts[offsets[j]:offsets[j + 1]]
                for shard in block.shards:
                    lo, hi = shard.runs(q * self.threads + j)
                    kernels.add_block_counts(lo, hi, shard.run_word, shard.run_ptr,
                                             shard.tok_pos, shard.zd, rows)
            local.append(counts)
        ndks = [shard.doc_topic() for shard in block.shards]
        return {
            "n_tokens": block.n_tokens,
            "ndk_recount_ok": all(np.array_equal(
                kernels.count_doc_topic(shard.doc_ptr, shard.zd, self.n_topics), ndk)
                for shard, ndk in zip(block.shards, ndks, strict=True)),
            "ndk_colsum": sum(ndk.sum(axis=0, dtype=np.int64) for ndk in ndks),
            "local_nwk": local,
            "nwk": nwk.astype(np.int64),
        }

    def block_result(self, block_id: Hashable, block: ShardGroup) -> Any:
        return block.doc_topic().copy() if self.return_doc_topic else None

    # ------------------------------------------------------------------ client
    def init_state(self, summaries: Mapping[Hashable, Any]) -> dict:
        nk = np.zeros(self.n_topics, dtype=np.int64)
        for s in summaries.values():
            nk += s["nk"]
        return {
            "nk": nk,
            "n_tokens": int(sum(s["n_tokens"] for s in summaries.values())),
            "pulled": 0,  # rounds pulled so far
            "recent": {},  # round -> summed n_k delta, for the last `staleness` rounds pulled
            "iteration": 0,
            "loglikelihoods": [],
            "iteration_time": [],
            "trace": [],
            "checks": [],
            "ll_parts": {"doc": 0.0, "word": 0.0},
            "sampled": 0,
            "sample_seconds": 0.0,
            "sample_cpu_seconds": 0.0,
            "alpha": [],  # [(round it takes effect, alpha)], see alpha_at
        }

    def schedule(self, state: dict, ctx: RoundContext) -> Plan | None:
        P = self.n_blocks
        if ctx.round >= self.n_rounds:
            return None
        it, sub = divmod(ctx.round, P)
        mode = "count" if it == 0 else "sample"
        sync = mode == "sample" and sub % self.sync_every == 0
        nk = self._totals_as_of(state, ctx.round, ctx.staleness) if sync else None
        last = mode == "sample" and sub == P - 1
        # the log-likelihood is kept from the samplers' deltas; recounted in full at the
        # end of the counting rotation, every dask-strads.lda.full-loglik-every
        # iterations and at the end
        # (and at the end of an iteration that started with a new alpha)
        optimize = self.optimize_interval > 0 and mode == "sample"
        full_ll = sub == P - 1 and (it == 0 or it == self.max_iter or self.check
                                    or it % int(config.get("lda.full-loglik-every")) == 0
                                    or (optimize and any(e == it * P for e, _ in state["alpha"])))
        alpha_stats = (optimize and last and it > self.optimize_burn_in
                       and it % self.optimize_interval == 0)
        alpha = self.alpha_at(state, ctx.round) if optimize and sub == 0 else None
        parts, carry = {}, {}
        for p in range(P):
            vblock = (p + sub) % P
            parts[p] = {"mode": mode, "iter": it, "sub": sub, "round": ctx.round,
                        "vblock": vblock, "nk": nk, "last": last, "full_ll": full_ll,
                        "alpha": alpha, "alpha_stats": alpha_stats}
            carry[p] = vblock
        return Plan(parts=parts, carry=carry, info={"mode": mode, "iter": it, "sub": sub,
                                                   "round": ctx.round, "last": last,
                                                   "full_ll": full_ll,
                                                   "alpha_stats": alpha_stats,
                                                   "staleness": ctx.staleness})

    def alpha_at(self, state: dict, round: int) -> np.ndarray:
        """The doc-topic prior in effect in round ``round``."""
        alpha = self.alpha
        for effective, value in state["alpha"]:
            if effective <= round:
                alpha = value
        return alpha

    def _update_alpha(self, state: dict, partials: Mapping[Hashable, Any], info: dict) -> None:
        """Minka's update from this round's histograms; in effect from the first iteration
        start at least ``staleness + 1`` rounds on (the rounds in flight keep theirs)."""
        r, P = info["round"], self.n_blocks
        new = minka_update(self.alpha_at(state, r),
                           [partials[b]["alpha_stats"] for b in sorted(partials)])
        effective = -(-(r + 1 + info["staleness"]) // P) * P
        entries = [(e, a) for e, a in state["alpha"] if e < effective] + [(effective, new)]
        # rounds before the last pulled one are never asked about again: of the entries in
        # effect by then, only the last is kept
        in_effect = [i for i, (e, _) in enumerate(entries) if e <= r]
        state["alpha"] = entries[in_effect[-1]:] if in_effect else entries

    def _totals_as_of(self, state: dict, round: int,
                      staleness: int) -> tuple[np.ndarray, int]:
        """The topic totals as of round ``round - staleness`` (never beyond what was
        pulled), and that round: the same value however far the engine had pulled.

        The kept deltas cover rounds ``min(recent)`` to ``pulled - 1`` (fewer after a
        resume with a larger staleness): never go back further than they reach."""
        pulled = state["pulled"]
        covered = min(state["recent"], default=pulled)
        as_of = max(min(max(round - staleness, 0), pulled), covered)
        nk = state["nk"].copy()
        for r, delta in state["recent"].items():
            if r >= as_of:
                nk -= delta
        return nk, as_of

    def pull(self, state: dict, partials: Mapping[Hashable, Any], plan: Plan) -> dict:
        info = plan.info
        delta = np.zeros(self.n_topics, dtype=np.int64)
        for p, partial in partials.items():
            state["trace"].append((info["iter"], info["sub"], partial["vblock"], p,
                                   partial["worker"]))
            if partial["delta"] is not None:
                delta += partial["delta"]
                state["sampled"] += partial["n_tokens"]
                state["sample_seconds"] += partial["seconds"]
                state["sample_cpu_seconds"] += partial["cpu_seconds"]
        state["nk"] += delta
        state["pulled"] = info["round"] + 1
        staleness = info["staleness"]
        if staleness:  # later schedules send totals as of rounds >= pulled - staleness
            state["recent"][info["round"]] = delta
            state["recent"] = {r: d for r, d in state["recent"].items()
                               if r >= state["pulled"] - staleness}
        parts = state["ll_parts"]
        if info["full_ll"]:
            parts["doc"] = sum(p["doc_ll"] for p in partials.values())
            parts["word"] = sum(p["word_ll"] for p in partials.values())
        else:
            parts["doc"] += sum(p["d_doc"] for p in partials.values())
            parts["word"] += sum(p["d_word"] for p in partials.values())
        if info.get("alpha_stats"):
            self._update_alpha(state, partials, info)
        if info["last"]:
            ll = (parts["doc"] + parts["word"]
                  + kernels.topic_loglik(state["nk"], self.n_vocab, self.beta))
            state["loglikelihoods"].append(ll)
            state["iteration"] = info["iter"]
            if self.check:
                state["checks"].append(self._check_state(state, partials))
        return state

    def _check_state(self, state: dict, partials: Mapping[Hashable, Any]) -> dict:
        checks = [p["check"] for p in partials.values()]
        n_tokens = sum(c["n_tokens"] for c in checks)
        ndk_colsum = sum(c["ndk_colsum"] for c in checks)
        tables = {p["vblock"]: p["check"]["nwk"] for p in partials.values()}
        recount = [sum(c["local_nwk"][b] for c in checks) for b in range(self.n_blocks)]
        nwk_colsum = sum(t.sum(axis=0) for t in tables.values())
        return {
            "iteration": state["iteration"],
            "n_tokens": n_tokens,
            "expected_tokens": state["n_tokens"],
            "ndk_total": int(ndk_colsum.sum()),
            "nwk_total": int(nwk_colsum.sum()),
            "nk_matches_ndk": bool(np.array_equal(ndk_colsum, state["nk"])),
            "nk_matches_nwk": bool(np.array_equal(nwk_colsum, state["nk"])),
            "nwk_matches_recount": all(np.array_equal(tables[b], recount[b])
                                       for b in range(self.n_blocks)),
            "ndk_matches_recount": all(c["ndk_recount_ok"] for c in checks),
        }

    def objective(self, state: dict) -> float | None:
        """Latest complete-data log-likelihood per token (higher is better)."""
        if not state["loglikelihoods"]:
            return None
        return state["loglikelihoods"][-1] / max(state["n_tokens"], 1)

    def metrics(self, state: dict) -> Mapping[str, float]:
        ll = state["loglikelihoods"][-1] if state["loglikelihoods"] else float("nan")
        return {"iteration": state["iteration"], "loglikelihood": ll,
                "tokens_sampled": state["sampled"], "sample_s": state["sample_seconds"],
                "sample_cpu_s": state["sample_cpu_seconds"]}
