"""The command line's parser: commands, options, and usage errors in one line."""

from __future__ import annotations

import argparse
import math
import os
import sys

from dask_strads.cli.models import MODELS

DEFAULT_PROG = "python -m dask_strads"


def program_name(argv0: str | None = None) -> str:
    """How the user ran us: ``dask-strads`` (the script) or ``python -m dask_strads``."""
    argv0 = sys.argv[0] if argv0 is None and sys.argv else argv0
    name = os.path.basename(argv0 or "")
    return name if name.startswith("dask-strads") else DEFAULT_PROG


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line: ``fit``'s usage is long, and the error is what matters."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (options: {self.prog} --help)\n")


class _HelpFormatter(argparse.HelpFormatter):
    """Shows an option's default where it has one (no "(default: None)")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("%(default)" in text or not action.option_strings
                or action.default in (None, False, argparse.SUPPRESS)):
            return text
        return f"{text} (default: %(default)s)"


class _CommandsHelpFormatter(argparse.RawDescriptionHelpFormatter, _HelpFormatter):
    """The top-level help keeps its examples' line breaks."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    prog = prog or program_name()
    parser = _Parser(
        prog=prog, formatter_class=_CommandsHelpFormatter,
        description="STRADS-style model-parallel fits on dask.distributed.",
        epilog=f"examples:\n  {prog} demo\n  {prog} fit lasso --data train.npz --alpha 0.01 "
               f"--output lasso.npz\n\n'{prog} COMMAND --help' shows a command's options.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="commands")

    demo = sub.add_parser("demo", help="run the demonstration on an embedded LocalCluster",
                          add_help=False)
    demo.add_argument("demo_args", nargs=argparse.REMAINDER,
                      help="arguments passed on to the demo (see `demo --help`)")

    fit = sub.add_parser(
        "fit", help="fit a model to a data file",
        description="Fit MODEL to a data file on a local or SLURM cluster and save the "
                    "fitted attributes to an .npz file. The data and the model's parameters "
                    "are checked before any cluster is started.",
        formatter_class=_HelpFormatter)
    fit.add_argument("model", help=f"one of {', '.join(MODELS)}")
    g = fit.add_argument_group("data")
    g.add_argument("--data", required=True,
                   help=".npz/.npy, Matrix Market .mtx, or CSV/parquet (dask.dataframe; "
                        "a glob, a directory, or several files read as one table)")
    g.add_argument("--target", help="response: .npz array name, table column name, "
                                    "or matrix column number (-1 = last)")
    g.add_argument("--coo", metavar="ROW,COL,VALUE",
                   help="table columns holding a sparse matrix as triplets")
    g = fit.add_argument_group("model (only the options given are passed on; the "
                               "estimator's defaults hold for the rest)")
    g.add_argument("--alpha", type=float, help="regularisation (Lasso, ElasticNet, MF)")
    g.add_argument("--l1-ratio", type=float, help="ElasticNet mixing")
    g.add_argument("--n-components", type=int, help="topics (LDA) or rank (MF)")
    g.add_argument("--max-iter", type=int,
                   help="Lasso/ElasticNet: passes over the features; LDA: sampling sweeps; "
                        "MF: outer CCD++ iterations")
    g.add_argument("--tol", type=float,
                   help="stopping tolerance (Lasso/ElasticNet: duality gap; MF: relative "
                        "change of the objective)")
    g.add_argument("--random-state", type=int, help="seed, for a reproducible fit")
    g.add_argument("--staleness", type=int, help="rounds in flight beyond the first")
    g.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="any other estimator parameter (JSON value), repeatable")
    g = fit.add_argument_group("cluster")
    g.add_argument("--cluster", choices=("local", "slurm"), default="local",
                   help="start a LocalCluster on this machine, or workers as SLURM jobs "
                        "(ignored with --scheduler/--scheduler-file)")
    g.add_argument("--scheduler-file", help="join the cluster of this scheduler file")
    g.add_argument("--scheduler", help="join the cluster at this scheduler address")
    g.add_argument("--n-workers", type=_positive_int,
                   help="local: workers to start (default 2); joined: workers to wait for")
    g.add_argument("--jobs", type=_positive_int, default=2, help="slurm: jobs to keep running")
    g.add_argument("--cores", type=_positive_int,
                   help="slurm: cores per job (default 1); local: threads per worker "
                        "(default 1)")
    g.add_argument("--processes", type=_positive_int, default=1,
                   help="slurm: worker processes per job")
    g.add_argument("--memory", help="slurm: memory per job (e.g. 8GB, default 4GB); local: "
                                    "per worker (default: shared out)")
    g.add_argument("--walltime", default="01:00:00", help="slurm: job time limit")
    g.add_argument("--lifetime", default="auto",
                   help="slurm: worker --lifetime; 'auto' = walltime minus a margin, 'none'")
    g.add_argument("--lifetime-margin", help="slurm: margin before the walltime "
                                             "(default 10%% of it, within 20s..10min)")
    g.add_argument("--lifetime-stagger", help="slurm: --lifetime-stagger (default margin/3)")
    g.add_argument("--queue", help="slurm: partition (-p)")
    g.add_argument("--account", help="slurm: account (-A)")
    g.add_argument("--interface", help="network interface for scheduler and workers (site "
                                       "specific: e.g. ib0; lo for a single-machine SLURM)")
    g.add_argument("--job-extra", action="append",
                   help="extra #SBATCH directive, repeatable (--job-extra=--exclusive)")
    g.add_argument("--worker-extra-args", action="append", help="extra dask-worker argument")
    g.add_argument("--log-directory", help="slurm: directory for job stdout/stderr")
    g.add_argument("--local-directory", help="worker scratch directory")
    g.add_argument("--python", help="slurm: python executable on the compute nodes")
    g.add_argument("--dashboard-address", default=":0", help="dashboard (':0' = any port)")
    g.add_argument("--wait-timeout", type=_positive_float, default=600.0,
                   help="seconds to wait for workers to connect")
    g = fit.add_argument_group("output")
    g.add_argument("--output", "-o", help="write the fitted attributes here (.npz)")
    g.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser
