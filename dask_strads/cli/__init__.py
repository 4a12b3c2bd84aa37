"""Command line: ``python -m dask_strads demo`` and ``python -m dask_strads fit MODEL ...``.

``fit`` loads a data file, starts (or joins) a Dask cluster, fits one of the estimators
and writes the fitted attributes to an ``.npz`` file (no pickles: ``numpy.load`` opens
it with ``allow_pickle=False``).

Clusters:

* ``--cluster local`` (default): a ``LocalCluster`` on 127.0.0.1, closed at the end;
* ``--cluster slurm``: a ``dask_jobqueue.SLURMCluster`` scaled to ``--jobs`` jobs; workers
  get ``--lifetime`` (walltime minus a margin) so they retire before SLURM kills the job,
  and the cluster keeps ``--jobs`` jobs running (replacing retired or cancelled ones);
* ``--scheduler-file F`` / ``--scheduler ADDRESS``: join a running cluster and leave it
  running.

Examples
--------
::

    python -m dask_strads fit lasso --data train.npz --alpha 0.01 --output lasso.npz
    python -m dask_strads fit lda --data counts.mtx --n-components 20 --max-iter 100
    python -m dask_strads fit mf --data ratings.parquet --coo user,item,rating \\
        --n-components 50 --alpha 0.1 --cluster slurm --jobs 4 --cores 8 --memory 32GB \\
        --walltime 02:00:00
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from dask_strads.cli.clusters import (
    SetupError,
    check_slurm,
    make_cluster,
    slurm_cluster,
    slurm_kwargs,
)
from dask_strads.cli.data import Dataset, load_data
from dask_strads.cli.durations import lifetime_for, parse_duration
from dask_strads.cli.models import (
    MODELS,
    _model_name,
    check_before_cluster,
    make_estimator,
    model_params,
)
from dask_strads.cli.parser import DEFAULT_PROG, build_parser, program_name
from dask_strads.cli.results import fitted_arrays, save_results, summary

__all__ = [
    "MODELS",
    "Dataset",
    "build_parser",
    "check_before_cluster",
    "check_slurm",
    "fitted_arrays",
    "lifetime_for",
    "load_data",
    "main",
    "make_cluster",
    "make_estimator",
    "model_params",
    "parse_duration",
    "prepare_fit",
    "program_name",
    "save_results",
    "slurm_cluster",
    "slurm_kwargs",
]


def run_demo(argv: Sequence[str], prog: str = DEFAULT_PROG) -> int:
    from dask_strads.demo import main as demo_main

    result = (demo_main(list(argv)) if prog == DEFAULT_PROG
              else demo_main(list(argv), prog=f"{prog} demo"))
    return int(result or 0)


def prepare_fit(args: argparse.Namespace) -> tuple[str, Dataset, Any]:
    """``(model, data, estimator)``, every check that needs no cluster passed."""
    model = _model_name(args.model)
    _, _, needs_target = MODELS[model]
    params = model_params(args)
    # everything that can fail is checked before a cluster exists: a typo must not cost
    # a cluster start, nor on SLURM a wait in the queue for workers
    if args.cluster == "slurm" and not (args.scheduler or args.scheduler_file):
        check_slurm(args)
    _check_arguments(args, model, params, needs_target)
    data = load_data(args.data, target=args.target, coo=args.coo, need_target=needs_target)
    if model == "mf" and hasattr(data.X, "dask") and type(data.X._meta).__name__ == "ndarray":
        raise ValueError("coo: matrix factorization reads a table as triplets of its "
                         "observed entries; pass --coo ROW,COL,VALUE")
    estimator = make_estimator(model, params)
    check_before_cluster(model, estimator, data)
    return model, data, estimator


def _check_arguments(args: argparse.Namespace, model: str, params: dict,
                     needs_target: bool) -> None:
    """What the command line itself rules out, and the settings."""
    from dask_strads import config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fit warns of a misspelt setting, once
        config.check()  # a bad value fails before the cluster starts
    if args.target is not None and not needs_target:
        raise ValueError(f"target: {model} takes no response; drop --target")
    for name in ("client", "gather_model"):  # the fit ends with the command's cluster
        if name in params:
            raise ValueError(f"{name}: set by the command line, which saves the fitted "
                             "model to --output before its cluster ends")
    if args.output:
        folder = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise ValueError(f"output: cannot write into {folder}")


def run_fit(args: argparse.Namespace, prepared: tuple[str, Dataset, Any] | None = None) -> int:
    model, data, estimator = prepared or prepare_fit(args)
    needs_target = MODELS[model][2]
    with contextlib.ExitStack() as stack:
        try:
            client = stack.enter_context(make_cluster(args))
        except (OSError, TimeoutError, RuntimeError) as exc:  # started, joined or waited
            raise SetupError(f"cluster: {exc}") from exc
        if "client" in inspect.signature(type(estimator)).parameters:
            estimator.set_params(client=client)
        from dask_strads.engine.cluster import workers_of

        n_workers = len(workers_of(client))
        print(f"fitting {type(estimator).__name__} on {data.source} {data.shape} with "
              f"{n_workers} worker(s)", file=sys.stderr)
        start = time.perf_counter()
        with _as_default(client):
            if needs_target:
                estimator.fit(data.X, data.y)
            else:
                estimator.fit(data.X)
        seconds = time.perf_counter() - start
    info = summary(model, estimator, data, seconds, n_workers)
    if args.output:
        info["output"] = save_results(args.output, estimator, info)
    if args.json:
        print(json.dumps(_strict_json(info), default=str))
    else:
        width = max(len(k) for k in info)
        for key, value in info.items():
            if key != "params":
                print(f"{key:<{width}}  {value}")
    return 0


@contextlib.contextmanager
def _as_default(client: Any) -> Iterator[None]:
    """Make ``client`` the default for estimators that take no ``client=`` argument."""
    with client.as_current():
        yield


def _strict_json(value):
    """``value`` with its non-finite floats as strings: JSON has no inf or NaN."""
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _one_line(exc: BaseException, width: int = 400) -> str:
    """``exc``'s message on one line: a library's (dask's, pandas') may run to a dozen,
    with tables, which are left out."""
    lines = [line.strip() for line in str(exc).splitlines()
             if line.strip() and not line.lstrip().startswith(("+", "|"))]
    text = " ".join(lines) if lines else repr(exc)
    return text if len(text) <= width else text[:width - 1] + "…"


def _split_expanded_glob(argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` without the files a shell's glob put after ``--data``'s first one, and
    those files: argparse would read the second as the model and the model as extra."""
    if "--data" not in argv:
        return argv, []
    first = argv.index("--data") + 2
    end = first
    while end < len(argv) and argv[end] not in MODELS and os.path.isfile(argv[end]):
        end += 1
    return argv[:first] + argv[end:], argv[first:end]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m dask_strads`` and of the ``dask-strads`` script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = program_name()
    if argv and argv[0] == "demo":  # pass every demo argument through, --help included
        return run_demo(argv[1:], prog)
    parser = build_parser(prog)
    if not argv:  # the commands and examples, rather than "required: command"
        parser.print_help(sys.stderr)
        return 2
    argv, more_data = _split_expanded_glob(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if more_data:
        args.data = [args.data, *more_data]
    def error(exc: BaseException) -> str:
        return f"{parser.prog} fit: error: {_one_line(exc)}\n"

    try:
        prepared = prepare_fit(args)
    except (ValueError, TypeError, FileNotFoundError) as exc:  # the user's input
        parser.exit(2, error(exc))
    except SetupError as exc:  # this machine
        parser.exit(1, error(exc))
    try:
        return run_fit(args, prepared)
    except (ValueError, FileNotFoundError) as exc:
        parser.exit(2, error(exc))
    except (FloatingPointError, SetupError) as exc:  # a fit that diverged; a cluster
        parser.exit(1, error(exc))
    return 1  # pragma: no cover
