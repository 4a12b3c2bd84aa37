"""Client CPU of the Lasso pull's residual bookkeeping against the number of blocks.

Every round each of B blocks returns a dense residual change of n rows; every other
block must receive it. Compares, in-process (no cluster), the one-by-one way (B - 1
additions per change, B (B - 1) per round) with ``LassoProgram._flush`` (the sum once,
then one addition per block and one subtraction per source). Thread CPU time per
round, median of ``--repeat`` rounds.

Run: ``python bench/lasso_flush.py [--rows 100000] [--blocks 2 4 8 16 64]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dask_strads.lasso import program as lp


def one_by_one(state, program):
    queued, state.queued = state.queued, []
    for source, delta, step in queued:
        for o in range(program.n_blocks):
            if o != source:
                lp.add_delta(state.pending[o], delta, step)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--blocks", type=int, nargs="+", default=[2, 4, 8, 16, 64])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    n = args.rows
    rng = np.random.default_rng(0)
    print("| blocks | one by one (ms CPU / round) | batched (ms CPU / round) | ratio |\n"
          "|---|---|---|---|")
    for B in args.blocks:
        starts = np.linspace(0, 4 * B, B + 1).round().astype(np.int64)
        program = lp.LassoProgram(rng.standard_normal(n), starts, 1.0, 0.0, 1e-8)
        state = lp.LassoState(coef=np.zeros(4 * B), weight=np.zeros(4 * B), active=[],
                              position=[], n_active=[],
                              pending=[np.zeros(n) for _ in range(B)],
                              pending_dirty=[False] * B, rng=rng, corr=None, rr_pos=[],
                              marks=[])
        deltas = [rng.standard_normal(n) for _ in range(B)]
        times = {}
        for name, flush in (("one", lambda s, p=program: one_by_one(s, p)),
                            ("batched", program._flush)):
            ts = []
            for _ in range(args.repeat):
                for b in range(B):
                    program._queue(state, b, deltas[b])
                t0 = time.thread_time()
                flush(state)
                ts.append(time.thread_time() - t0)
            times[name] = statistics.median(ts)
        print(f"| {B} | {1e3 * times['one']:.2f} | {1e3 * times['batched']:.2f} | "
              f"{times['one'] / times['batched']:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
