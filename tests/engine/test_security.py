"""Fits run on a TLS-secured cluster (temporary self-signed certificates)."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client, LocalCluster
from distributed.security import Security

from dask_strads.engine import run

from .programs import BlockLeastSquares, RotationProbe
from .test_loop import coef_of, lstsq_problem


@pytest.fixture(scope="module")
def tls_client():
    security = Security.temporary()  # needs the `cryptography` package
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, protocol="tls",
                      host="127.0.0.1", dashboard_address=":0", security=security) as cluster:
        with Client(cluster, security=security, set_as_default=False) as client:
            client.wait_for_workers(2)
            yield client


@pytest.mark.parametrize("transport", ["tasks", "direct"])
def test_fit_on_a_tls_cluster(tls_client, transport):
    assert tls_client.scheduler.address.startswith("tls://")
    X, y, data = lstsq_problem()
    res = run(BlockLeastSquares(y), data, tls_client, max_rounds=3000, progress=False,
              transport=transport)
    assert res.stop_reason == "converged"
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_rotation_on_a_tls_cluster(tls_client):
    res = run(RotationProbe(2), {0: None, 1: None}, tls_client, max_rounds=4, progress=False)
    assert all(v["version"] == 4 for v in res.carried.values())


def test_plain_client_cannot_join_a_tls_cluster(tls_client):
    address = tls_client.scheduler.address.replace("tls://", "tcp://")
    with pytest.raises(OSError):
        Client(address, timeout="2s", set_as_default=False)
