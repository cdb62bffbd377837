"""Sphinx directive ``config-reference``: the configuration reference, generated from the pydantic models.

Usage, in an ``.rst`` page::

    .. config-reference:: gcc_dask.config.PipelineConfig
       :title-char: -

walks the model's fields at build time. Fields whose type is itself a model (``source``, ``cutoff``, ...)
become one section each, listing every key of that section; the other fields are listed first, as the
top-level keys. Each key gets its type (from the annotation and its constraints), its default and its
meaning, taken from, in order:

1. the field's ``description`` (``Field(description=...)``);
2. the entry of the same name in the ``Attributes`` section of the model's class docstring (numpydoc).

A key with neither is reported as a Sphinx warning naming the model and the key, so a build with ``-W``
fails until the new key is described. The section's own text is the class docstring without its
``Attributes`` section. Nothing here is hand-maintained: a key added to the models appears in the docs on
the next build.
"""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from numpydoc.docscrape import NumpyDocString
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

logger = logging.getLogger(__name__)

#: names of BeforeValidator functions (gcc_dask.config.fields) that stand for a value type of their own
_VALIDATOR_TYPES = {"_duration": "duration", "_optional_duration": "duration or null", "_as_path_str": "path"}


def _import(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _is_model(tp: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]), True
    return tp, False


def _constraints(metadata: list) -> list[str]:
    out = []
    for item in metadata:
        for attr, sym in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥")):
            value = getattr(item, attr, None)
            if value is not None and not callable(value):
                out.append(f"{sym} {value}")
        out.extend(_constraints(getattr(item, "metadata", []) or []))
    return out


def _validator_type(metadata: list) -> str | None:
    for item in metadata:
        func = getattr(item, "func", None)
        if func is None:
            continue
        name = getattr(func, "__name__", "")
        if name in _VALIDATOR_TYPES:
            return _VALIDATOR_TYPES[name]
        doc = inspect.getdoc(func)
        if doc:  # a validator that states what it accepts in its first docstring line
            return doc.splitlines()[0].rstrip(".")
    return None


def render_type(tp: Any, metadata: list | None = None) -> str:
    """A short, readable type: ``integer ≥ 1``, ``one of 'a', 'b'``, ``duration or null``, ``list of ...``."""
    metadata = list(metadata or [])
    if typing.get_origin(tp) is typing.Annotated:
        base, *extra = typing.get_args(tp)
        return render_type(base, metadata + list(extra))
    special = _validator_type(metadata)
    if special:
        return special
    tp, optional = _unwrap_optional(tp)
    if optional:
        return f"{render_type(tp, metadata)} or null"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        text = "one of " + ", ".join(f"``{a!r}``" for a in args)
    elif origin in (typing.Union, types.UnionType):
        text = " or ".join(render_type(a) for a in args)
    elif origin in (list, tuple):
        text = f"list of {render_type(args[0])}" if args else "list"
    elif origin is dict or tp is dict:
        text = "mapping"
    elif _is_model(tp):
        text = "section"
    else:
        text = {bool: "boolean", int: "integer", float: "number", str: "string", Any: "any"}.get(tp, None)
        if text is None:
            text = getattr(tp, "__name__", str(tp))
    bounds = _constraints(metadata)
    return f"{text} {', '.join(bounds)}" if bounds else text


def render_default(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        value = field.default_factory()
        if _is_model(type(value)):
            return "(see below)"
        return f"``{value!r}``"
    if field.default is PydanticUndefined:
        return "*required*"
    if field.default is None:
        return "``null``"
    if isinstance(field.default, bool):
        return f"``{str(field.default).lower()}``"
    return f"``{field.default!r}``"


def _docstring(model: type) -> tuple[list[str], dict[str, str]]:
    """The class docstring's text without its Attributes section, and the Attributes entries by name."""
    doc = NumpyDocString(inspect.getdoc(model) or "")
    text = [*doc["Summary"], "", *doc["Extended Summary"]]
    described: dict[str, str] = {}
    for param in doc["Attributes"]:
        for name in param.name.split(","):
            described[name.strip()] = " ".join(line.strip() for line in param.desc).strip()
    return text, described


def _cell(text: str) -> list[str]:
    lines = text.splitlines() or [""]
    return [lines[0], *("  " + line for line in lines[1:])]


class ConfigReference(SphinxDirective):
    required_arguments = 1
    option_spec = {"title-char": directives.unchanged, "prefix": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        model = _import(self.arguments[0])
        char = self.options.get("title-char", "-")
        prefix = self.options.get("prefix", "")
        lines: list[str] = []
        top = [(n, f) for n, f in model.model_fields.items() if not _is_model(_unwrap_optional(f.annotation)[0])]
        sections = [(n, f) for n, f in model.model_fields.items() if _is_model(_unwrap_optional(f.annotation)[0])]
        self._table(lines, model, top, prefix)
        for name, field in sections:
            sub = _unwrap_optional(field.annotation)[0]
            title = f"``{prefix}{name}``"
            lines += ["", title, char * len(title), ""]
            text, _ = _docstring(sub)
            lines += [*text, ""]
            if field.default_factory is None and field.default is not None:
                lines += ["This section is required.", ""]
            self._table(lines, sub, list(sub.model_fields.items()), f"{prefix}{name}.")
        node = nodes.section() if sections else nodes.container()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=self.arguments[0]), node)
        return node.children

    def _table(self, lines: list[str], model: type, fields: list, prefix: str) -> None:
        _, described = _docstring(model)
        lines += [".. list-table::", "   :header-rows: 1", "   :widths: 20 22 14 44", "",
                  "   * - Key", "     - Type", "     - Default", "     - Meaning"]
        for name, field in fields:
            meaning = field.description or described.get(name)
            if not meaning:
                logger.warning(f"config reference: key {prefix}{name} ({model.__qualname__}) has no "
                               f"description; add it to the Attributes section of {model.__qualname__}'s "
                               f"docstring ({model.__module__})", location=(self.env.docname, self.lineno))
                meaning = ""
            kind = render_type(field.annotation, field.metadata)
            default = render_default(field)
            if kind.startswith("duration") and isinstance(field.default, (int, float)):
                default = f"``{field.default:g}`` s"
            rows = [f"``{prefix}{name}``", kind, default, meaning]
            for i, cell in enumerate(rows):
                head = "   * - " if i == 0 else "     - "
                body = _cell(cell)
                lines.append(head + body[0])
                lines.extend("       " + line for line in body[1:])
        lines.append("")


def setup(app):
    app.add_directive("config-reference", ConfigReference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
