"""Helpers of the run page's tests: fetch a URL, wait for the run's state, read the page's summary and document."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

#: overrides that make the smoke run last several seconds (6 batches of injected 700 ms stragglers, one batch in
#: flight), so that the page is looked at while the run goes on
SLOW = ["run.progress=false", "source.limit=96", "schemes=[gcc,uncoded]", "stragglers.shift=700ms",
        "cutoff.deadline=2s", "run.max_batches_in_flight=1", "store.overwrite=true"]


def get(url: str) -> tuple[int, str]:
    """``(status, body)`` of a GET (an HTTP error's status, with an empty body)."""
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - a local http:// URL
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, ""


def base_of(dashboard_link: str) -> str:
    return dashboard_link.rsplit("/status", 1)[0]


def wait_for_run(base: str, predicate, timeout: float = 240.0, alive=lambda: True) -> dict | None:
    """The last run of ``base/gcc-dask/state.json`` once ``predicate(run)`` holds; None if it never did while
    ``alive()`` (the run's thread or process) or within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        status, body = get(base + "/gcc-dask/state.json")
        if status == 200:
            runs = json.loads(body)["runs"]
            if runs and predicate(runs[-1]):
                return runs[-1]
        time.sleep(0.1)
    return None


def batches_done(run: dict) -> int:
    return min((s["done"] for s in run["schemes"]), default=0)


def page_summary(body: str) -> dict:
    """The run summary the page's HTML holds (``<script id="gcc-dask-state" type="application/json">``)."""
    start = body.index('<script id="gcc-dask-state" type="application/json">')
    start = body.index(">", start) + 1
    return json.loads(body[start:body.index("</script>", start)])


def document_of(url: str) -> dict:
    """The page's Bokeh document, pulled as a browser would (over its websocket): the rows of each named data
    source, and the text of each named Div."""
    from bokeh.client import pull_session
    from bokeh.models import ColumnDataSource, Div

    with pull_session(url=url) as session:
        doc = session.document
        out = {m.name: len(next(iter(m.data.values()), [])) for m in doc.select({"type": ColumnDataSource})}
        out.update({m.name: m.text for m in doc.select({"type": Div})})
        return out


def in_thread(fn):
    """Run `fn` in a thread; returns ``(thread, outcome)`` with ``outcome["result"]`` or ``outcome["error"]``."""
    outcome: dict = {}

    def target():
        try:
            outcome["result"] = fn()
        except BaseException as exc:  # re-raised by the test, in its own thread
            outcome["error"] = exc

    job = threading.Thread(target=target, daemon=True)
    job.start()
    return job, outcome
