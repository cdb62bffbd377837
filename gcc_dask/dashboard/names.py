"""The names the run page's parts share: its path, the JSON beside it, the Dask event topic, the plugin's name."""

from __future__ import annotations

__all__ = ["PAGE", "PLUGIN_NAME", "STATE_JSON", "STREAM_OP", "TOPIC"]

#: the page's path on the scheduler's dashboard (listed in ``/individual-plots.json``)
PAGE = "/individual-gcc-dask"
#: the run state as JSON, beside the page
STATE_JSON = "/gcc-dask/state.json"
#: the Dask event topic of the driver's events
TOPIC = "gcc-dask"
#: the scheduler plugin's name
PLUGIN_NAME = "gcc-dask-dashboard"
#: the operation of the driver's events on the client's batched stream to the scheduler (the plugin handles it)
STREAM_OP = "gcc-dask-events"
