"""What the run page costs, piece by piece, without a cluster: the scheduler plugin's hook per task transition,
the driver's publish() per event, and a full redraw of an open page (its columns and Bokeh's serialization of
them: what a page opened gets, and the run's end sends; a redraw in between sends the shards that changed).

A run of 400 batches of 24 shards (gcc N = 16 and uncoded N = 8) on 2 workers, fed to the plugin as the scheduler
would; best of 5 repeats. docs/dashboard.rst and BENCHMARKS.md, section 'The run page's cost', have the figures.

    python pipelines/bench_run_page_micro.py
"""
import time

from bokeh.core.serialization import Serializer

from gcc_dask.dashboard import driver, page
from gcc_dask.dashboard.plugin import DashboardPlugin

BATCHES, SCHEMES = 400, (("gcc", 16), ("uncoded", 8))


def best(f, n, reps=5):
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        f(n)
        out.append((time.perf_counter() - t) / n)
    return min(out)


class _Scheduler:
    tasks: dict = {}


def run_plugin() -> DashboardPlugin:
    p = DashboardPlugin()
    p.scheduler = _Scheduler()
    p.state.event({"kind": "start", "run": "tok", "t": 0.0,
                   "schemes": {"gcc": {"N": 16, "needed": 12}, "uncoded": {"N": 8, "needed": 8}}}, 0.0)
    return p


def feed(p, batches):
    """`batches` batches: each shard through its five transitions (waiting, processing, memory, released,
    forgotten), 0.4 s long, a batch every 0.5 s, then done."""
    for b in range(batches):
        i = 0
        for scheme, n in SCHEMES:
            for w in range(n):
                key, worker, t = f"eval-b{b}-w{w}-{scheme}-tok", f"tcp://10.0.0.{i % 2}:8786", b * 0.5
                p.transition(key, "released", "waiting", stimulus_id="x")
                p.transition(key, "waiting", "processing", stimulus_id="x")
                p.transition(key, "processing", "memory", stimulus_id="x", worker=worker,
                             startstops=[{"action": "compute", "start": t, "stop": t + 0.4}])
                p.transition(key, "memory", "released", stimulus_id="x")
                p.transition(key, "released", "forgotten", stimulus_id="x")
                i += 1
            p.log_event("gcc-dask", {"events": [{"kind": "done", "run": "tok", "batch": b, "records": [
                {"scheme": scheme, "status": 1, "batch_latency_s": 0.5, "rel_acc": 1.0, "received": list(range(n))}]}]})


if __name__ == "__main__":
    shards_per_call = sum(n for _, n in SCHEMES)
    t_shard = best(lambda n: feed(run_plugin(), n), 40) / shards_per_call  # a shard's 5 transitions

    p = run_plugin()

    def others(n):
        for i in range(n):
            p.transition(("decode", i), "waiting", "processing", stimulus_id="x")
            p.transition(f"reference-b{i}-tok", "processing", "memory", stimulus_id="x")

    t_other = best(others, 20000) / 2

    class _Loop:
        def add_callback(self, *a):
            pass

    class _Client:
        loop = _Loop()

    client = _Client()
    pub = driver._Publisher(client)
    driver._publishers[client] = pub

    def publishes(n):
        for i in range(n):
            driver.publish(client, {"kind": "cutoff", "run": "tok", "batch": i, "scheme": "gcc",
                                    "kept": list(range(12)), "cutoff_s": 0.1, "status": 1})
            pub._pending.clear()

    t_pub = best(publishes, 20000)

    p = run_plugin()
    feed(p, BATCHES)

    class _Sched:
        plugins = {"gcc-dask-dashboard": p}

    def redraw(n):
        for _ in range(n):
            s = page._latest(_Sched)
            cols, labels = page._shard_columns(s)
            html = page._header(s) + page.scheme_table(s) + page.flight_table(s)
            Serializer().encode({"a": cols, "c": page._flight_columns(s), "d": html})

    t_redraw = best(redraw, 10)
    print(f"plugin, the 5 transitions of one of a run's shards: {t_shard * 1e6:.2f} us; a transition of any other "
          f"task: {t_other * 1e6:.2f} us")
    print(f"driver, one publish(): {t_pub * 1e6:.2f} us")
    print(f"page, a full redraw of {len(page._latest(_Sched)['shards'])} shards (a page opened, the run's end): "
          f"{t_redraw * 1e3:.1f} ms")
