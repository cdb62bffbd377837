"""Every reference to a documentation page in the repository points to a page (and section) that exists.

Scans the tracked text files (code, notebooks, pipelines, Markdown, reStructuredText) for

* file names ending in ``.md`` or ``.rst`` (``RESULTS.md``, ``docs/methods.rst``): the file must exist,
  next to the referring file, at the repository root or under ``docs/``;
* paths under ``docs/`` (``docs/cluster.rst``, ``docs/_ext/config_reference.py``): the path must exist
  (``docs/_build`` and ``docs/examples``, made by the docs build, are exempt);
* ``docs/<page>.rst, section '<title>'`` and, inside ``docs/``, ``:doc:`<page>`, section "<title>"``: the
  page must have a section with that title.

A failure names the file and line of each broken reference.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEXT_SUFFIXES = {".py", ".md", ".rst", ".txt", ".yaml", ".yml", ".toml", ".ipynb", ".sh", ".cfg", ".ini", ".json"}
#: not documentation pages: files that the code writes (``gcc-dask report``, ``gcc-dask bench``, examples)
GENERATED = {"report.md", "coding.md", "pipeline.md", "path.md", "advice.md", "advice_check.md"}
#: folders the docs build makes (git-ignored), named in the build instructions
BUILD_OUTPUTS = ("docs/_build", "docs/examples")
SKIP_DIRS = {".git", ".venv", ".ci-venv", "build", "dist", "runs", "__pycache__", ".pytest_cache", ".hypothesis"}

PAGE = re.compile(r"(?<![\w./{}<>*-])((?:\.\.?/)?(?:[\w.-]+/)*[\w-]+\.(?:md|rst))(?![\w-])")
DOCS_PATH = re.compile(r"(?<![\w./-])(docs/[\w./-]*)")
SECTION = re.compile(r"(docs/[\w/.-]+\.rst),?\s+section\s+['\"“‘]([^'\"”’\n]+)['\"”’]")
DOC_ROLE_SECTION = re.compile(r":doc:`([\w/.-]+)`,?\s+section\s+['\"“‘]([^'\"”’\n]+)['\"”’]")
UNDERLINE = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}\s*$")


def tracked_files() -> list[Path]:
    """The repository's tracked files (``git ls-files``), or a walk of the tree without git."""
    if shutil.which("git") and (ROOT / ".git").exists():
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        files = [ROOT / p for p in out.decode().split("\0") if p]
    else:  # an unpacked sdist: walk it, leaving out environments and outputs
        files = [p for p in ROOT.rglob("*") if p.is_file()
                 and not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)]
    this = Path(__file__).resolve()  # its own examples of broken references are meant to be broken
    return sorted(p for p in files if p.is_file() and _is_text(p) and p.resolve() != this)


def _is_text(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    if path.name == ".gitignore":  # patterns, not references
        return False
    return path.suffix in TEXT_SUFFIXES or (not path.suffix and rel.parts[0] == ".ci")


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    return None if "\0" in text else text


def rst_sections(path: Path) -> set[str]:
    """Titles of the sections of an .rst file (a line underlined with one repeated punctuation character)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    titles = set()
    for title, under in zip(lines, lines[1:]):
        if title.strip() and not title.startswith(" ") and UNDERLINE.match(under) \
                and len(under.rstrip()) >= len(title.rstrip()) and not UNDERLINE.match(title):
            titles.add(_norm(title))
    return titles


def _norm(title: str) -> str:
    return " ".join(title.replace("``", "").split()).lower()


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _page_exists(ref: str, referrer: Path) -> bool:
    ref = ref.split("#", 1)[0]
    for base in (referrer.parent, ROOT, ROOT / "docs"):
        if (base / ref).exists():
            return True
    return False


def _docs_path_exists(ref: str) -> bool:
    ref = ref.rstrip(".,:;")
    if any(ref == out or ref.startswith(out + "/") for out in BUILD_OUTPUTS) or ref == "docs/":
        return True
    target = ROOT / ref
    return target.exists() or target.with_suffix(".rst").exists() or Path(str(target) + ".rst").exists()


def broken_references() -> list[str]:
    problems = []
    sections: dict[Path, set[str]] = {}
    for path in tracked_files():
        text = _read(path)
        if text is None:
            continue
        rel = path.relative_to(ROOT)
        for m in PAGE.finditer(text):
            ref = m.group(1)
            if Path(ref).name in GENERATED or _page_exists(ref, path):
                continue
            problems.append(f"{rel}:{_line(text, m.start())}: {ref!r} does not exist in the repository")
        for m in DOCS_PATH.finditer(text):
            ref = m.group(1)
            if ref.endswith((".md", ".rst")) or _docs_path_exists(ref):  # pages are checked above
                continue
            problems.append(f"{rel}:{_line(text, m.start())}: {ref!r} does not exist in the repository")
        found = [(m.group(1), m.group(2), m.start()) for m in SECTION.finditer(text)]
        if rel.parts[0] == "docs":
            found += [(f"docs/{m.group(1)}.rst", m.group(2), m.start()) for m in DOC_ROLE_SECTION.finditer(text)]
        for page, title, pos in found:
            target = ROOT / page
            if not target.is_file():
                continue  # reported above
            titles = sections.setdefault(target, rst_sections(target))
            if _norm(title) not in titles:
                problems.append(f"{rel}:{_line(text, pos)}: {page} has no section {title!r}")
    return problems


def test_references_to_docs_pages_exist():
    problems = broken_references()
    assert not problems, "broken references to documentation pages:\n" + "\n".join(problems)


def test_the_checker_sees_references():
    """The patterns find what they are meant to (so that an empty result means something)."""
    text = ("See docs/methods.rst, section 'BACC' and RESULTS.md; not https://example.org/a/README.md.\n"
            "Also docs/cluster.rst and :doc:`pipeline`, section \"Cutoff\".")
    assert [m.group(1) for m in PAGE.finditer(text)] == ["docs/methods.rst", "RESULTS.md", "docs/cluster.rst"]
    assert [m.groups() for m in SECTION.finditer(text)] == [("docs/methods.rst", "BACC")]
    assert [m.groups() for m in DOC_ROLE_SECTION.finditer(text)] == [("pipeline", "Cutoff")]
    assert {"bacc", "lcc", "convergence rates"} <= rst_sections(ROOT / "docs" / "methods.rst")
    files = {p.relative_to(ROOT).as_posix() for p in tracked_files()}
    assert {"README.md", "gcc_dask/coding/berrut.py", "notebooks/03_rate_analysis.ipynb"} <= files


@pytest.mark.parametrize(("text", "expected"), [
    ("see NOWHERE.md for details", ["NOWHERE.md"]),
    ("docs/nowhere.rst, section 'x'", ["docs/nowhere.rst"]),
    ("docs/methods.rst, section 'No such section'", ["No such section"]),
    ("docs/methods.rst,\n    section 'BACC'", []),
    ("gcc-dask report writes report.md and coding.md", []),
], ids=["missing-page", "missing-docs-page", "missing-section", "section-on-next-line", "generated-files"])
def test_the_checker_flags_broken_references(tmp_path, monkeypatch, text, expected):
    import sys

    module = sys.modules[__name__]
    probe = ROOT / "docs" / "methods.rst"  # any real file works as the referrer's location
    monkeypatch.setattr(module, "tracked_files", lambda: [probe])
    monkeypatch.setattr(module, "_read", lambda path: text)
    problems = broken_references()
    assert len(problems) == len(expected), problems
    for problem, word in zip(problems, expected):
        assert word in problem and problem.startswith("docs/methods.rst:")
