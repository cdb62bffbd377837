"""Sphinx configuration of the gcc-dask documentation.

Build: ``pip install -e ".[docs]" && python -m sphinx -W --keep-going -b html docs docs/_build/html``.
Nothing is executed at build time except imports of gcc_dask: the notebooks are rendered as stored
(myst-nb, execution off), the configuration reference is generated from the pydantic models
(``docs/_ext/config_reference.py``) and the CLI reference from the click commands (sphinx-click).
"""

from __future__ import annotations

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
    "numpydoc",
    "sphinx_click",
    "myst_nb",
    "config_reference",
]

# -- sources ------------------------------------------------------------------------------------------
source_suffix = {".rst": "restructuredtext", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
root_doc = "index"

# The example notebooks live in notebooks/ (where the tests execute them); they are copied here at every
# build so that the docs always render the current ones. docs/examples/*.ipynb is git-ignored.
_EXAMPLES = DOCS / "examples"
_EXAMPLES.mkdir(exist_ok=True)
for _old in _EXAMPLES.glob("*.ipynb"):
    _old.unlink()
for _nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
    shutil.copy2(_nb, _EXAMPLES / _nb.name)

# -- notebooks (myst-nb): rendered as stored, never executed -----------------------------------------------
nb_execution_mode = "off"
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
