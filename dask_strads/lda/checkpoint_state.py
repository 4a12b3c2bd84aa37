"""The LDA program's client state as the arrays of a checkpoint, and back; a checkpoint
of another fit (topics, vocabulary partition, threads) is refused with a ValueError
naming the setting that differs."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np


class CheckpointState:
    """The checkpoint methods of :class:`~dask_strads.lda.program.LDAProgram` (a mixin:
    they read the program's ``n_topics``, ``n_vocab``, ``block_words``, ``threads``,
    ``seed`` and ``optimize_interval``)."""

    _STATE_INTS = ("n_tokens", "pulled", "iteration", "sampled")
    _STATE_FLOATS = ("sample_seconds", "sample_cpu_seconds")
    _CHECK_INTS = ("iteration", "n_tokens", "expected_tokens", "ndk_total", "nwk_total")
    _CHECK_BOOLS = ("nk_matches_ndk", "nk_matches_nwk", "nwk_matches_recount",
                    "ndk_matches_recount")

    def state_arrays(self, state: dict) -> dict:
        """The client state as arrays, plus what identifies the fit (topics, vocabulary
        partition, seed) so that a resume on other data or settings fails clearly."""
        trace = state["trace"]
        workers = [t[4] for t in trace]
        if all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in workers):
            trace_workers = np.asarray(workers, dtype=np.int64)
        else:  # names are ints on a LocalCluster, strings elsewhere; None off the cluster
            trace_workers = np.asarray(["" if w is None else str(w) for w in workers], dtype=str)
        out = {name: np.asarray(int(state[name]), dtype=np.int64) for name in self._STATE_INTS}
        out.update({name: np.asarray(float(state[name])) for name in self._STATE_FLOATS})
        out.update(
            n_topics=np.asarray(self.n_topics), n_vocab=np.asarray(self.n_vocab),
            block_words=self.block_words.copy(), threads=np.asarray(self.threads),
            seed=np.asarray(self.seed, dtype=np.int64),
            nk=state["nk"].copy(),
            loglikelihoods=np.asarray(state["loglikelihoods"], dtype=np.float64),
            iteration_time=np.asarray(state["iteration_time"], dtype=np.float64),
            ll_doc=np.asarray(float(state["ll_parts"]["doc"])),
            ll_word=np.asarray(float(state["ll_parts"]["word"])),
            trace=np.asarray([t[:4] for t in trace], dtype=np.int64).reshape(-1, 4),
            trace_workers=trace_workers,
            recent_rounds=np.asarray(sorted(state["recent"]), dtype=np.int64),
            recent_deltas=np.array([state["recent"][r] for r in sorted(state["recent"])],
                                   dtype=np.int64).reshape(-1, self.n_topics),
            alpha_rounds=np.asarray([e for e, _ in state["alpha"]], dtype=np.int64),
            alpha_values=np.array([a for _, a in state["alpha"]],
                                  dtype=np.float64).reshape(-1, self.n_topics),
        )
        for name in self._CHECK_INTS:
            out[f"check.{name}"] = np.asarray([c[name] for c in state["checks"]], dtype=np.int64)
        for name in self._CHECK_BOOLS:
            out[f"check.{name}"] = np.asarray([c[name] for c in state["checks"]], dtype=bool)
        return out

    def load_state(self, arrays: Mapping[str, Any]) -> dict:
        """The inverse of :meth:`state_arrays` (fresh objects: a snapshot may serve twice)."""
        self.check_checkpoint(arrays)
        state = {name: int(arrays[name]) for name in self._STATE_INTS}
        state.update({name: float(arrays[name]) for name in self._STATE_FLOATS})
        workers = np.asarray(arrays["trace_workers"])
        names = ([int(w) for w in workers] if workers.dtype.kind in "iu"
                 else [str(w) or None for w in workers])
        trace = np.asarray(arrays["trace"], dtype=np.int64).reshape(-1, 4).tolist()
        n_checks = len(np.asarray(arrays["check.iteration"]))
        checks = [{name: int(arrays[f"check.{name}"][i]) for name in self._CHECK_INTS}
                  | {name: bool(arrays[f"check.{name}"][i]) for name in self._CHECK_BOOLS}
                  for i in range(n_checks)]
        state.update(
            nk=np.array(arrays["nk"], dtype=np.int64),
            loglikelihoods=[float(x) for x in np.asarray(arrays["loglikelihoods"])],
            iteration_time=[float(x) for x in np.asarray(arrays["iteration_time"])],
            trace=[(*t, w) for t, w in zip(trace, names, strict=True)],
            checks=checks,
            ll_parts={"doc": float(arrays["ll_doc"]), "word": float(arrays["ll_word"])},
        )
        deltas = np.asarray(arrays["recent_deltas"], dtype=np.int64)
        state["recent"] = {int(r): deltas[i].copy()
                           for i, r in enumerate(np.asarray(arrays["recent_rounds"]))}
        # a checkpoint from before alpha was optimised holds no updates, and a fit that does
        # not optimise it keeps its fixed prior: no updates
        rounds = np.asarray(arrays.get("alpha_rounds", np.zeros(0)), dtype=np.int64)
        values = np.asarray(arrays.get("alpha_values", np.zeros((0, self.n_topics))),
                            dtype=np.float64).reshape(-1, self.n_topics)
        state["alpha"] = ([(int(e), values[i].copy()) for i, e in enumerate(rounds)]
                          if self.optimize_interval > 0 else [])
        return state

    def check_checkpoint(self, arrays: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` unless ``arrays`` (:meth:`state_arrays`) come from an LDA fit
        with this program's topics and vocabulary partition (the same corpus, cut into the
        same number of blocks)."""
        missing = {"n_topics", "n_vocab", "block_words", "seed", "nk", "trace"} - set(arrays)
        if missing:
            raise ValueError("resume: the checkpoint is not one of an LDA fit (it lacks "
                             f"{sorted(missing)})")
        if int(arrays["n_topics"]) != self.n_topics:
            raise ValueError(f"n_components: the checkpoint has {int(arrays['n_topics'])} "
                             f"topics, this fit {self.n_topics}")
        block_words = np.asarray(arrays["block_words"])
        threads = int(arrays.get("threads", 1))  # a checkpoint from before threads
        if threads != self.threads:
            raise ValueError(f"block_threads: the checkpoint has {threads} threads per "
                             f"block, this fit {self.threads}")
        if int(arrays["n_vocab"]) != self.n_vocab or not np.array_equal(block_words,
                                                                        self.block_words):
            raise ValueError(
                f"resume: the checkpoint's vocabulary ({int(arrays['n_vocab'])} words in "
                f"{len(block_words)} fine blocks) differs from this fit's ({self.n_vocab} "
                f"words in {len(self.block_words)}): not the same corpus or number of blocks")
