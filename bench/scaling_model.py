"""The round cost model of docs/scaling.md: calibration, check, and the paper's workloads.

1. Calibrates the per-message costs on the rows of ``bench/results/scaling.json`` with
   N <= ``--fit-max`` workers (least squares, CPU times: steadier than wall times here).
2. Predicts the other rows (N = 8, 16 by default: out of sample) and prints predicted
   against measured client CPU, scheduler CPU, client bytes and, for the sleep pushes,
   the round's wall time.
3. Predicts per-round and total time and memory per worker for the paper's workloads
   on nodes of 16 cores (one single-threaded worker process per core) joined by a
   network of ``BANDWIDTH`` and ``LATENCY``.

The cost of a message between workers in an exchange round (``all_reduce``) is
calibrated on the ``sleep-reduce`` rows of ``--exchange-results``: the workers' CPU per
round beyond that of ``sleep-direct`` in the same run, per message sent or received.

Run: ``python bench/scaling_model.py [--fit-max 4] [--exchange-results PATH]`` (prints
markdown tables).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BANDWIDTH = 10e9 / 8  # bytes/s per node link (10 Gb/s)
LATENCY = 50e-6  # s per message
CORES = 16  # per node
# LDA's threads of one block (groups.py): their per-core rate against a lone worker's,
# and the cost of one inner step (its barrier and its share of the threads' start);
# both measured on 2 threads (bench/results/lda_threads.md) and assumed for 16
THREAD_EFFICIENCY = 0.9
INNER_STEP_S = 120e-6
# client CPU per byte sent or received (pickle + TCP stack, both ways); an assumption
# checked against the MF rows (the only ones with tens of kB per worker and round)
CPU_PER_BYTE = 1.0e-9


def load(path: Path) -> list[dict]:
    return [r for r in json.loads(path.read_text())["rows"] if "error" not in r]


def _fit(xs, ys):
    """y = a + b x, least squares, both >= 0."""
    A = np.vstack([np.ones(len(xs)), xs]).T
    a, b = np.linalg.lstsq(A, np.asarray(ys, float), rcond=None)[0]
    return max(a, 0.0), max(b, 0.0)


def calibrate(rows, fit_max):
    """Per-round costs, in seconds and bytes, as functions of N, one line per kind."""
    cal = {}
    for case in sorted({r["case"] for r in rows}):
        rs = [r for r in rows if r["case"] == case and r["workers"] <= fit_max]
        if len(rs) < 2:
            continue
        ns = [r["workers"] for r in rs]
        cal[case] = {m: _fit(ns, [r[m] for r in rs])
                     for m in ("client_cpu_ms", "sched_cpu_ms", "kb_in", "kb_out",
                               "pull_cpu_ms", "schedule_cpu_ms")}
        cal[case]["push_ms"] = float(np.median([r["push_ms"] for r in rs]))
    return cal


def all_reduce_messages(n: int) -> tuple[float, int]:
    """Messages (sent + received) per worker in one ``all_reduce`` over ``n`` pushes, on
    average, and its steps that carry messages (see engine/all_reduce.py)."""
    p = 1 << (n.bit_length() - 1)
    r = n - p
    steps = int(np.log2(p)) + (2 if r else 0)
    return 2 * (2 * r + p * np.log2(p)) / n, steps


def exchange_message_cost(rows, fit_max):
    """Seconds of a worker's CPU per exchange message (sent or received), from the
    ``sleep-reduce`` rows with 2..fit_max workers, and the rows to check it on:
    ``(N, predicted ms, measured ms)`` of the workers' extra CPU per round."""
    base = {r["workers"]: r for r in rows if r["case"] == "sleep-direct"}
    pts = []
    for r in rows:
        if r["case"] != "sleep-reduce" or r["workers"] < 2 or r["workers"] not in base:
            continue
        b = base[r["workers"]]
        # worker_cpu: the workers' CPU share of the wall time; per worker and round
        extra = r["worker_cpu"] * r["round_ms"] - b["worker_cpu"] * b["round_ms"]
        pts.append((r["workers"], all_reduce_messages(r["workers"])[0], extra))
    fit = [(m, e) for n, m, e in pts if n <= fit_max]
    c = sum(m * e for m, e in fit) / sum(m * m for m, e in fit)  # ms per message
    return c * 1e-3, [(n, c * m, e) for n, m, e in pts]


