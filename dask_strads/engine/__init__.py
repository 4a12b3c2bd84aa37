"""The STRADS engine on dask.distributed. It knows nothing of any model."""

from __future__ import annotations

from dask_strads.engine.loop import RunResult, run, run_async
from dask_strads.engine.program import Plan, Program
from dask_strads.engine.worker import exchange

__all__ = ["Plan", "Program", "RunResult", "exchange", "run", "run_async"]
