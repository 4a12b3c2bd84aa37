"""The progress bar of a fit: rounds, or the program's own units, with the objective."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# the objective shown during a fit is refreshed at most this often
POSTFIX_SECONDS = 0.25


class RoundsBar:
    """A tqdm bar over a fit: the program's own units when ``Program.progress`` gives
    them, else rounds against ``max_rounds``."""

    def __init__(self, program, state, *, show: bool, max_rounds: int, desc: str,
                 start_round: int):
        self.program = program
        own = program.progress(state)  # the program's units, or rounds
        self.own_units = own is not None
        self.bar = (_progress_bar(show, own[1], desc, own[0], own[2]) if own
                    else _progress_bar(show, max_rounds, desc, start_round))
        self.postfix_at = 0.0

    def update(self, state) -> None:
        bar = self.bar
        if bar.disable:
            return
        if self.own_units:
            done, total, _ = self.program.progress(state)
            if total != bar.total:  # a program may learn its total as it goes
                bar.total = total
            bar.update(done - bar.n)
        else:
            bar.update(1)
        obj = self.program.objective(state)
        now = time.perf_counter()
        if obj is not None and now - self.postfix_at > POSTFIX_SECONDS:
            self.postfix_at = now
            bar.set_postfix(objective=f"{obj:.6g}", refresh=False)

    def finish(self, stop_reason: str | None, objective: Callable[[], Any]) -> None:
        _finish_bar(self.bar, stop_reason, objective)


def _finish_bar(bar, stop_reason: str | None, objective: Callable[[], Any]) -> None:
    """Close the bar with the final objective and why the fit ended: a fit that converged
    after 3 of at most 1000 passes reads "3/3 ... converged", not "3/1000" as if it had
    stopped early."""
    if not bar.disable and stop_reason is not None:
        # a converged fit never aimed at the bound; "done" keeps its count, since the
        # program's own measure of progress may say what was left undone
        if stop_reason == "converged":
            bar.total = bar.n
        obj = None
        with contextlib.suppress(Exception):
            obj = objective()
        postfix = (f"objective={obj:.6g}, " if isinstance(obj, int | float | np.floating)
                   else f"{bar.postfix}, " if bar.postfix else "")
        bar.set_postfix_str(postfix + stop_reason, refresh=True)
    bar.close()


def _progress_bar(progress: bool, total: int, desc: str, initial: int, unit: str = "round"):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, initial=initial, disable=not progress, leave=True,
                unit=unit, dynamic_ncols=True)
