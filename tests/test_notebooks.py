"""The notebooks execute end to end (small settings), as a user would run them.

Each runs in a scratch copy of the repository layout (``notebooks/`` with ``pipelines/`` beside it) with
its default output folder, so the test also checks where a notebook writes: under ``runs/notebooks/``
only, never over a store that the README's commands (or the bundled pipelines) make. Every notebook
must show at least one figure as an image.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml
from nbclient import NotebookClient

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def user_store_paths() -> set[str]:
    """Stores the README's commands make: every ``runs/*.zarr`` it names, and each pipeline's own store."""
    paths = set(re.findall(r"runs/[\w.-]+\.zarr", (ROOT / "README.md").read_text(encoding="utf-8")))
    for config in (ROOT / "pipelines").glob("*.yaml"):
        data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        store = data.get("store") or {}
        paths.add(store.get("path") or f"runs/{data.get('name', config.stem)}.zarr")
    return paths


def _snapshot(base: Path, rels: set[str]) -> dict[str, float | None]:
    """Modification time of each path under `base` (None when absent), the newest file inside a store."""
    out = {}
    for rel in rels:
        path = base / rel
        files = [p for p in path.rglob("*")] if path.is_dir() else []
        out[rel] = max((p.stat().st_mtime for p in [path, *files]), default=None) if path.exists() else None
    return out


def test_user_store_paths_are_found():
    paths = user_store_paths()
    assert {"runs/mnist-lenet.zarr", "runs/rate_worst_case.zarr", "runs/smoke.zarr"} <= paths


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    # a scratch repository: the notebook's own folder, and the real pipelines (configs, model) beside it
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "pipelines").symlink_to(ROOT / "pipelines", target_is_directory=True)
    monkeypatch.delenv("GCC_DASK_OUT", raising=False)  # the notebooks' default output folder is under test
    monkeypatch.delenv("MPLBACKEND", raising=False)     # the notebooks choose the inline backend themselves
    monkeypatch.setenv("GCC_DASK_LIVE_BATCHES", "6")
    monkeypatch.setenv("GCC_DASK_LIVE_REFRESH", "0.3")
    stores = user_store_paths()
    before = _snapshot(ROOT, stores)

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(repo / "notebooks")}})
    client.execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, errors[0].get("evalue")
    assert nb.cells[-1].cell_type == "code"
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, f"{path.name} shows no figure as an image (image/png output)"

    made = sorted(p.relative_to(repo).as_posix() for p in (repo / "runs").glob("*")) if (repo / "runs").exists() else []
    assert made == ["runs/notebooks"], f"{path.name} wrote outside runs/notebooks/: {made}"
    assert any((repo / "runs" / "notebooks").iterdir()), f"{path.name} wrote nothing under runs/notebooks/"
    assert not [s for s in stores if (repo / s).exists()]
    assert _snapshot(ROOT, stores) == before, "a notebook touched a store of the README's commands"
