"""The workers' own connections to one another.

A push calls other workers directly: a relay forwards pushes, a push fetches carried
blocks, an exchange round sends values. These calls go over a connection pool of
dask_strads' own, not the worker's: when the scheduler removes a worker it tells every
other worker, which closes all its pooled connections to it, calls in flight included.
A retired worker still answers until its fits have taken its blocks
(:mod:`~dask_strads.engine.handover`), so a call to it in flight at that moment must not
fail as if it had died. A worker that did die still fails the call: its end of the
connection is gone.
"""

from __future__ import annotations

from distributed.core import ConnectionPool, PooledRPCCall

EXTENSION = "dask_strads_peers"


class Peers:
    """A worker's pool of connections to the other workers (a worker extension, closed
    with the worker, after its plugins' teardown and so after a retired worker's hold)."""

    def __init__(self, worker):
        own = worker.rpc
        self.pool = ConnectionPool(
            limit=own.limit, deserialize=own.deserialize, serializers=own.serializers,
            deserializers=own.deserializers, connection_args=own.connection_args,
            timeout=own.timeout, server=worker)

    async def close(self) -> None:
        await self.pool.close()


async def peer(worker, address: str) -> PooledRPCCall:
    """An rpc to ``address`` over ``worker``'s dask_strads pool."""
    peers = worker.extensions.get(EXTENSION)
    if peers is None:
        peers = Peers(worker)
        await peers.pool.start()  # no suspension: another caller cannot see it unstarted
        worker.extensions[EXTENSION] = peers
    return peers.pool(address)
