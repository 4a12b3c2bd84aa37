"""``python -m dask_strads``: see :mod:`dask_strads.cli`."""

from __future__ import annotations

from dask_strads.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
