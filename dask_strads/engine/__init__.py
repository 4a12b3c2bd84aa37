"""The STRADS engine on dask.distributed. It knows nothing of any model."""

from __future__ import annotations

from dask_strads.engine.all_reduce import all_reduce
from dask_strads.engine.entry import run, run_async
from dask_strads.engine.exchanges import exchange
from dask_strads.engine.inprocess import run_in_process
from dask_strads.engine.loop import RunResult
from dask_strads.engine.program import Plan, Program, RoundContext

__all__ = ["Plan", "Program", "RoundContext", "RunResult", "all_reduce", "exchange", "run",
           "run_async", "run_in_process"]
