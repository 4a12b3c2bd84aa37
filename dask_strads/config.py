"""dask_strads's settings, under ``dask-strads.*`` in Dask's configuration.

The defaults ship in ``dask_strads.yaml`` next to this file and are merged into
``dask.config`` on import, the way distributed loads ``distributed.yaml`` (nothing is
written to the user's configuration directory). Code reads a setting when it needs it,
so ``dask.config.set`` takes effect for the next fit.
"""

from __future__ import annotations

import os

import dask
import yaml
from dask.utils import parse_timedelta

PREFIX = "dask-strads"

fn = os.path.join(os.path.dirname(__file__), "dask_strads.yaml")

with open(fn) as f:
    defaults = yaml.safe_load(f)

dask.config.update_defaults(defaults)


def get(key: str):
    """The value of ``dask-strads.<key>``."""
    return dask.config.get(f"{PREFIX}.{key}")


def seconds(key: str) -> float | None:
    """A duration setting in seconds (``"20s"``, ``"1ms"`` or a number of seconds);
    None when it is set to null (the feature is off)."""
    value = get(key)
    if value is None or value is False:
        return None
    return parse_timedelta(value, default="s")
