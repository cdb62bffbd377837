"""The Dask dashboard that a run prints (``dask dashboard: <link>``) serves its status page.

Without bokeh, distributed answers the same link with a page that says "Dask needs bokeh>=... for the
dashboard": bokeh is a core dependency so that the link a user is shown works.
"""

from __future__ import annotations

import threading
import urllib.request

import pytest

import gcc_dask as gd

SMOKE = "pipelines/smoke.yaml"


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - a local http:// URL
        return resp.status, resp.read().decode("utf-8", "replace")


@pytest.mark.slow
def test_dashboard_link_serves_the_status_page(tmp_path):
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=4, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster) as client:
        lines: list[str] = []
        outcome: dict = {}

        def run():
            try:
                outcome["result"] = gd.run_pipeline(SMOKE, client=client, out=tmp_path / "run.zarr",
                                                    overrides=["run.progress=false"], echo=lines.append)
            except BaseException as exc:  # re-raised below, in the test's thread
                outcome["error"] = exc

        job = threading.Thread(target=run, daemon=True)
        job.start()
        try:
            status, body = _get(client.dashboard_link)  # while the run is going
        finally:
            job.join(timeout=300)
        assert "error" not in outcome, outcome.get("error")
        assert outcome["result"].status == "complete"
        # the run printed this very link
        assert f"dask dashboard: {client.dashboard_link}" in lines
        assert client.dashboard_link.endswith("/status")
        assert status == 200
        assert "needs bokeh" not in body.lower(), body[:500]
        assert "bokeh" in body.lower()  # the page loads BokehJS and its document
