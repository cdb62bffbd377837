"""A Dask worker preload that makes each worker take 3 s to start (``DASK_DISTRIBUTED__WORKER__PRELOAD``):
the embedded cluster's start then lasts long enough to send a signal into it, on any machine."""

import time


def dask_setup(worker):  # noqa: D103 - the preload hook
    time.sleep(3.0)
