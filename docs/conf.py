"""Sphinx configuration of the gcc-dask documentation.

Build: ``pip install -e ".[docs]" && python -m sphinx -W --keep-going -b html docs docs/_build/html``.
The example notebooks are executed at every build (myst-nb), so that their tables and figures show; they
write their stores under ``docs/_build/notebook-runs/``. The configuration reference is generated from the
pydantic models (``docs/_ext/config_reference.py``) and the CLI reference from the click commands
(sphinx-click). Math is rendered by a MathJax bundled with the docs (sphinx-mathjax-offline), so the pages
read the same without internet.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))

from gcc_dask import __version__  # noqa: E402

project = "gcc-dask"
author = "the gcc-dask developers"
copyright = "the gcc-dask developers, BSD-3-Clause"  # noqa: A001
version = release = __version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 copied into _static/mathjax: no CDN, math renders offline
    "numpydoc",
    "sphinx_click",
    "myst_nb",
    "config_reference",
]

# -- sources ------------------------------------------------------------------------------------------
source_suffix = {".rst": "restructuredtext", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints", "examples/pipelines"]
root_doc = "index"

# The example notebooks live in notebooks/ (where the tests execute them); they are copied here at every
# build so that the docs always render the current ones. docs/examples/*.ipynb is git-ignored.
_EXAMPLES = DOCS / "examples"
_EXAMPLES.mkdir(exist_ok=True)
for _old in _EXAMPLES.glob("*.ipynb"):
    _old.unlink()
for _nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
    shutil.copy2(_nb, _EXAMPLES / _nb.name)

# -- notebooks (myst-nb): executed at every build ---------------------------------------------------------
# They run in docs/examples/ as they would in notebooks/: the pipelines they read are linked beside them
# (docs/examples/pipelines, git-ignored), their stores go to docs/_build/notebook-runs/, and the live-dashboard
# notebook runs a short job. An error in a notebook fails the build.
_PIPELINES = _EXAMPLES / "pipelines"
if not _PIPELINES.exists():
    _PIPELINES.symlink_to(ROOT / "pipelines", target_is_directory=True)
os.environ.setdefault("GCC_DASK_OUT", str(DOCS / "_build" / "notebook-runs"))
os.environ.setdefault("GCC_DASK_LIVE_BATCHES", "8")
os.environ.setdefault("GCC_DASK_LIVE_REFRESH", "0.5")
nb_execution_mode = "force"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
myst_enable_extensions = ["dollarmath"]

# -- API reference (autodoc + numpydoc) -------------------------------------------------------------------
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
    "exclude-members": "model_config, model_post_init, model_fields, model_computed_fields",
}
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the numpydoc Parameters sections carry the types
autodoc_mock_imports = ["cupy", "torch"]
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

# -- output -------------------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"gcc-dask {release}"
html_static_path: list[str] = []
pygments_style = "sphinx"
