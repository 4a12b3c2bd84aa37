"""Tests of dask_strads.lda."""
