"""The public API: what ``dir(gcc_dask)`` lists, and that ``import gcc_dask`` stays light."""

from __future__ import annotations

import subprocess
import sys

import gcc_dask as gd


def test_dir_lists_the_public_api_and_not_the_helpers():
    names = dir(gd)
    for name in ("run_pipeline", "RunResult", "coded_map", "CodedResult", "CodedPostFit", "open_run", "run_sweep",
                 "open_sweep", "load_config", "make_code", "list_codes", "stragglers", "errors", "__version__"):
        assert name in names, name
        getattr(gd, name)  # every listed name resolves
    for helper in ("Any", "TYPE_CHECKING", "logging", "import_module", "annotations", "_LAZY"):
        assert helper not in names, helper
    assert set(gd.__all__) <= set(names)


def test_import_is_light():
    code = ("import sys, gcc_dask; heavy = [m for m in ('distributed', 'zarr', 'matplotlib', 'cloudpickle', 'xarray') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
