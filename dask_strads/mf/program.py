"""CCD++ matrix factorisation as a STRADS program with partitioned factors.

Layout
------
The rows of ``A`` (and of ``W``) are cut into ``P`` contiguous ranges balanced by the
number of observed entries; the rows of ``H`` into ``P`` contiguous ranges too. Resident
block ``p`` holds its row range of ``A`` as a CSR whose values are the residual
``R = A - W H'`` on those entries, its rows of ``W``, its rows of ``H``, and the held-out
(validation) entries of its row range with their residual.

Rounds: one per (rank component, inner sweep)
---------------------------------------------
CCD++ visits the rank components ``t = 0 .. k-1`` in order; for each it runs up to
``inner_iter`` sweeps of (``w_t`` update, ``h_t`` update), on ``R_hat = R + w_t h_t'``
(fewer once ``h_t`` settles, with ``inner_tol``).
The column update ``h_jt = sum_i R_hat_ij w_it / (lambda + sum_i w_it^2)`` is a sum over
rows, so it splits over row blocks (the STRADS formulation: push partial numerators and
denominators, pull divides). One engine round therefore does a whole inner sweep:

push (block p)
    receives the full current ``h_t`` (length n); updates its slice of ``w_t`` exactly
    (a row's update needs only its own entries), then accumulates over its entries the
    column sums ``num_j = sum_i R_hat_ij w_it`` and ``den_j = sum_i w_it^2`` and returns
    them (an ``(n, 2)`` array: side by side, each entry's two sums share a cache line in
    the kernel, as its ``h_j`` and previous-rank ``h_j`` do). At ``s = 0`` the part also
    carries the previous rank's final ``h``: the block drops the previous rank's term
    from its residual and adds rank ``t``'s in the same pass, stores its rows of that
    ``h``, and updates its validation residual. A sweep that may be the component's
    last (the ``inner_iter``-th; any, with ``inner_tol``) also returns ``||w_t||^2`` over
    its rows, ``sum R_hat^2`` and its rows of the next rank's ``h``.
pull (client)
    ``h_t = sum_p num / (lambda + sum_p den)``; after the last sweep, the training loss is
    ``sum R_hat^2 - 2 h.num + (h*h).den`` (exact: ``R = R_hat - w_t h_t'``), which with
    the squared column norms of ``W`` and ``H`` gives the objective
    ``sum_Omega (a_ij - w_i'h_j)^2 + lambda (||W||^2 + ||H||^2)`` after every rank.

Only length-n vectors travel (put the smaller dimension in the columns), nothing of
length m; the client holds ``h_t`` and the previous rank's ``h`` only.

Reduced on the workers: one round per rank component
-----------------------------------------------------
While every block has a worker of its own (``ctx.can_exchange``), the client does not
sum the partials: one round runs a whole component, its pushes sum ``num, den`` among
themselves after every sweep (``all_reduce``, :mod:`dask_strads.mf.rank_on_workers`)
and return scalars. The client's cost per round then grows only with the number of
workers' (small) messages, not with ``n``. The blocks keep the last
component's ``h`` until the next round's first sweep applies it. Should blocks come to
share a worker (after a lost worker), a "sync" round brings the current and previous
``h`` back to the client, and the rounds go on as above. A final "flush"
round applies the last rank's ``h`` to the blocks (their residuals and ``H`` rows) and
returns the final validation error. ``W`` and ``H`` come back through ``block_result``.

This departs from a CSR + CSC layout with a separate h round (two rounds per sweep and a
length-m vector each): one round per sweep, half the residual memory, no m-vectors.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from dask_strads.engine.program import Plan, Program, RoundContext
from dask_strads.mf import kernels
from dask_strads.mf.rank_on_workers import push_rank
from dask_strads.mf.shards import RANK_TILE, factor_chunk

__all__ = ["MFProgram"]

class MFProgram(Program):
    """CCD++ (Yu et al. 2012) with W and H partitioned over resident blocks.

    Parameters
    ----------
    n_components : int
        Rank ``k``.
    alpha : float
        L2 weight ``lambda`` on both factors.
    max_iter : int
        Maximum number of outer iterations (one iteration visits every rank once).
    tol : float
        Stop when an outer iteration lowers the objective by less than ``tol`` times
        its value (``tol = 0`` runs ``max_iter`` iterations).
    inner_iter : int
        Most CCD++ inner sweeps (w_t, h_t alternations) per rank component; one round each.
    inner_tol : float
        A sweep that changes ``h_t`` by at most ``inner_tol`` times its norm is the
        component's last (0: always ``inner_iter`` sweeps). Then every sweep returns
        what the end of a component needs (its rows of the next rank's ``h``, ``sum
        R_hat^2``, ``||w_t||^2``), not only the ``inner_iter``-th.
    init : tuple
        ``("random", seed, scale)`` (factors drawn on the workers) or ``("given", W0,
        H0)`` (shipped with the shards, see :func:`~dask_strads.mf.shards.build_shard`).
    """

    name = "mf"
    transport = "direct"

    def __init__(self, n_components: int, alpha: float, max_iter: int, tol: float,
                 inner_iter: int = 1, init: tuple = ("random", 0, 0.1), inner_tol: float = 0.0):
        self.n_components = int(n_components)
        self.alpha = float(alpha)
        self.max_iter = int(max_iter)
        self.tol = float(tol)
        self.inner_iter = int(inner_iter)
        self.inner_tol = float(inner_tol)
        # only the random recipe travels with the program; given factors travel in shards
        self.init = init if init[0] == "random" else ("given",)

    def n_rounds(self) -> int:
        """Most rounds of a fit that runs all ``max_iter`` iterations: every sweep a round
        of its own, a sync round and the flush."""
        return self.max_iter * self.n_components * self.inner_iter + 2

    # ----------------------------------------------------------------- worker
    def init_block(self, block_id: Hashable, shard: dict) -> dict:
        kernels.warm_up()
        k = self.n_components
        m, n = shard["shape"]
        r0, r1 = shard["row_range"]
        c0, c1 = shard["col_range"]
        init = shard["init"] if shard.get("init") is not None else self.init
        W = np.asfortranarray(factor_chunk(init, "W", r0, r1, 0, k))
        H = np.asfortranarray(factor_chunk(init, "H", c0, c1, 0, k))
        indptr, indices, values = shard["csr"]
        resid = values.copy()
        val = shard["val"]
        val_resid = val[2].copy() if val is not None else None
        for t0 in range(0, k, RANK_TILE):
            t1 = min(k, t0 + RANK_TILE)
            h_all = factor_chunk(init, "H", 0, n, t0, t1)
            w_own = np.ascontiguousarray(W[:, t0:t1])
            kernels.subtract_products(indptr, indices, resid, w_own, h_all)
            if val is not None:
                kernels.subtract_pair_products(val[0], val[1], val_resid, w_own, h_all)
        return {
            "row_range": (r0, r1), "col_range": (c0, c1), "n_cols": n,
            "csr": (indptr, indices, resid),
            "val": (val[0], val[1], val_resid) if val is not None else None,
            "W": W, "H": H,
            # rank being updated: its w before the update (own rows) and h (all columns)
            "w_old": None, "h_old": None,
            # the last component's h (all columns) while the blocks hold it, not the client
            "h_pending": None,
            # the next component's h (all columns), summed by the last round
            "h_next": None,
        }

    def block_summary(self, block_id: Hashable, block: dict) -> dict:
        W, H = block["W"], block["H"]
        val = block["val"]
        resid = block["csr"][2]
        return {
            "row_range": block["row_range"], "col_range": block["col_range"],
            "h_next": H[:, 0].copy(),
            "w_norms": np.einsum("ij,ij->j", W, W), "h_norms": np.einsum("ij,ij->j", H, H),
            "sse": float(np.dot(resid, resid)),
            "val_sse": float(np.dot(val[2], val[2])) if val is not None else 0.0,
            "n_val": len(val[2]) if val is not None else 0,
            "nnz": len(resid),
        }

    def _finish_rank(self, block: dict, prev_t: int, h_prev: np.ndarray) -> float:
        """Store the previous rank's final h rows; bring the validation residual up to date."""
        c0, c1 = block["col_range"]
        block["H"][:, prev_t] = h_prev[c0:c1]
        val = block["val"]
        if val is None:
            return 0.0
        return kernels.pair_rank_one_update(val[0], val[1], val[2], block["w_old"],
                                            block["h_old"], block["W"][:, prev_t], h_prev)

    @staticmethod
    def _held(block: dict, name: str) -> np.ndarray:
        """A full-length h that the block's previous round kept (``name``)."""
        if block.get(name) is None:
            raise RuntimeError(f"dask_strads: an MF block lacks the {name} that its previous "
                               "round kept")
        return block[name]

    def push(self, block: dict, part: tuple, carried: Any = None) -> Any:
        kind = part[0]
        W = block["W"]
        indptr, indices, resid = block["csr"]
        out: dict = {}
        if kind == "rank":
            _, t, prev_t, h_prev, pending = part
            h_t = None
            if pending:
                h_prev, block["h_pending"] = self._held(block, "h_pending"), None
                h_t, block["h_next"] = self._held(block, "h_next"), None
            if h_prev is not None:
                out["val_sse"] = self._finish_rank(block, prev_t, h_prev)
            terms, block["h_pending"], block["h_next"] = push_rank(
                block, t, h_prev, prev_t, (t + 1) % self.n_components, h_t, self.alpha,
                self.inner_iter, self.inner_tol)
            out.update(terms)
            return out
        if kind == "sync":  # the blocks' rows of the current and the previous h
            _, t, prev_t = part
            block["h_pending"] = block["h_next"] = None
            return {"h": block["H"][:, t].copy(), "h_prev": block["H"][:, prev_t].copy()}
        if kind == "flush":
            _, prev_t, h_prev = part
            if h_prev is None:
                h_prev, block["h_pending"] = self._held(block, "h_pending"), None
            out["val_sse"] = self._finish_rank(block, prev_t, h_prev)
            out["sse"] = kernels.rank_one_subtract(indptr, indices, resid, W[:, prev_t], h_prev)
            return out
        _, t, s, prev_t, h_prev, h, next_t = part
        w_t = W[:, t]
        first = s == 0
        do_sub = first and h_prev is not None
        if do_sub:
            out["val_sse"] = self._finish_rank(block, prev_t, h_prev)
        if first:
            block["w_old"] = w_t.copy()
            block["h_old"] = h
        n = block["n_cols"]
        hh = np.empty((n, 2))  # (h_prev, h) side by side: one cache line per entry
        hh[:, 1] = h
        if do_sub:
            hh[:, 0] = h_prev
        nd = np.zeros((n, 2))
        ssq = kernels.rank_one_rows(
            indptr, indices, resid, W[:, prev_t] if do_sub else w_t, w_t, hh.reshape(-1),
            self.alpha, w_t, do_sub, first, nd.reshape(-1), next_t is not None,
        )
        out["nd"] = nd
        if next_t is not None:  # this sweep may be rank t's last
            out["ssq_hat"] = ssq
            out["w_norm"] = float(np.dot(w_t, w_t))
            out["h_next"] = block["H"][:, next_t].copy()
        return out

    def block_result(self, block_id: Hashable, block: dict) -> dict:
        # the CSR pattern says which columns each row has seen (for recommendations)
        return {"row_range": block["row_range"], "col_range": block["col_range"],
                "W": np.ascontiguousarray(block["W"]), "H": np.ascontiguousarray(block["H"]),
                "seen_indptr": block["csr"][0], "seen_indices": block["csr"][1]}

    # ----------------------------------------------------------------- client
    def init_state(self, summaries: Mapping[Hashable, Any]) -> dict:
        blocks = list(summaries)
        col_order = sorted(blocks, key=lambda b: summaries[b]["col_range"])
        w_norms = sum(summaries[b]["w_norms"] for b in blocks)
        h_norms = sum(summaries[b]["h_norms"] for b in blocks)
        sse = sum(summaries[b]["sse"] for b in blocks)
        objective = sse + self.alpha * (w_norms.sum() + h_norms.sum())
        return {
            "blocks": blocks, "col_order": col_order,
            "iteration": 0, "t": 0, "s": 0, "finishing": False,
            "h": np.concatenate([summaries[b]["h_next"] for b in col_order]),
            "h_prev": None, "prev_t": 0, "on_blocks": False,
            "w_norms": np.asarray(w_norms, dtype=np.float64),
            "h_norms": np.asarray(h_norms, dtype=np.float64),
            "sse": sse, "nnz": sum(summaries[b]["nnz"] for b in blocks),
            "val_sse": sum(summaries[b]["val_sse"] for b in blocks),
            "n_val": sum(summaries[b]["n_val"] for b in blocks),
            "val_ranks": 0,  # rank updates included in val_sse
            "objective": objective, "iteration_objectives": [objective],
            "done": False, "converged": False, "converged_pending": False,
        }

    def schedule(self, state: dict, ctx: RoundContext) -> Plan | None:
        if state["done"]:
            return None
        if state["finishing"]:
            part = ("flush", state["prev_t"], state["h_prev"])
            return Plan(parts=dict.fromkeys(state["blocks"], part), info=("flush",))
        t, s = state["t"], state["s"]
        if ctx.can_exchange and s == 0:
            part = ("rank", t, state["prev_t"], state["h_prev"], state["on_blocks"])
            return Plan(parts=dict.fromkeys(state["blocks"], part), info=("rank", t),
                        exchange=True)
        if state["on_blocks"]:
            part = ("sync", t, state["prev_t"])
            return Plan(parts=dict.fromkeys(state["blocks"], part), info=("sync",))
        first = s == 0
        last = s == self.inner_iter - 1
        # a sweep that may end the component returns what ending it needs
        may_end = last or self.inner_tol > 0.0
        part = ("sweep", t, s, state["prev_t"], state["h_prev"] if first else None, state["h"],
                (t + 1) % self.n_components if may_end else None)
        return Plan(parts=dict.fromkeys(state["blocks"], part), info=("sweep", t, s))

    def _pull_validation(self, state: dict, partials: Mapping[Hashable, Any]) -> None:
        state["val_sse"] = sum(p["val_sse"] for p in partials.values())
        state["val_ranks"] += 1

    def pull(self, state: dict, partials: Mapping[Hashable, Any], plan: Plan) -> dict:
        if plan.info[0] == "flush":
            self._pull_validation(state, partials)
            state["sse_check"] = sum(p["sse"] for p in partials.values())
            state["done"] = True
            state["converged"] = state["converged_pending"]
            return state
        if plan.info[0] == "sync":
            col_order = state["col_order"]
            state["h"] = np.concatenate([partials[b]["h"] for b in col_order])
            state["h_prev"] = np.concatenate([partials[b]["h_prev"] for b in col_order])
            state["on_blocks"] = False
            return state
        if plan.info[0] == "rank":
            return self._pull_rank(state, partials, plan.info[1])
        _, t, s = plan.info
        parts = list(partials.values())
        if s == 0 and "val_sse" in parts[0]:
            self._pull_validation(state, partials)
        nd = parts[0]["nd"].copy()
        for p in parts[1:]:
            nd += p["nd"]
        num, den = nd[:, 0], nd[:, 1]
        den_l = den + self.alpha
        h = np.divide(num, den_l, out=np.zeros(len(num)), where=den_l > 0)
        if s < self.inner_iter - 1:
            # the rank-one subproblem has settled when h hardly moves: end it at this
            # sweep, since another sweep would cost a round and barely lower the loss
            settled = self.inner_tol > 0.0 and float(np.sum((h - state["h"]) ** 2)) <= \
                self.inner_tol**2 * float(np.dot(h, h))
            if not settled:
                state["h"] = h
                state["s"] = s + 1
                return state
        # the component's last sweep: R = R_hat - w_t h_t' gives the training loss
        # without another pass
        ssq_hat = sum(p["ssq_hat"] for p in parts)
        state["sse"] = ssq_hat - 2.0 * np.dot(h, num) + np.dot(h * h, den)
        state["w_norms"][t] = sum(p["w_norm"] for p in parts)
        state["h_norms"][t] = np.dot(h, h)
        state["h_prev"] = h
        next_t = (t + 1) % self.n_components
        state["h"] = h if next_t == t else np.concatenate(
            [partials[b]["h_next"] for b in state["col_order"]])
        return self._end_rank(state, t)

    def _pull_rank(self, state: dict, partials: Mapping[Hashable, Any], t: int) -> dict:
        """A component reduced on the workers: sum the loss's terms; h stays there."""
        parts = list(partials.values())
        if "val_sse" in parts[0]:
            self._pull_validation(state, partials)
        state["sse"] = sum(p["ssq_hat"] for p in parts) - 2.0 * sum(
            p["h_num"] for p in parts) + sum(p["hh_den"] for p in parts)
        state["w_norms"][t] = sum(p["w_norm"] for p in parts)
        state["h_norms"][t] = sum(p["h_norm"] for p in parts)
        state["h"] = state["h_prev"] = None
        state["on_blocks"] = True
        return self._end_rank(state, t)

    def _end_rank(self, state: dict, t: int) -> dict:
        """Commit component ``t``'s loss and move on to the next component."""
        state["objective"] = state["sse"] + self.alpha * (
            state["w_norms"].sum() + state["h_norms"].sum())
        state["prev_t"] = t
        next_t = (t + 1) % self.n_components
        state["s"], state["t"] = 0, next_t
        if next_t == 0:
            state["iteration"] += 1
            previous = state["iteration_objectives"][-1]
            state["iteration_objectives"].append(state["objective"])
            if previous - state["objective"] < self.tol * abs(previous):
                state["converged_pending"] = True
                state["finishing"] = True
            elif state["iteration"] >= self.max_iter:
                state["finishing"] = True
        return state

    def objective(self, state: dict) -> float:
        return state["objective"]

    def converged(self, state: dict) -> bool:
        return state["converged"]

    def progress(self, state: dict) -> tuple[int, int, str]:
        # rank updates: their number of rounds varies with inner_tol
        k = self.n_components
        return state["iteration"] * k + state["t"], self.max_iter * k, "rank update"

    def metrics(self, state: dict) -> dict:
        out = {"iteration": state["iteration"], "rank": state["t"],
               "train_rmse": float(np.sqrt(max(state["sse"], 0.0) / max(state["nnz"], 1)))}
        if state["n_val"]:
            # the validation error lags one round: it covers the first val_ranks updates
            out["rmse"] = float(np.sqrt(state["val_sse"] / state["n_val"]))
            out["rmse_ranks"] = state["val_ranks"]
        return out

    # ------------------------------------------------------------- checkpoint
    _STATE_SCALARS = ("iteration", "t", "s", "prev_t", "finishing", "done", "converged",
                      "converged_pending", "sse", "nnz", "val_sse", "n_val", "val_ranks",
                      "objective", "on_blocks")

    def state_arrays(self, state: dict) -> dict:
        out = {name: np.asarray(state[name]) for name in self._STATE_SCALARS}
        out.update(
            blocks=np.asarray(state["blocks"]), col_order=np.asarray(state["col_order"]),
            has_h=np.asarray(state["h"] is not None),
            h=state["h"] if state["h"] is not None else np.zeros(0),
            w_norms=state["w_norms"], h_norms=state["h_norms"],
            has_h_prev=np.asarray(state["h_prev"] is not None),
            h_prev=state["h_prev"] if state["h_prev"] is not None else np.zeros(0),
            iteration_objectives=np.asarray(state["iteration_objectives"], dtype=np.float64),
        )
        return out

    def load_state(self, arrays: Mapping[str, Any]) -> dict:
        state = {name: np.asarray(arrays[name]).item() for name in self._STATE_SCALARS}
        state.update(
            blocks=np.asarray(arrays["blocks"]).tolist(),
            col_order=np.asarray(arrays["col_order"]).tolist(),
            h=(np.array(arrays["h"], dtype=np.float64)
               if bool(np.asarray(arrays["has_h"])) else None),
            w_norms=np.array(arrays["w_norms"], dtype=np.float64),
            h_norms=np.array(arrays["h_norms"], dtype=np.float64),
            h_prev=(np.array(arrays["h_prev"], dtype=np.float64)
                    if bool(np.asarray(arrays["has_h_prev"])) else None),
            iteration_objectives=np.asarray(arrays["iteration_objectives"]).tolist(),
        )
        return state

    def block_arrays(self, block: dict) -> dict:
        val = block["val"]
        return {
            "W": np.array(block["W"]), "H": np.array(block["H"]),
            "resid": block["csr"][2].copy(),
            "val_resid": val[2].copy() if val is not None else np.zeros(0),
            "has_old": np.asarray(block["w_old"] is not None),
            "w_old": block["w_old"].copy() if block["w_old"] is not None else np.zeros(0),
            "h_old": np.array(block["h_old"]) if block["h_old"] is not None else np.zeros(0),
            **{f"has_{name}": np.asarray(block.get(name) is not None)
               for name in ("h_pending", "h_next")},
            **{name: np.array(block[name]) if block.get(name) is not None else np.zeros(0)
               for name in ("h_pending", "h_next")},
        }

    def restore_block(self, block_id: Hashable, shard: Any, state_arrays: Mapping[str, Any],
                      block_arrays: Mapping[str, Any] | None) -> dict:
        if block_arrays is None:
            raise ValueError(f"restore_block: no saved arrays for block {block_id!r}; the MF "
                             "program keeps model state in its blocks")
        indptr, indices, _ = shard["csr"]
        val = shard["val"]
        has_old = bool(np.asarray(block_arrays["has_old"]))
        return {
            "row_range": tuple(shard["row_range"]), "col_range": tuple(shard["col_range"]),
            "n_cols": shard["shape"][1],
            "csr": (indptr, indices, np.array(block_arrays["resid"], dtype=np.float64)),
            "val": ((val[0], val[1], np.array(block_arrays["val_resid"], dtype=np.float64))
                    if val is not None else None),
            "W": np.asfortranarray(block_arrays["W"], dtype=np.float64),
            "H": np.asfortranarray(block_arrays["H"], dtype=np.float64),
            "w_old": np.array(block_arrays["w_old"], dtype=np.float64) if has_old else None,
            "h_old": np.array(block_arrays["h_old"], dtype=np.float64) if has_old else None,
            **{name: (np.array(block_arrays[name], dtype=np.float64)
                      if bool(np.asarray(block_arrays.get(f"has_{name}", False))) else None)
               for name in ("h_pending", "h_next")},
        }
