"""Peak RSS and bytes spilled per worker while a fit runs (sampled every 0.2 s)."""

from __future__ import annotations

import contextlib
import threading


def _rss_and_spilled(dask_worker=None):
    import psutil

    spilled_total = getattr(dask_worker.data, "spilled_total", None)  # SpillBuffer
    disk = getattr(spilled_total, "disk", 0) if spilled_total is not None else 0
    return psutil.Process().memory_info().rss, int(disk)


@contextlib.contextmanager
def watch_workers(client, every: float = 0.2):
    """Yields ``{"peak_rss": {addr: bytes}, "spilled": {addr: bytes}}``, filled in while
    the block runs."""
    seen = {"peak_rss": {}, "spilled": {}}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                for addr, (rss, disk) in client.run(_rss_and_spilled).items():
                    seen["peak_rss"][addr] = max(seen["peak_rss"].get(addr, 0), rss)
                    seen["spilled"][addr] = max(seen["spilled"].get(addr, 0), disk)
            except Exception:  # a worker restarting: the next sample sees it
                pass
            stop.wait(every)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        stop.set()
        watcher.join()
