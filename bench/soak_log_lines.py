"""Count the log lines around the faults in a saved output of ``bench/soak.py``.

The output interleaves the soak's one line per fit with what the workers, nannies and
scheduler of its LocalCluster print; lines before a fit's result line are counted as that
fit's, per model::

    python bench/soak.py --n 50 --out soak > soak.log 2>&1
    python bench/soak_log_lines.py soak.log
"""

from __future__ import annotations

import collections
import re
import sys

KINDS = {
    "Compute Failed": "worker: Compute Failed",
    "Task exception was never retrieved": "Task exception was never retrieved",
    "distributed.worker - ERROR": "worker ERROR (all)",
    "distributed.scheduler - ERROR": "scheduler ERROR",
    "distributed.nanny - ERROR": "nanny ERROR",
}
FIT_LINE = re.compile(r"\s+(\w+) (\w+) #\d+ at")


def count(lines) -> tuple[dict, collections.Counter]:
    pending: collections.Counter = collections.Counter()
    per_model: dict = collections.defaultdict(collections.Counter)
    fits: collections.Counter = collections.Counter()
    for line in lines:
        fit = FIT_LINE.match(line)
        if fit:
            per_model[fit.group(1)].update(pending)
            fits[fit.group(1)] += 1
            pending = collections.Counter()
            continue
        for needle, name in KINDS.items():
            if needle in line:
                pending[name] += 1
    return per_model, fits


def main(argv=None) -> None:
    path = (argv or sys.argv[1:])[0]
    with open(path, errors="replace") as f:
        per_model, fits = count(f)
    print("| model | fits | " + " | ".join(KINDS.values()) + " |")
    print("|---|---|" + "---|" * len(KINDS))
    for model, counts in per_model.items():
        print(f"| {model} | {fits[model]} | " + " | ".join(str(counts[k]) for k in KINDS.values())
              + " |")


if __name__ == "__main__":
    main()
