"""The scheme registry: :func:`register_code`, :func:`make_code`, :func:`list_codes`.

Modelled on zarr's codec registry (docs/architecture.rst, section 'Registries'): a module-level dict filled by a
class decorator; :func:`make_code` checks the parameters against the class's signature so that a typo names the
valid parameters instead of raising a bare ``TypeError``.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from gcc_dask.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from .base import CodingScheme

__all__ = ["code_parameters", "list_codes", "make_code", "register_code"]

_CODES: dict[str, type[CodingScheme]] = {}


def register_code(name: str):
    """Class decorator: register a :class:`CodingScheme` subclass under `name` for :func:`make_code`."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"register_code: name must be a non-empty string; got {name!r}")

    def deco(cls: type[CodingScheme]) -> type[CodingScheme]:
        old = _CODES.get(name)
        if old is not None and old.__qualname__ != cls.__qualname__:
            raise ConfigError(f"code name {name!r} is already registered to {old.__qualname__}")
        cls.name = name
        _CODES[name] = cls
        return cls

    return deco


def list_codes() -> list[str]:
    """Names accepted by :func:`make_code`, sorted."""
    return sorted(_CODES)


def code_parameters(name: str) -> tuple[str, ...]:
    """The keyword parameters :func:`make_code` accepts for code `name` (``num_inputs`` and ``num_workers``
    first), read from the class's signature.

    Raises
    ------
    ConfigError
        Unknown name.
    """
    try:
        cls = _CODES[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown code {name!r}; choose one of {list_codes()}") from None
    return tuple(p for p in inspect.signature(cls.__init__).parameters if p != "self")


def make_code(name: str, **params: Any) -> CodingScheme:
    """Build the coding scheme registered as `name`.

    Parameters
    ----------
    name : str
        One of :func:`list_codes`: ``"gcc"``, ``"letcc"``, ``"bacc"``, ``"bspline"``, ``"lcc"``,
        ``"replication"``, ``"uncoded"``.
    **params
        ``num_inputs`` (K) and ``num_workers`` (N), the common ``points``, ``nan_policy`` and
        ``on_coincidence``, and the scheme's own parameters (see each scheme's class).

    Raises
    ------
    ConfigError
        Unknown name, unknown or missing parameter, or an invalid value.
    """
    try:
        cls = _CODES[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown code {name!r}; choose one of {list_codes()}") from None
    sig = inspect.signature(cls.__init__)
    accepted = [p for p in sig.parameters if p != "self"]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ConfigError(
            f"unknown parameter(s) {unknown} for code {name!r}; valid parameters are {accepted}"
        )
    missing = [
        p.name
        for p in sig.parameters.values()
        if p.name != "self" and p.default is inspect.Parameter.empty and p.name not in params
    ]
    if missing:
        raise ConfigError(f"code {name!r} needs parameter(s) {missing}; valid parameters are {accepted}")
    return cls(**params)
