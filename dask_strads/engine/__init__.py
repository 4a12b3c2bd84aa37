"""The STRADS engine on dask.distributed. It knows nothing of any model."""

from __future__ import annotations

from dask_strads.engine.loop import RunResult, run, run_async
from dask_strads.engine.program import Plan, Program

__all__ = ["Plan", "Program", "RunResult", "run", "run_async"]
