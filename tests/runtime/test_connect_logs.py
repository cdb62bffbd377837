"""On an external cluster, distributed's "Batched Comm Closed" record (with the traceback of the failed write)
is not printed while gcc-dask holds the connection: a lost scheduler ends the run with its own one line."""

from __future__ import annotations

import logging

from gcc_dask.runtime.cluster import ClusterSpec, connect


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_batched_comm_closed_is_dropped_only_while_connected():
    from distributed import LocalCluster

    log = logging.getLogger("distributed.batched")
    seen = _Collect()
    log.addHandler(seen)
    old = log.level
    log.setLevel(logging.INFO)
    try:
        with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
            with connect(ClusterSpec(address=cluster.scheduler_address, connect_timeout=10)) as client:
                assert client.scheduler.address == cluster.scheduler_address
                log.info("Batched Comm Closed %r", "<TCP (closed) Client->Scheduler>")
                log.info("another record")
            log.info("Batched Comm Closed after the run")
    finally:
        log.removeHandler(seen)
        log.setLevel(old)
    assert seen.messages == ["another record", "Batched Comm Closed after the run"]
