"""gcc-dask: general coded computing (GCC) on Dask.

Encode a batch of K inputs into N coded inputs, evaluate f on N Dask workers, keep the results that
arrive before a speculative cutoff and decode estimates of all K outputs from them (arXiv 2608.28910).

Importing this package is cheap: it does not import dask.distributed, zarr or matplotlib. The heavy
entry points (:func:`run_pipeline`, :func:`open_run`) import them on first use.
"""

from __future__ import annotations

import logging as _logging
from importlib import import_module as _import_module
from typing import TYPE_CHECKING as _TYPE_CHECKING

# a library logs, an application decides what to show: without a handler of the application's, gcc-dask's
# warnings (a failed batch, a lost record; all of them also in the store and the summary) stay silent
_logging.getLogger("gcc_dask").addHandler(_logging.NullHandler())

from gcc_dask import errors, stragglers  # noqa: E402
from gcc_dask._version import __version__  # noqa: E402
from gcc_dask.coding import CodingScheme, list_codes, make_code, register_code  # noqa: E402

__all__ = [
    "__version__",
    "CodedPostFit",
    "CodedResult",
    "CodingScheme",
    "RunResult",
    "coded_map",
    "errors",
    "list_codes",
    "make_code",
    "load_config",
    "open_run",
    "open_sweep",
    "register_code",
    "run_pipeline",
    "run_sweep",
    "stragglers",
]

_LAZY = {
    "run_pipeline": ("gcc_dask.pipeline", "run_pipeline"),
    "RunResult": ("gcc_dask.pipeline", "RunResult"),
    "coded_map": ("gcc_dask.coded", "coded_map"),
    "CodedResult": ("gcc_dask.coded", "CodedResult"),
    "CodedPostFit": ("gcc_dask.postfit", "CodedPostFit"),
    "open_run": ("gcc_dask.store", "open_run"),
    "run_sweep": ("gcc_dask.sweep", "run_sweep"),
    "open_sweep": ("gcc_dask.sweep", "open_sweep"),
    "load_config": ("gcc_dask.config", "load_config"),
}

if _TYPE_CHECKING:  # pragma: no cover
    from gcc_dask.coded import CodedResult, coded_map
    from gcc_dask.config import load_config
    from gcc_dask.pipeline import RunResult, run_pipeline
    from gcc_dask.postfit import CodedPostFit
    from gcc_dask.store import open_run
    from gcc_dask.sweep import open_sweep, run_sweep


def __getattr__(name: str):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'gcc_dask' has no attribute {name!r}") from None
    return getattr(_import_module(module), attr)


def __dir__() -> list[str]:
    """The public API (``__all__``), the subpackages imported so far and the dunder attributes; not the
    module's own helpers (``_LAZY``, the imports it needs)."""
    import types

    names = [k for k, v in globals().items() if (k.startswith("__") and k.endswith("__"))
             or (isinstance(v, types.ModuleType) and not k.startswith("_"))]
    return sorted({*__all__, *names})
