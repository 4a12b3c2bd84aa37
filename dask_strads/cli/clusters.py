"""The cluster a ``fit`` runs on: a LocalCluster, SLURM jobs, or a running cluster joined."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from typing import Any

from dask_strads.cli.durations import _format_seconds, lifetime_for, parse_duration


@contextlib.contextmanager
def make_cluster(args: argparse.Namespace) -> Iterator[Any]:
    """A ``distributed.Client`` for the options in ``args`` (closed on exit; clusters that
    this function started are closed too, joined ones are left running)."""
    from distributed import Client, LocalCluster

    if args.scheduler_file or args.scheduler:
        if args.scheduler_file:
            # distributed waits for the file without end; its scheduler may be starting
            _wait_for_file(args.scheduler_file, args.wait_timeout)
        kwargs = ({"scheduler_file": args.scheduler_file} if args.scheduler_file
                  else {"address": args.scheduler})
        with Client(**kwargs, timeout=args.wait_timeout) as client:
            if args.n_workers:
                client.wait_for_workers(args.n_workers, timeout=args.wait_timeout)
            yield client
        return
    if args.cluster == "local":
        n_workers = 2 if args.n_workers is None else args.n_workers
        with LocalCluster(n_workers=n_workers, threads_per_worker=args.cores or 1,
                          processes=True, host="127.0.0.1",
                          dashboard_address=args.dashboard_address,
                          memory_limit=args.memory or "auto") as cluster, \
                Client(cluster) as client:
            client.wait_for_workers(n_workers, timeout=args.wait_timeout)
            yield client
        return
    with slurm_cluster(args) as cluster, Client(cluster) as client:
        expected = args.jobs * args.processes
        print(f"waiting for {expected} worker(s) from {args.jobs} SLURM job(s)...",
              file=sys.stderr)
        client.wait_for_workers(expected, timeout=args.wait_timeout)
        yield client


def _wait_for_file(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SetupError(f"scheduler-file: {path} did not appear within "
                             f"{_format_seconds(timeout)} (--wait-timeout)")
        time.sleep(0.2)


def slurm_kwargs(args: argparse.Namespace) -> dict:
    """``SLURMCluster`` keyword arguments for the command line options."""
    worker_args = list(args.worker_extra_args or [])
    if args.lifetime != "none":
        if args.lifetime == "auto":
            lifetime, stagger = lifetime_for(args.walltime, args.lifetime_margin,
                                             args.lifetime_stagger)
        else:
            lifetime = _format_seconds(parse_duration(args.lifetime))
            stagger = _format_seconds(parse_duration(args.lifetime_stagger or 0))
        worker_args += ["--lifetime", lifetime, "--lifetime-stagger", stagger]
    kwargs: dict[str, Any] = {
        "cores": args.cores or 1,
        "processes": args.processes,
        "memory": args.memory or "4GB",
        "walltime": args.walltime,
        "worker_extra_args": worker_args,
        "scheduler_options": {"dashboard_address": args.dashboard_address},
    }
    if args.interface:
        kwargs["interface"] = args.interface
    for name in ("queue", "account", "log_directory", "local_directory", "python"):
        value = getattr(args, name)
        if value:
            kwargs[name] = value
    if args.job_extra:
        kwargs["job_extra_directives"] = list(args.job_extra)
    return kwargs


class SetupError(Exception):
    """This machine cannot run what the command line asks for (printed as one line)."""


def check_slurm(args: argparse.Namespace) -> dict:
    """The ``SLURMCluster`` arguments, once dask-jobqueue and SLURM's ``sbatch`` are known
    to be there: without them a cluster would submit nothing and wait ``--wait-timeout``
    seconds for workers that never come."""
    kwargs = slurm_kwargs(args)  # walltime / lifetime errors first: they are the user's
    try:
        import dask_jobqueue  # noqa: F401
    except ImportError:
        raise SetupError("--cluster slurm needs dask-jobqueue: "
                         "pip install 'dask-strads[slurm]'") from None
    if shutil.which("sbatch") is None:
        raise SetupError("--cluster slurm: 'sbatch' is not on PATH; SLURM is not installed "
                         "on this machine (run on a SLURM login node, or use --cluster local)")
    return kwargs


@contextlib.contextmanager
def slurm_cluster(args: argparse.Namespace) -> Iterator[Any]:
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise SetupError("--cluster slurm needs dask-jobqueue: "
                         "pip install 'dask-strads[slurm]'") from None
    with SLURMCluster(**slurm_kwargs(args)) as cluster:
        # min = max: the job count is held at --jobs; retired (lifetime) or cancelled
        # jobs are replaced, and adapt never shrinks the cluster under a fit
        cluster.adapt(minimum_jobs=args.jobs, maximum_jobs=args.jobs)
        yield cluster
