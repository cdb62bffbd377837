"""A store records the git commit of the source tree that made it (root attribute ``git_sha``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import zarr

from gcc_dask.store.layout import _git_sha

ROOT = Path(__file__).resolve().parent.parent
SHA = re.compile(r"^[0-9a-f]{40}$")
A, B = "a" * 40, "b" * 40

needs_checkout = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(),
    reason="needs git and a git checkout of gcc-dask",
)


def _head(repo: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.strip()


# ------------------------------------------------------------------ .git layouts, built by hand
def _gitdir(path: Path, head: str, refs: dict[str, str] = {}, packed: dict[str, str] = {}) -> Path:  # noqa: B006
    path.mkdir(parents=True)
    (path / "HEAD").write_text(head + "\n")
    for ref, sha in refs.items():
        (path / ref).parent.mkdir(parents=True, exist_ok=True)
        (path / ref).write_text(sha + "\n")
    if packed:
        lines = ["# pack-refs with: peeled fully-peeled sorted"] + [f"{sha} {ref}" for ref, sha in packed.items()]
        (path / "packed-refs").write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("layout", "expected"), [
    ("loose-ref", A),
    ("packed-ref", B),
    ("detached", A),
    ("worktree", B),
    ("worktree-relative", B),
    ("no-git", None),
    ("garbage-head", None),
], ids=lambda v: v if isinstance(v, str) else None)
def test_git_sha_reads_every_layout(tmp_path, layout, expected):
    root = tmp_path / "repo"
    root.mkdir()
    if layout == "loose-ref":
        _gitdir(root / ".git", "ref: refs/heads/main", refs={"refs/heads/main": A})
    elif layout == "packed-ref":
        _gitdir(root / ".git", "ref: refs/heads/main", packed={"refs/heads/other": A, "refs/heads/main": B})
    elif layout == "detached":
        _gitdir(root / ".git", A)
    elif layout in ("worktree", "worktree-relative"):
        common = _gitdir(tmp_path / "main.git", "ref: refs/heads/main", packed={"refs/heads/wt": B})
        wt = _gitdir(common / "worktrees" / "wt", "ref: refs/heads/wt")
        (wt / "commondir").write_text("../..\n")
        target = wt if layout == "worktree" else Path("..") / "main.git" / "worktrees" / "wt"
        (root / ".git").write_text(f"gitdir: {target}\n")
    elif layout == "garbage-head":
        _gitdir(root / ".git", "not a commit")
    assert _git_sha(root) == expected


# ------------------------------------------------------------------ the real source tree
@needs_checkout
def test_git_sha_of_this_checkout():
    """The default root is the repository root (``parents[2]`` of gcc_dask/store/layout.py), not gcc_dask/."""
    assert _git_sha() == _head(ROOT)


@needs_checkout
@pytest.mark.slow
def test_run_from_a_clone_records_its_commit(tmp_path):
    """A pipeline run from a fresh ``git clone`` stores the clone's HEAD as a 40-hex ``git_sha``."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-local", str(ROOT), str(clone)], check=True,
                   capture_output=True)
    # run this checkout's package (with its uncommitted edits, if any) from inside the clone
    shutil.rmtree(clone / "gcc_dask")
    shutil.copytree(ROOT / "gcc_dask", clone / "gcc_dask", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "run.zarr"
    script = (
        "import sys, gcc_dask as gd\n"
        "assert gd.__file__.startswith(sys.argv[1]), gd.__file__\n"
        "gd.run_pipeline('pipelines/smoke.yaml', out=sys.argv[2], overrides=['run.limit_batches=1', "
        "'run.progress=false', 'cluster.n_workers=1', 'cluster.threads_per_worker=4'])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(clone), str(out)], cwd=clone, check=True, timeout=300,
                   env={**_clean_env(), "PYTHONPATH": str(clone)})
    sha = zarr.open_group(str(out), mode="r").attrs["git_sha"]
    assert SHA.match(sha), sha
    assert sha == _head(clone)


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PYTHONPATH"))}
