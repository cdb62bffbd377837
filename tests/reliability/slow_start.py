"""A Dask worker preload that holds each worker in its start (``DASK_DISTRIBUTED__WORKER__PRELOAD``): the
embedded cluster's start then lasts until the test lets it go on, on any machine, however busy.

With ``GCC_DASK_TEST_START_GATE`` set to a folder, a worker writes ``in-preload-<pid>`` there and waits until the
file ``open`` appears in it (at most 5 minutes: a test that fails before opening it does not leave workers
behind for ever); without, it waits 3 s."""

import os
import time
from pathlib import Path

#: the folder of the gate (the environment variable that names it)
GATE_ENV = "GCC_DASK_TEST_START_GATE"


def dask_setup(worker):  # noqa: D103 - the preload hook
    gate = os.environ.get(GATE_ENV)
    if not gate:
        time.sleep(3.0)
        return
    folder = Path(gate)
    (folder / f"in-preload-{os.getpid()}").touch()
    deadline = time.monotonic() + 300
    while not (folder / "open").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
