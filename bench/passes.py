"""What one pass over a dense X costs on this machine: the unit of a dense Lasso fit's
floor when X is in the client's memory and the workers are processes.

Each step reads (or writes) a Fortran float64 block of ``--rows`` x ``--cols`` once:
``X' v`` over the block as the client holds it (anonymous memory) and as a worker maps
it from ``/dev/shm``, in 1 process and in 2 at once (two workers sharing the memory
bus); the finite check (``np.sum``, as scikit-learn's); the column norms (``einsum``, as
a block's are made); a copy into memory the process has touched before, and the block
written to a new file in ``/dev/shm`` with ``pwrite`` (as the client shares it).
Medians of ``--repeats``.

Run: ``python bench/passes.py [--rows 4000] [--cols 20000] [--repeats 5]``; writes
``bench/results/passes.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import mmap
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from dask_strads.engine import shared

RESULTS = Path(__file__).resolve().parent / "results"


def _timed(fn, repeats: int) -> float:
    fn()  # the first call maps pages and warms the caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _written(X: np.ndarray, path: str) -> None:
    """``X`` written to a new file at ``path`` as the client shares a shard."""
    fd = shared.reserve(path, X.nbytes)
    if fd is None:
        raise SystemExit(f"no room in /dev/shm for {X.nbytes} bytes")
    try:  # X is Fortran: its transpose is C-contiguous
        shared.write_at(fd, memoryview(X.T).cast("B"), 0)
    finally:
        os.close(fd)


def measure(rows: int, cols: int, repeats: int, barrier=None) -> dict:
    """One process's times (s) for each step; ``barrier`` lines up the processes that
    run at once."""
    rng = np.random.default_rng(os.getpid())
    X = np.asfortranarray(rng.standard_normal((rows, cols)))
    v = rng.standard_normal(rows)
    path = f"/dev/shm/passes-{os.getpid()}"
    _written(X, path)
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    mapped = np.ndarray(X.shape, dtype=np.float64, buffer=mm, order="F")

    copy = np.empty_like(X)
    copy[...] = X  # its pages touched

    def write():
        os.unlink(path)
        _written(X, path)

    steps = {"X' v, anonymous": lambda: X.T @ v,
             "X' v, mapped from /dev/shm": lambda: mapped.T @ v,
             "finite check (sum)": lambda: np.isfinite(np.sum(X)),
             "column norms (einsum)": lambda: np.einsum("ij,ij->j", mapped, mapped),
             "copy in the process's memory": lambda: np.copyto(copy, X),
             "pwrite to /dev/shm": write}
    out = {}
    for name, fn in steps.items():
        if barrier is not None:
            barrier.wait()
        out[name] = _timed(fn, repeats)
    steps = mapped = None  # the views let go of the mapping before it closes
    mm.close()
    os.unlink(path)
    return out


def _child(rows, cols, repeats, barrier, queue):
    queue.put(measure(rows, cols, repeats, barrier))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--cols", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    gb = args.rows * args.cols * 8 / 1e9
    one = measure(args.rows, args.cols, args.repeats)
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(args.rows, args.cols, args.repeats, barrier, queue))
             for _ in range(2)]
    for p in procs:
        p.start()
    two = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    rows = [{"step": k, "one_s": one[k], "two_s": max(t[k] for t in two),
             "one_gbs": gb / one[k], "two_gbs": 2 * gb / max(t[k] for t in two)} for k in one]
    command = "python bench/passes.py " + " ".join(sys.argv[1:] if argv is None else argv)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "passes.json").write_text(json.dumps({"command": command, "gb": gb,
                                                     "rows": rows}, indent=1))
    lines = [f"# One pass over a dense block of {gb:.2f} GB", "",
             f"Command: `{command.strip()}`. Medians of {args.repeats}; 'two processes' is "
             "the slower of two running the same step at once, each over its own block "
             "(GB/s counts both).", "",
             "| step | one process (s) | GB/s | two processes at once (s) | GB/s, both |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['step']} | {r['one_s']:.3f} | {r['one_gbs']:.1f} | {r['two_s']:.3f} | "
              f"{r['two_gbs']:.1f} |" for r in rows]
    (RESULTS / "passes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