def predict(cal, case, n):
    c = cal[case]
    out = {m: c[m][0] + c[m][1] * n for m in c if m != "push_ms"}
    if case.startswith("sleep"):
        # staleness 0: the round is the push plus the client's and (tasks) the
        # scheduler's work on it, serial
        out["round_ms"] = 10.0 + out["client_cpu_ms"] + (
            out["sched_cpu_ms"] if case == "sleep-tasks" else 0.0)
    return out


def check_table(rows, cal, fit_max):
    lines = ["| case | N | client CPU ms (pred / meas) | scheduler CPU ms (pred / meas) | "
             "kB in (pred / meas) | kB out (pred / meas) | round ms (pred / meas) |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["case"], r["workers"])):
        if r["workers"] <= fit_max or r["case"] not in cal:
            continue
        p = predict(cal, r["case"], r["workers"])

        def pair(m, fmt="{:.2f}", p=p, r=r):
            return f"{fmt.format(p[m])} / {fmt.format(r[m])}" if m in p else "-"

        lines.append(f"| {r['case']} | {r['workers']} | {pair('client_cpu_ms')} | "
                     f"{pair('sched_cpu_ms')} | {pair('kb_in', '{:.1f}')} | "
                     f"{pair('kb_out', '{:.1f}')} | {pair('round_ms', '{:.1f}')} |")
    return "\n".join(lines)


def overhead_table(rows):
    """The sleep pushes' overhead share if the client and the scheduler had a core
    each (their CPU per round is then on the round's critical path, the rest is the
    10 ms push): ``cpu / (10 ms + cpu)``; beside it the share measured in wall time
    on this loaded machine."""
    lines = ["| transport | N | client + scheduler CPU per round (ms) | overhead share, "
             "CPU-bound | overhead share, wall |", "|---|---|---|---|---|"]
    for case in ("sleep-direct", "sleep-tasks"):
        for r in sorted((r for r in rows if r["case"] == case), key=lambda r: r["workers"]):
            cpu = r["client_cpu_ms"] + (r["sched_cpu_ms"] if case == "sleep-tasks" else 0.0)
            lines.append(f"| {case[6:]} | {r['workers']} | {cpu:.2f} | "
                         f"{cpu / (10 + cpu):.1%} | {r['overhead']:.1%} |")
    return "\n".join(lines)


def coefficients_table(cal):
    lines = ["| case | client CPU ms = a + b N | scheduler CPU ms = a + b N | kB in = a + b N | "
             "kB out = a + b N |", "|---|---|---|---|---|"]
    for case, c in cal.items():
        def ab(m, c=c):
            return f"{c[m][0]:.2f} + {c[m][1]:.3f} N"
        lines.append(f"| {case} | {ab('client_cpu_ms')} | {ab('sched_cpu_ms')} | "
                     f"{ab('kb_in')} | {ab('kb_out')} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------- workloads
def round_cost(*, workers, push_s, bytes_in, bytes_out, client_msg_s, client_extra_s,
               sched_tasks, sched_task_s, node_bytes=0.0):
    """One synchronous round (staleness 0): schedule, send, push, reply, pull, serial.

    ``bytes_in`` / ``bytes_out``: through the client's link; ``node_bytes``: what one
    node's link carries worker to worker (carried blocks), overlapping the pushes of
    the next round only with staleness >= 1, so counted serially here."""
    client = client_msg_s * workers + client_extra_s + CPU_PER_BYTE * (bytes_in + bytes_out)
    net = 2 * LATENCY + (bytes_in + bytes_out) / BANDWIDTH + node_bytes / BANDWIDTH
    sched = sched_tasks * sched_task_s
    total = client + net + sched + push_s
    parts = {"push": push_s, "client": client, "network": net, "scheduler": sched}
    return total, parts


def all_reduce_seconds(P, nbytes, c_x):
    """One ``all_reduce`` of ``nbytes`` per message over ``P`` workers, ``CORES`` per
    node: per step a send and a receive (``c_x`` of CPU each, plus pickling), a
    latency, and, in the steps whose partner is on another node, the node's workers'
    messages through its link together."""
    msgs, steps = all_reduce_messages(P)
    cpu = msgs * (c_x + CPU_PER_BYTE * nbytes)
    across = max(0, int(np.log2(max(P, 1))) - int(np.log2(CORES)))
    link = across * min(P, CORES) * nbytes / BANDWIDTH
    return cpu + steps * LATENCY + link


def relayed(P, msg_s):
    """Above relay-above (8) workers the client calls ceil(sqrt(P)) relays, each
    forwarding its group's pushes (docs/scaling.md section 6): the calls the client
    makes, and the relays' forwarding on the round's path (counted as the client's)."""
    if P <= 8:
        return P, 0.0
    relays = math.isqrt(P - 1) + 1
    return relays, P / relays * msg_s + LATENCY


def workloads(cal, c_x):
    """The paper's workloads (issue 35) on N nodes of 16 cores; ``c_x``: a worker's CPU
    per exchange message."""
    # per-worker message costs of the client and per-task cost of the scheduler,
    # from the sleep-push rows (slopes b of a + b N)
    msg_direct = cal["sleep-direct"]["client_cpu_ms"][1] * 1e-3
    msg_tasks = cal["sleep-tasks"]["client_cpu_ms"][1] * 1e-3
    task_s = cal["sleep-tasks"]["sched_cpu_ms"][1] * 1e-3
    out = []

    # LDA, PubMed: 8.2 M docs, 730 M tokens, V = 141 k, K = 1000, 25 nodes.
    T, D, V, K = 730e6, 8.2e6, 141e3, 1000
    rate = 4.8e6  # tokens/s per core, K = 1000 (bench/results/lda.md, strads-1)
    iters = 100
    for nodes in (4, 25, 64):
        # As built: one worker of CORES threads per node (block_threads = CORES), so
        # nodes vocabulary blocks and rounds per iteration; a push samples T / nodes^2
        # tokens in CORES inner steps (groups.py), its threads at THREAD_EFFICIENCY of
        # a lone core's rate, each step ending at a barrier.
        push = (T / nodes**2 / (CORES * rate * THREAD_EFFICIENCY)
                + CORES * INNER_STEP_S)
        block = min(T / nodes, V / nodes * K) * 4  # non-zeros as int16 topic + uint16 count
        calls, forward_s = relayed(nodes, msg_direct)
        t, parts = round_cost(workers=calls, push_s=push + LATENCY, bytes_in=nodes * 300,
                              bytes_out=nodes * 600, client_msg_s=msg_direct,
                              client_extra_s=forward_s, sched_tasks=0, sched_task_s=task_s,
                              node_bytes=block)
        mem = (T / nodes * 10 + D / nodes * K * 4 + 2 * V / nodes * K * 4) / 1e9
        out.append((f"LDA PubMed K=1000, a worker of {CORES} threads per node", nodes, nodes,
                    t, parts, nodes * iters * t, iters,
                    f"{mem:.1f} GB per node (tokens, dense doc-topic counts, 2 word blocks)",
                    "STRADS: 1,000 s on 25 nodes"))
        # Single-threaded workers, one per core: P = workers blocks, P rounds per
        # iteration, each push T / P^2 tokens; a block leaves every worker every round,
        # fetched by its next holder (one more message), and one per node crosses the
        # node's link (consecutive placement).
        P = nodes * CORES
        push = T / P**2 / rate
        block_packed = min(T / P, V / P * K) * 4
        relays, forward_s = relayed(P, msg_direct)
        for label, msg_s, tasks, calls, forward in (
                ("  same, a single-threaded worker per core (rounds through relays)",
                 msg_direct, 0, relays, forward_s),
                ("  same, a message per worker (before its rounds went through relays)",
                 msg_direct, 0, P, 0.0),
                ("  same, blocks as tasks (before 1bb25cc)", msg_tasks, 2 * P, P, 0.0)):
            t, parts = round_cost(workers=calls, push_s=push + LATENCY, bytes_in=P * 300,
                                  bytes_out=P * 600, client_msg_s=msg_s,
                                  client_extra_s=forward, sched_tasks=tasks,
                                  sched_task_s=task_s, node_bytes=block_packed)
            out.append((label, nodes, P, t, parts, P * iters * t, iters, "", ""))

    # LDA table 22 M words x 10 000 topics (2.2e11 counts); corpus assumed 100 B tokens.
    # As PubMed's: a worker of CORES threads per node, and beside it one per core.
    T, V, K = 100e9, 22e6, 10_000
    rate = 3.0e6  # MH is O(1) per token; K = 10 000 assumed 0.6x the K = 1000 rate
    for nodes in (64, 256):
        push = T / nodes**2 / (CORES * rate * THREAD_EFFICIENCY) + CORES * INNER_STEP_S
        block_dense = V / nodes * K * 4
        calls, forward_s = relayed(nodes, msg_direct)
        t, parts = round_cost(workers=calls, push_s=push + LATENCY, bytes_in=nodes * 300,
                              bytes_out=nodes * 600, client_msg_s=msg_direct,
                              client_extra_s=forward_s, sched_tasks=0, sched_task_s=task_s,
                              node_bytes=min(T / nodes * 4, block_dense))
        mem = (T / nodes * 10 + 2 * block_dense) / 1e9
        out.append((f"LDA 22M x 10k table, a worker of {CORES} threads per node", nodes,
                    nodes, t, parts, nodes * t, 1,
                    f"{mem:.0f} GB per node (tokens + 2 dense word blocks)",
                    "paper: 200 B parameters"))
        P = nodes * CORES
        block_dense = V / P * K * 4
        relays, forward_s = relayed(P, msg_direct)
        t, parts = round_cost(workers=relays, push_s=T / P**2 / rate + LATENCY,
                              bytes_in=P * 300, bytes_out=P * 600, client_msg_s=msg_direct,
                              client_extra_s=forward_s, sched_tasks=0, sched_task_s=task_s,
                              node_bytes=min(T / P * 4, block_dense))
        mem = (T / P * 10 + 2 * block_dense) / 1e9
        out.append(("  same, a single-threaded worker per core", nodes, P, t, parts, P * t, 1,
                    f"{mem:.1f} GB per worker", ""))

    # MF, Netflix shape: 480 k x 100 k (100 M ratings), rank 2000, CCD++. Before
    # 914edd7 a round was a sweep, and the client received each worker's (num, den)
    # over all n columns and sent h (n) to each.
    for nodes in (1, 8, 32):
        P = nodes * CORES
        m, n, nnz, k = 480e3, 100e3, 100e6, 2000
        # ratings per second and core for one CCD++ sweep of one rank component:
        # bench/results/mf.md, 0.9 M ratings per worker in 11.5 ms rounds
        rate = 8.0e7
        push = nnz / P / rate
        b_in, b_out = P * n * 16, P * n * 8
        t, parts = round_cost(workers=P, push_s=push, bytes_in=b_in, bytes_out=b_out,
                              client_msg_s=msg_direct, client_extra_s=P * n * 1e-9,
                              sched_tasks=0, sched_task_s=task_s)
        rounds = k * 3  # about 3 inner sweeps per rank-one component (inner_tol 0.05)
        mem = (m / P * k * 8 + n / P * k * 8 + nnz / P * 20) / 1e6
        # as built: a round per component (3 sweeps), each sweep's (num, den) summed
        # by all_reduce among the workers (the client sees a few scalars per worker),
        # plus one all_reduce of h at the component's start
        sweeps = 3
        reduce_s = sweeps * all_reduce_seconds(P, n * 16, c_x) + all_reduce_seconds(
            P, n * 8, c_x)
        relays, forward_s = relayed(P, msg_direct)
        t2, parts2 = round_cost(workers=relays, push_s=sweeps * push, bytes_in=P * 200,
                                bytes_out=P * 200, client_msg_s=msg_direct,
                                client_extra_s=0.0, sched_tasks=0, sched_task_s=task_s)
        reduce_s += forward_s
        parts2["exchange"] = reduce_s
        out.append(("MF 480k x 100k rank 2000", nodes, P, t2 + reduce_s, parts2,
                    k * (t2 + reduce_s), 1,
                    f"{mem:.0f} MB (W and H blocks, ratings + residual)", "-"))
        out.append(("  same, reduced by the client (before 914edd7)", nodes, P, t, parts,
                    rounds * t, 1, "", ""))

    # Lasso, 100 M features, 60 GB of X (assumed 50 k samples, 5e9 non-zeros), 8 nodes.
    for nodes in (8, 32):
        P = nodes * CORES
        n, p, nnz = 50e3, 100e6, 5e9
        rate = 6.0e8  # non-zeros/s per core in a gap round (bench/results/lasso.md (c))
        push = nnz / P / rate * 0.5  # rounds alternate gap rounds and working-set rounds
        b = P * n * 8  # a dense residual change in, the others' sum out, per block
        for label, extra in (("Lasso 100M features", P * n * 1e-9 * 3),
                             ("  same, before the _flush fix", P * P * n * 1e-9)):
            t, parts = round_cost(workers=P, push_s=push, bytes_in=b, bytes_out=b,
                                  client_msg_s=msg_direct, client_extra_s=extra,
                                  sched_tasks=0, sched_task_s=task_s)
            # rounds to the optimum grow with the blocks: 57, 203, 255, 322, 316 rounds
            # for 1, 2, 4, 8, 16 blocks on lasso-strong (bench/results/scaling.md),
            # about 40 more per doubling from 2 blocks
            rounds = 203 + 40 * (np.log2(P) - 1)
            mem = nnz / P * 12 / 1e9
            out.append((label, nodes, P, t, parts, rounds * t, 1,
                        f"{mem:.2f} GB of X per worker; client {p * 8 * 4 / 1e9:.1f} GB",
                        "STRADS: about 250 s on 8 nodes" if "fix" not in label else ""))
    return out


def workload_table(rows):
    lines = ["| workload | nodes | workers | round (ms) | push / client / network / scheduler "
             "/ exchange (ms) | bottleneck | rounds | total (s) | memory per worker | "
             "reference |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, nodes, P, t, parts, total, _iters, mem, ref in rows:
        split = " / ".join(f"{1e3 * parts.get(k, 0.0):.1f}" for k in
                           ("push", "client", "network", "scheduler", "exchange"))
        bott = max(parts, key=parts.get)
        lines.append(f"| {name} | {nodes} | {P} | {1e3 * t:.1f} | {split} | {bott} | "
                     f"{total / t:,.0f} | {total:,.0f} | {mem} | {ref} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(HERE / "results" / "scaling.json"))
    ap.add_argument("--fit-max", type=int, default=4)
    ap.add_argument("--exchange-results", default=str(HERE / "results" / "scaling_mf_new.json"))
    args = ap.parse_args(argv)
    rows = load(Path(args.results))
    cal = calibrate(rows, args.fit_max)
    exchange_rows = load(Path(args.exchange_results))
    c_x, checks = exchange_message_cost(exchange_rows, args.fit_max)
    # the two runs' machines differ: scale by their client CPU per direct message
    here = calibrate(exchange_rows, args.fit_max)["sleep-direct"]["client_cpu_ms"][1]
    scale = cal["sleep-direct"]["client_cpu_ms"][1] / here
    print(f"## Exchange messages (fitted on 2 <= N <= {args.fit_max})\n")
    print(f"A worker's CPU per message sent or received: {1e3 * c_x:.3f} ms in that run, "
          f"where the client's per direct message is {here:.3f} ms; scaled by "
          f"{scale:.2f} to this run's machine: {1e3 * c_x * scale:.3f} ms\n")
    c_x *= scale
    print("| N | messages per worker and all_reduce | extra worker CPU per round, ms "
          "(pred / meas) |\n|---|---|---|")
    for n, pred, meas in checks:
        print(f"| {n} | {all_reduce_messages(n)[0]:.2f} | {pred:.2f} / {meas:.2f} |")
    print()
    print(f"## Coefficients (fitted on N <= {args.fit_max})\n")
    print(coefficients_table(cal))
    print("\n## Overhead share of 10 ms sleep pushes\n")
    print(overhead_table(rows))
    print(f"\n## Predicted (from N <= {args.fit_max}) against measured\n")
    print(check_table(rows, cal, args.fit_max))
    print("\n## The paper's workloads\n")
    print(workload_table(workloads(cal, c_x)))


if __name__ == "__main__":
    main()
