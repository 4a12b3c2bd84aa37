"""Durations as SLURM writes them, and the workers' ``--lifetime`` for a job's walltime."""

from __future__ import annotations


def parse_duration(text: str | float | int) -> float:
    """Seconds in a duration written as SLURM does (``[D-]HH:MM:SS``, ``MM:SS``, ``MM``) or
    with a unit (``90s``, ``55m``, ``2h``).

    >>> parse_duration("01:30:00"), parse_duration("1-00:00:00"), parse_duration("55m")
    (5400.0, 86400.0, 3300.0)
    """
    if isinstance(text, int | float):
        return float(text)
    s = str(text).strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if s and s[-1].lower() in units and ":" not in s:
            return float(s[:-1]) * units[s[-1].lower()]
        days = 0.0
        if "-" in s:
            d, s = s.split("-", 1)
            days = float(d)
        parts = [float(p) for p in s.split(":")]
    except ValueError:
        parts = []
    if not parts or len(parts) > 3 or any(p < 0 for p in parts):
        raise ValueError(f"duration: {text!r} is not a duration; expected [D-]HH:MM:SS, "
                         "MM:SS, minutes, or a number with a unit like 90s, 55m, 2h")
    if len(parts) == 1:  # SLURM: a bare number is minutes
        seconds = parts[0] * 60
    elif len(parts) == 2:  # MM:SS (or HH:MM after a day count, as SLURM reads it)
        seconds = parts[0] * 3600 + parts[1] * 60 if days else parts[0] * 60 + parts[1]
    else:
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return days * 86400 + seconds


def _format_seconds(seconds: float) -> str:
    return f"{max(int(seconds), 1)}s"


def lifetime_for(walltime: str | float, margin: str | float | None = None,
                 stagger: str | float | None = None) -> tuple[str, str]:
    """``(--lifetime, --lifetime-stagger)`` worker arguments for a job of ``walltime``.

    Workers retire between ``walltime - margin - stagger`` and ``walltime - margin +
    stagger``. By default ``margin`` is 10% of the walltime, clamped to [20 s, 10 min],
    and ``stagger`` a third of the margin, so the latest retirement still comes a good
    while before SLURM kills the job and workers of one scale-up do not all leave at once.

    >>> lifetime_for("01:00:00")
    ('3240s', '120s')
    """
    wall = parse_duration(walltime)
    margin_s = (min(max(0.1 * wall, 20.0), 600.0) if margin is None
                else parse_duration(margin))
    stagger_s = margin_s / 3 if stagger is None else parse_duration(stagger)
    lifetime = wall - margin_s
    if lifetime <= stagger_s or lifetime - stagger_s < 5:
        raise ValueError(f"walltime: {walltime!r} is too short for a lifetime margin of "
                         f"{margin_s:.0f}s and stagger of {stagger_s:.0f}s; expected a "
                         "walltime longer than margin + stagger + 5s")
    if stagger_s >= margin_s:
        raise ValueError(f"lifetime_stagger: {stagger_s:.0f}s must be smaller than the "
                         f"margin {margin_s:.0f}s, or workers may outlive their job")
    return _format_seconds(lifetime), _format_seconds(stagger_s)
