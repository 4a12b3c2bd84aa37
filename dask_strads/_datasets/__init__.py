"""Seeded synthetic problems, one module per model (re-exported by dask_strads.datasets)."""
