"""A page of the run's own on the Dask scheduler's dashboard (docs/dashboard.rst).

:func:`attach` puts the page on a client's scheduler and returns its link; the driver loop then calls
:func:`publish` with what the run does. The page itself (:mod:`~gcc_dask.dashboard.page`, Bokeh) and its state
(:mod:`~.state`, kept by the scheduler plugin :mod:`~.plugin`) live on the scheduler. Importing this package imports
neither distributed nor bokeh.
"""

from gcc_dask.dashboard.driver import (PAGE, TOPIC, attach, page_url, publish, record_summary, start_event,
                                       sweep_start_event)

__all__ = ["PAGE", "TOPIC", "attach", "iframe", "page_url", "publish", "record_summary", "start_event",
           "sweep_start_event"]


def iframe(client=None, height: int = 900):
    """The run's page of `client` (default: the current client) as an IPython ``IFrame``, for a notebook cell.

    Raises
    ------
    ValueError
        If the client's scheduler serves no dashboard.
    """
    from IPython.display import IFrame

    if client is None:
        from distributed import default_client

        client = default_client()
    url = attach(client)
    if url is None:
        raise ValueError("iframe: the client's scheduler serves no dashboard (start it with a dashboard_address, "
                         "or install bokeh), so there is no run page to show")
    return IFrame(url, width="100%", height=height)
