"""Reading a pipeline config: YAML (duplicate keys refused), ``--set`` overrides, paths, one-line errors."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gcc_dask.errors import ConfigError

from .fields import _as_path_str, _expected, _fail, _Invalid, _key_path, _short
from .sections import _NAME_RE, _SECTIONS, _SOURCE_KEYS, _WORKLOAD_OBJECTS, PipelineConfig, _default_store_path

class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that rejects duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in out
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"unhashable key {key!r}", key_node.start_mark) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise _fail("config file", str(path), "an existing YAML file")
    try:
        text = path.read_text(encoding="utf-8")
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: got invalid YAML{where} ({problem}); expected a YAML mapping of config "
                          "sections") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: got a file that cannot be read as UTF-8 text ({exc}); expected a YAML "
                          "config file") from None


def _copy_tree(value: Any, _seen: tuple[int, ...] = ()) -> Any:
    """Copy nested mappings/lists (not leaves: an in-memory array is never copied).

    Raises ConfigError for a cycle (a recursive YAML alias such as ``a: &x [*x]``).
    """
    if isinstance(value, (Mapping, list)):
        if id(value) in _seen:
            raise ConfigError("config: got a recursive YAML alias (a value that contains itself); expected a tree "
                              "of mappings, lists and scalars")
        seen = (*_seen, id(value))
        if isinstance(value, Mapping):
            return {k: _copy_tree(v, seen) for k, v in value.items()}
        return [_copy_tree(v, seen) for v in value]
    return value


def _parse_value(raw: str) -> Any:
    try:
        return yaml.load(raw, Loader=_UniqueKeyLoader)  # noqa: S506
    except yaml.YAMLError:
        return raw


#: fields a config holds that a user does not write: left out of the keys an error offers
_DERIVED_KEYS = frozenset({"scheme_entries"})  # filled from the entries of ``schemes``


def _user_keys(model: type[BaseModel]) -> list[str]:
    """The keys of `model` a user writes (its fields less :data:`_DERIVED_KEYS`), for error messages."""
    return [k for k in model.model_fields if k not in _DERIVED_KEYS]


def _section_model(model: type[BaseModel], key: str) -> type[BaseModel] | str | None:
    """The model of field `key` of `model`, "dict" for free-form mappings, None for leaves."""
    field = model.model_fields[key]
    ann = field.annotation
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    if key == "params":
        return "dict"
    return None


def _apply_override(data: dict, item: Any) -> None:
    if not isinstance(item, str) or "=" not in item or not item.partition("=")[0].strip():
        raise _fail("--set", item, "KEY=VALUE, such as cutoff.stragglers=2 or schemes=[gcc,uncoded]")
    key, _, raw = item.partition("=")
    parts = key.strip().split(".")
    model: type[BaseModel] | str | None = PipelineConfig
    node = data
    for i, part in enumerate(parts):
        where = _key_path(parts[: i + 1])
        if model is None:
            raise _fail(f"--set {_key_path(parts)}", raw, f"a key path; {_key_path(parts[:i])} has no sub-keys")
        if model != "dict":
            valid = _user_keys(model)  # type: ignore[arg-type]
            if part not in model.model_fields:  # type: ignore[union-attr]
                parent = _key_path(parts[:i]) or "the top level"
                raise ConfigError(f"{where}: got unknown key {part!r} (from --set {item!r}){_did_you_mean(part, valid)};"
                                  f" expected one of the keys of {parent}: {', '.join(valid)}")
            nxt = _section_model(model, part)  # type: ignore[arg-type]
        else:
            nxt = "dict"
        if i == len(parts) - 1:
            node[part] = _parse_value(raw)
        else:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        model = nxt


def _resolve_existing(path: str, roots: Sequence[Path]) -> Path | None:
    p = Path(path).expanduser()
    if p.is_absolute():
        return p if p.exists() else None
    for root in roots:
        if (root / p).exists():
            return (root / p).resolve()
    return None


def _resolve_paths(data: dict, base_dir: Path, check_paths: bool) -> None:
    """Make file paths absolute in place: inputs are searched in the cwd, then in the config file's
    directory and its parents; outputs (store.path) are relative to the cwd."""
    roots = [Path.cwd(), base_dir, *base_dir.parents]
    inputs = []
    src, wl = data.get("source"), data.get("workload")
    if isinstance(src, dict) and src.get("kind") in ("zarr", "npy"):
        inputs.append(("source", "path"))
        if src.get("kind") == "npy":
            inputs.append(("source", "labels"))
    if isinstance(wl, dict) and wl.get("kind") in ("onnx", "torch"):
        inputs.append(("workload", "path"))
    cluster = data.get("cluster")
    if isinstance(cluster, dict):
        inputs.append(("cluster", "scheduler_file"))
    for section, key in inputs:
        value = _as_path_str(data[section].get(key))
        if not isinstance(value, str) or not value:
            continue
        found = _resolve_existing(value, roots)
        if found is not None:
            data[section][key] = str(found)
        elif check_paths:
            searched = ", ".join(dict.fromkeys(str(r) for r in roots[:2]))
            raise _fail(f"{section}.{key}", value, f"an existing file (searched {searched} and parents)")
    store = data.get("store")
    if isinstance(store, dict):
        value = _as_path_str(store.get("path"))
        if isinstance(value, str) and value and "://" not in value:
            store["path"] = str(Path(value).expanduser().absolute())


def _did_you_mean(key: Any, valid: Sequence[str]) -> str:
    """``" (did you mean 'num_workers'?)"`` for a key close to a valid one (a typo), else ``""``."""
    import difflib

    close = difflib.get_close_matches(str(key), list(valid), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _first_error(exc: ValidationError) -> dict:
    """The error to report: an unknown key before anything else, since a typo in a required key (``num_worker``)
    also makes the real key (``num_workers``) missing, and the typo is what the user wrote."""
    errors = exc.errors(include_url=False)
    for err in errors:
        if err.get("type") == "extra_forbidden":
            return err
    return errors[0]


def _error_line(exc: ValidationError) -> str:
    err = _first_error(exc)
    loc = list(err.get("loc", ()))
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, _Invalid):
        if cause.key:
            loc.extend(cause.key.split("."))
        return f"{_key_path(loc) or 'config'}: got {_short(cause.value)}; expected {cause.expected}"
    path = _key_path(loc) or "config"
    if kind == "missing":
        return _missing_line(path, loc)
    if kind == "extra_forbidden":
        valid = _valid_keys(loc[:-1])
        return (f"{path}: got unknown key {_short(loc[-1])}{_did_you_mean(loc[-1], valid)}; expected one of: "
                f"{', '.join(valid)}")
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        valid = _valid_keys(loc)
        keys = f" with keys {', '.join(valid)}" if valid else ""
        return f"{path}: got {_short(err.get('input'))}; expected a mapping{keys}"
    if kind == "invalid_key":
        return f"{path}: got {_short(err.get('input'))}; expected string keys"
    msg = _expected(err).removeprefix("Value error, ")
    if msg.startswith(("greater than", "less than")):
        msg = "a number " + msg
    return f"{path}: got {_short(err.get('input'))}; expected {msg}"


def _missing_line(path: str, loc: Sequence[Any], root: Any = None) -> str:
    """The line for a required key that is missing; for a whole section, the keys it must have and may have
    (``source``, ``workload`` and ``code`` of a pipeline have keys without a default, so they cannot be left
    out as the other sections can)."""
    model: Any = PipelineConfig if root is None else root
    for part in loc:
        fields = getattr(model, "model_fields", None) if isinstance(model, type) else None
        ann = fields[part].annotation if isinstance(part, str) and fields and part in fields else None
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    if model is None:
        return f"{path}: got nothing; expected a value (this key is required)"
    keys = [k for k in model.model_fields if k not in _DERIVED_KEYS]
    needed = [k for k in keys if model.model_fields[k].is_required()]
    return (f"{path}: got nothing; expected a section with at least {', '.join(needed)} (it cannot be left out: "
            f"{' and '.join(needed)} {'has' if len(needed) == 1 else 'have'} no default; keys: {', '.join(keys)})")


def _valid_keys(loc: Sequence[str]) -> list[str]:
    model: Any = PipelineConfig
    for part in loc:
        is_model = isinstance(model, type) and issubclass(model, BaseModel)
        if not isinstance(part, str) or not is_model or part not in model.model_fields:
            return []
        model = _section_model(model, part)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return _user_keys(model)
    return []


def load_config(path_or_mapping: Any, overrides: Sequence[str] = (), *,
                check_paths: bool = True) -> PipelineConfig:
    """Read, override and validate a pipeline configuration.

    Parameters
    ----------
    path_or_mapping : str, os.PathLike, Mapping or PipelineConfig
        A YAML file (read with a safe loader that also rejects duplicate keys), a mapping with the
        same structure, or an already validated config (then only `overrides` are applied).
    overrides : sequence of str
        ``"key.sub=value"`` items (the CLI's ``--set``); values are parsed as YAML
        (``cutoff.stragglers=2``, ``schemes=[gcc,uncoded]``, ``cutoff.deadline=null``).
    check_paths : bool
        Require input files (``source.path``, npy ``source.labels``, ``workload.path``,
        ``cluster.scheduler_file``) to exist. Relative input paths are searched in the cwd, then in
        the config file's directory and its parents, and stored absolute; ``store.path`` is made
        absolute against the cwd.

    Returns
    -------
    PipelineConfig
        Frozen; ``config_path`` and ``base_dir`` record where it came from.

    Raises
    ------
    ConfigError
        One line ``"<key.path>: got <value>; expected <what is valid>"`` for the first problem:
        a missing or unreadable file, invalid YAML, an unknown key (the valid keys are listed), a
        wrong type, or an impossible combination (K > N, S >= N, wait_for > N, lambda < 0).
    """
    try:
        return _load(path_or_mapping, overrides, check_paths)
    except ConfigError as exc:
        text = str(exc)
        if "\n" in text or "\r" in text:  # one line, always
            raise ConfigError(text.replace("\r", "\\r").replace("\n", "\\n")) from None
        raise


#: top-level keys of a sweep file (gcc_dask.sweep_config) that a pipeline file never has
_SWEEP_ONLY = ("function", "trials", "params")


def _check_top_level(data: Mapping[str, Any]) -> None:
    """Before any file is looked for: a sweep file given as a pipeline, and unknown keys at the top level and in
    the sections (a typo is reported as such, not as a missing file or a missing key)."""
    valid = _user_keys(PipelineConfig)
    unknown = [k for k in data if k not in PipelineConfig.model_fields]
    sweepish = [k for k in unknown if k in _SWEEP_ONLY]
    if data.get("kind") == "frontier" and "source" not in data:
        raise ConfigError("config: got a frontier file (kind: frontier); expected a pipeline file: run a frontier "
                          "with `gcc-dask sweep FILE` (gcc_dask.frontier.run_frontier)")
    if sweepish and "source" not in data and "workload" not in data:
        raise ConfigError(f"config: got a sweep file (it has {', '.join(map(repr, sweepish))} and no 'source' or "
                          "'workload'); expected a pipeline file: run a sweep with `gcc-dask sweep FILE` "
                          "(gcc_dask.run_sweep)")
    if unknown:
        key = unknown[0]
        raise ConfigError(f"{_key_path([key])}: got unknown key {_short(key)}{_did_you_mean(key, valid)}; expected "
                          f"one of: {', '.join(valid)}")
    for section, value in data.items():
        model = _section_model(PipelineConfig, section)
        if isinstance(value, Mapping) and isinstance(model, type) and issubclass(model, BaseModel):
            keys = _user_keys(model)
            for key in value:
                if key not in model.model_fields:
                    raise ConfigError(f"{_key_path([section, key])}: got unknown key {_short(key)}"
                                      f"{_did_you_mean(key, keys)}; expected one of: {', '.join(keys)}")


def _load(path_or_mapping: Any, overrides: Sequence[str], check_paths: bool) -> PipelineConfig:
    config_path: str | None = None
    if isinstance(path_or_mapping, PipelineConfig):
        if not overrides:
            return path_or_mapping
        base_dir = Path(path_or_mapping.base_dir)
        config_path = path_or_mapping.config_path
        data = _copy_tree(path_or_mapping.resolved())
        if path_or_mapping.source.kind == "array":
            data["source"] = {k: getattr(path_or_mapping.source, k)
                              for k in ("kind", *_SOURCE_KEYS["array"])}
        for key in _WORKLOAD_OBJECTS:  # an in-memory f: the object itself, not its label
            if getattr(path_or_mapping.workload, key) is not None:
                data["workload"][key] = getattr(path_or_mapping.workload, key)
    elif isinstance(path_or_mapping, Mapping):
        data = _copy_tree(path_or_mapping)
        base_dir = Path.cwd()
    elif isinstance(path_or_mapping, (str, os.PathLike)):
        path = Path(path_or_mapping).expanduser().absolute()
        raw = _read_yaml(path)
        data = {} if raw is None else raw
        if not isinstance(data, Mapping):
            raise _fail(str(path), data, "a YAML mapping of sections (name, source, workload, code, ...)")
        data = _copy_tree(data)
        data.setdefault("name", path.stem if _NAME_RE.match(path.stem) else "gcc-dask-run")
        config_path, base_dir = str(path), path.parent
    else:
        raise _fail("config", path_or_mapping, "a YAML file path or a mapping of sections")
    if isinstance(overrides, str):
        overrides = [overrides]
    for item in overrides:
        _apply_override(data, item)
    _check_top_level(data)
    data = _default_store_path({k: v for k, v in data.items() if not (k in _SECTIONS and v is None)})
    _resolve_paths(data, base_dir, check_paths)
    try:
        cfg = PipelineConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_error_line(exc)) from None
    cfg._config_path = config_path
    cfg._base_dir = str(base_dir)
    return cfg
