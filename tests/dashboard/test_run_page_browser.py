"""The run's page in a real browser: headless Chromium (Debian's ``chromium``) loads it during a run, and its
plots hold the run's data (read from BokehJS in the page, over the DevTools protocol). Skipped, saying why, where
Chromium is not installed. With ``GCC_DASK_SCREENSHOT=PATH`` the page's screenshot is written there (the one in
docs/_static was made so)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import time

import pytest

import gcc_dask as gd
from page_helpers import SLOW, base_of, batches_done, get, in_thread, wait_for_run

CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get "
                                                          "install chromium), so the page is not loaded in a browser")

#: rows of each named data source of the page's Bokeh document, as BokehJS holds them in the browser
ROWS_JS = """(() => {
  const docs = (window.Bokeh && window.Bokeh.documents) || [];
  if (!docs.length) return null;
  const out = {};
  for (const m of docs[0].all_models) {
    if (m.name && m.name.startsWith("gcc-") && typeof m.get_length === "function") out[m.name] = m.get_length();
    if (m.name && m.name.startsWith("gcc-") && typeof m.text === "string") out[m.name] = m.text;
  }
  return JSON.stringify(out);
})()"""


class DevTools:
    """The DevTools protocol of one Chromium page, over its websocket (tornado's client)."""

    def __init__(self, ws) -> None:
        self.ws, self.n = ws, 0

    async def call(self, method: str, **params):
        self.n += 1
        self.ws.write_message(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(await self.ws.read_message())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    async def evaluate(self, expression: str):
        return (await self.call("Runtime.evaluate", expression=expression, returnByValue=True))["result"].get("value")


async def _load_page(url: str, port: int, screenshot: str | None, timeout: float = 120.0) -> dict:
    from tornado.websocket import websocket_connect

    status, targets = get(f"http://127.0.0.1:{port}/json/list")
    page = next(t for t in json.loads(targets) if t["type"] == "page")
    ws = await websocket_connect(page["webSocketDebuggerUrl"], max_message_size=64 * 2**20)
    try:
        tools = DevTools(ws)
        await tools.call("Page.navigate", url=url)
        rows, deadline = None, time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await tools.evaluate(ROWS_JS)
            rows = json.loads(value) if value else None
            if rows and rows.get("gcc-shards") and rows.get("gcc-flights") is not None:
                break
            await asyncio.sleep(0.25)
        if screenshot:
            await asyncio.sleep(1.5)  # a redraw or two
            shot = await tools.call("Page.captureScreenshot", format="png")
            with open(screenshot, "wb") as fh:
                fh.write(base64.b64decode(shot["data"]))
        title = await tools.evaluate("document.title")
        return {"rows": rows, "title": title}
    finally:
        ws.close()


@pytest.mark.slow
def test_chromium_shows_the_run_page_with_data(tmp_path):
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=8, processes=False, dashboard_address=":0",
                      silence_logs=40) as cluster:
        base = base_of(cluster.dashboard_link)
        overrides = [*SLOW, f"cluster.address={cluster.scheduler_address}"]
        job, outcome = in_thread(lambda: gd.run_pipeline("pipelines/smoke.yaml", out=tmp_path / "run.zarr",
                                                         overrides=overrides))
        profile = tmp_path / "chromium"
        browser = None
        try:
            run = wait_for_run(base, lambda r: batches_done(r) >= 1, alive=job.is_alive)
            assert run is not None, outcome.get("error")
            browser = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                                        "--disable-dev-shm-usage", "--no-first-run", "--window-size=1400,1150",
                                        "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            port_file = profile / "DevToolsActivePort"
            while not port_file.exists() and browser.poll() is None:  # (no time bound: pytest-timeout ends a hang)
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            shot = os.environ.get("GCC_DASK_SCREENSHOT") or str(tmp_path / "run-page.png")
            seen = asyncio.run(_load_page(base + "/individual-gcc-dask", port, shot))
        finally:
            if browser is not None:
                browser.terminate()
                browser.wait(timeout=30)
            job.join(timeout=300)
    assert "error" not in outcome, outcome.get("error")
    assert seen["title"] == "gcc-dask run smoke"
    rows = seen["rows"]
    assert rows is not None, "BokehJS never rendered the page's document"
    assert "<td>gcc</td><td>16</td><td>12</td>" in rows["gcc-schemes"]  # scheme, N, N - S
    assert "<td>uncoded</td><td>8</td><td>8</td>" in rows["gcc-schemes"]
    assert rows["gcc-shards"] >= 20  # at least the first batch's 12 kept gcc shards and 8 uncoded ones
    assert os.path.getsize(shot) > 10_000
