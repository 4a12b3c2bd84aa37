"""dask_strads's settings, under ``dask-strads.*`` in Dask's configuration.

The defaults ship in ``dask_strads.yaml`` next to this file and are merged into
``dask.config`` on import, the way distributed loads ``distributed.yaml`` (nothing is
written to the user's configuration directory). Code reads a setting when it needs it,
so ``dask.config.set`` takes effect for the next fit.
"""

from __future__ import annotations

import difflib
import os
import warnings

import dask
import yaml
from dask.utils import parse_bytes, parse_timedelta

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


def check() -> None:
    """Every ``dask-strads.*`` setting against its default: a name that is none of ours
    warns (a misspelt one would be ignored), and a value of another kind than the
    default's (a number, a duration, a size, a switch) raises a ValueError naming it.
    Fits call it before any cluster work."""
    _check_level(dask.config.get(PREFIX, default={}) or {}, defaults[PREFIX], PREFIX)


def _check_level(values: dict, known: dict, path: str) -> None:
    for name, value in values.items():
        key = f"{path}.{name}"
        spelled = name.replace("_", "-")  # dask.config treats them alike
        if spelled not in known:
            near = difflib.get_close_matches(spelled, list(known), n=1)
            hint = f" (did you mean {path}.{near[0]}?)" if near else ""
            warnings.warn(f"{key}: no such dask_strads setting, ignored{hint}; the "
                          f"settings are in {fn}", UserWarning, stacklevel=4)
        elif isinstance(known[spelled], dict):
            if isinstance(value, dict):
                _check_level(value, known[spelled], key)
        else:
            _check_value(key, value, known[spelled])


def _check_value(key: str, value, default) -> None:
    if value is None or isinstance(default, str) and not _is_quantity(default):
        return  # None turns a feature off; words (auto, direct) are checked where read
    if isinstance(default, bool):
        ok = isinstance(value, bool)
        kind = "true or false"
    elif isinstance(default, int | float):
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        kind = "a number >= 0"
    else:
        ok = value is False or _is_quantity(value, like=default)
        kind = f"a {'duration' if _duration(default) else 'size'} like {default!r}"
    if not ok:
        raise ValueError(f"{key}: {value!r} is not {kind}")


def _duration(text: str) -> bool:
    try:
        parse_timedelta(text)
        return True
    except (ValueError, KeyError, TypeError):
        return False


def _is_quantity(value, like: str | None = None) -> bool:
    """Whether ``value`` reads as a duration (``"20s"``) or a size (``"32MiB"``), the
    same as ``like`` when given."""
    if isinstance(value, bool):
        return False
    as_duration = _duration(value)
    try:
        parse_bytes(value)
        as_size = True
    except (ValueError, TypeError):
        as_size = False
    if like is None:
        return as_duration or as_size
    return as_duration if _duration(like) else as_size
