"""Placeholder demo (``python -m dask_strads demo``) until the models' demo replaces it.

It runs a block coordinate descent least-squares program on the engine, with column blocks
resident on the workers of an embedded ``LocalCluster``, and checks the result against
``numpy.linalg.lstsq``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from dask_strads.engine import Plan, Program, run

__all__ = ["BlockLeastSquares", "main"]


class BlockLeastSquares(Program):
    """min ||y - X b||^2 / 2 by exact block solves, one column block per resident block.

    Each block keeps its columns, coefficients and its own copy of the residual; the
    residual change of a push reaches the other blocks with their next push.
    """

    name = "demo-lstsq"

    def __init__(self, n_rows: int, tol: float = 1e-12):
        self.n_rows = n_rows
        self.tol = tol

    def init_block(self, block_id, shard):
        X_b, y = shard
        return {"X": np.asfortranarray(X_b), "pinv": np.linalg.pinv(X_b),
                "coef": np.zeros(X_b.shape[1]), "residual": np.array(y, dtype=float)}

    def push(self, block, part, carried=None):
        block["residual"] += part
        step = block["pinv"] @ block["residual"]
        block["coef"] += step
        delta = -(block["X"] @ step)
        block["residual"] += delta
        return {"delta": delta, "step": float(np.max(np.abs(step), initial=0.0)),
                "loss": 0.5 * float(block["residual"] @ block["residual"])}

    def block_result(self, block_id, block):
        return block["coef"].copy()

    def init_state(self, summaries):
        blocks = sorted(summaries)
        return {"blocks": blocks, "pending": {b: np.zeros(self.n_rows) for b in blocks},
                "sweep": 0.0, "last_sweep": np.inf, "updates": 0, "loss": None}

    def schedule(self, state, round):
        block = state["blocks"][round % len(state["blocks"])]
        part, state["pending"][block] = state["pending"][block], np.zeros(self.n_rows)
        return Plan(parts={block: part})

    def pull(self, state, partials, plan):
        for b, p in partials.items():
            for other in state["blocks"]:
                if other != b:
                    state["pending"][other] += p["delta"]
            state["sweep"] = max(state["sweep"], p["step"])
            state["loss"] = p["loss"]
            state["updates"] += 1
            if state["updates"] % len(state["blocks"]) == 0:
                state["last_sweep"], state["sweep"] = state["sweep"], 0.0
        return state

    def objective(self, state):
        return state["loss"]

    def converged(self, state):
        return state["last_sweep"] < self.tol


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns a process exit code."""
    parser = argparse.ArgumentParser(prog="python -m dask_strads demo",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=2000)
    parser.add_argument("--n-features", type=int, default=200)
    parser.add_argument("--n-blocks", type=int, default=4)
    parser.add_argument("--n-workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    X = rng.standard_normal((args.n_samples, args.n_features))
    y = X @ rng.standard_normal(args.n_features) + 0.1 * rng.standard_normal(args.n_samples)
    columns = np.array_split(np.arange(args.n_features), args.n_blocks)
    data = {b: (X[:, cols], y) for b, cols in enumerate(columns)}

    start = time.perf_counter()
    result = run(BlockLeastSquares(args.n_samples), data, n_workers=args.n_workers,
                 max_rounds=2000, desc="demo")
    seconds = time.perf_counter() - start
    coef = np.concatenate([result.block_results[b] for b in range(args.n_blocks)])
    reference = np.linalg.lstsq(X, y, rcond=None)[0]
    error = float(np.max(np.abs(coef - reference)))
    print(f"block least squares: {args.n_samples} x {args.n_features}, {args.n_blocks} blocks "
          f"on {args.n_workers} workers")
    print(f"rounds {result.n_rounds} ({result.stop_reason}), {seconds:.2f} s, "
          f"transport {result.transport}")
    print(f"max |coef - numpy.linalg.lstsq| = {error:.2e}")
    return 0 if error < 1e-6 else 1


if __name__ == "__main__":
    raise SystemExit(main())
