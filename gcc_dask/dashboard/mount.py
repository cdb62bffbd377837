"""Add the run's page to a running scheduler's dashboard (its Bokeh server) and serve the state as JSON.

distributed builds its dashboard's Bokeh server (a ``BokehTornado`` in ``scheduler.http_application``) from a
fixed table of pages when the scheduler starts (``distributed.dashboard.scheduler.applications``), and lists
the paths of that server starting with ``individual-`` in ``/individual-plots.json``, which dask-labextension
offers as JupyterLab panes. A run's scheduler may have started long before (an outside scheduler), so the page
is added to that same server at runtime, as ``BokehTornado.__init__`` adds each of its pages: an
``ApplicationContext`` for the path, and its routes (``bokeh.server.urls.per_app_patterns``) added to the
server's handlers. Checked against bokeh 3.9 and distributed 2026.8 (tests/dashboard/test_run_page.py).
"""

from __future__ import annotations

import json
import logging
import math
import time

from gcc_dask.dashboard.names import PAGE, PLUGIN_NAME, STATE_JSON

__all__ = ["mount"]

logger = logging.getLogger(__name__)


def _bokeh_server(scheduler):
    """The dashboard's Bokeh server of `scheduler` (the first, as ``/individual-plots.json`` takes), or None."""
    from bokeh.server.tornado import BokehTornado

    http = getattr(scheduler, "http_application", None)
    for app in getattr(http, "applications", ()):
        if isinstance(app, BokehTornado):
            return app
    return None


def _plugin(scheduler):
    return scheduler.plugins.get(PLUGIN_NAME)


def mount(scheduler) -> bool:
    """Serve the page at :data:`~.names.PAGE` and the state at :data:`~.names.STATE_JSON`; whether it is
    served (False: no dashboard, or no bokeh). Mounted once per scheduler: the page finds the plugin registered
    at the time it is opened."""
    try:
        server = _bokeh_server(scheduler)
    except ImportError:
        return False
    if server is None:
        return False
    if PAGE in server.app_paths:
        return True
    from bokeh.application import Application
    from bokeh.application.handlers.function import FunctionHandler
    from bokeh.server.contexts import ApplicationContext
    from bokeh.server.tornado import create_static_handler
    from bokeh.server.urls import per_app_patterns
    from bokeh.server.views.ws import WSHandler

    from gcc_dask.dashboard.page import make_document

    app = Application(FunctionHandler(lambda doc: make_document(doc, scheduler)))
    ctx = ApplicationContext(app, io_loop=getattr(server, "_loop", None), url=PAGE, logout_url=None)
    prefix = server.prefix
    routes = []
    for pattern, handler, *rest in per_app_patterns:
        context = dict(rest[0]) if rest else {}
        context["application_context"] = ctx
        if issubclass(handler, WSHandler):
            context["compression_level"] = None
            context["mem_level"] = None
        routes.append((prefix + PAGE + pattern, handler, context))
    ws_path = next(r[0] for r in routes if r[0].endswith("/ws"))
    for r in routes:
        r[2]["bokeh_websocket_path"] = ws_path
    routes.append(create_static_handler(prefix, PAGE, app))
    server._applications[PAGE] = ctx  # (a dict: BokehTornado.app_paths lists its keys)
    server.add_handlers(r".*", routes)
    if ctx.io_loop is not None:
        ctx.io_loop.add_callback(ctx.run_load_hook)
    scheduler.http_application.add_handlers(r".*", [(prefix + STATE_JSON, _state_handler(), {"scheduler": scheduler})])
    return True


def _clean(x):
    """JSON without NaN or infinities (None instead), for browsers' JSON.parse."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _state_handler():
    from tornado import web

    class StateHandler(web.RequestHandler):
        """``GET /gcc-dask/state.json``: every run the scheduler knows, as the page sees it."""

        def initialize(self, scheduler) -> None:
            self.scheduler = scheduler

        def get(self) -> None:
            plugin = _plugin(self.scheduler)
            data = {"runs": []} if plugin is None else plugin.state.snapshot(time.time())
            self.set_header("Content-Type", "application/json")
            self.write(json.dumps(_clean(data)))

    return StateHandler
