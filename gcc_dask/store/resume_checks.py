"""Whether a run may resume a store: the same configuration (its fingerprint), the same model and data files
(the inputs' digest) and the same layout; a refusal names what differs (:func:`check_resumable`, called by
:meth:`~gcc_dask.store.RunStore.resume`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from gcc_dask.errors import StoreError

__all__ = ["DATA_FOLDERS", "LABEL_FILES", "MODEL_SOURCES", "check_resumable"]

#: root attribute: the Python source files of the model's module that the store's ``inputs_digest`` covers (an
#: import path ``module:function``); absent in stores made before they counted
MODEL_SOURCES = "model_sources"

#: root attribute: the local Zarr folders read as stored by an in-memory array source (a ``dask.array.from_zarr``
#: array) that the store's ``inputs_digest`` covers; absent in stores made before they counted
DATA_FOLDERS = "data_folders"

#: root attribute: the local label arrays of a file source that its files leave out (a Zarr source's ``labels``)
#: that the store's ``inputs_digest`` covers; absent in stores made before they counted
LABEL_FILES = "label_files"


def _user_key(key: str) -> str:
    """A resolved config's dotted key as the user writes it: a scheme entry's ``scheme_entries.<label>.params.x``
    (where the resolved config keeps it) is ``schemes.<label>.params.x``, as in the config errors."""
    return "schemes." + key[len("scheme_entries."):] if key.startswith("scheme_entries.") else key


def _config_diff(stored: Mapping[str, Any], now: Mapping[str, Any], ignore: tuple[str, ...] = (),
                 limit: int = 4) -> str:
    """``"; it differs in code.block_size (256 in the store, 512 now), ..."``: the first `limit` dotted keys
    whose values differ between two resolved configs (a default that changed between versions shows here
    too), leaving out the keys under an `ignore` prefix; empty when no key differs."""
    def flat(d: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(d, Mapping):
            return {prefix: d}
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out

    a, b = flat(stored), flat(now)
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
            and not any(k == p or k.startswith(p + ".") for p in ignore)]
    if not keys:
        return ""
    shown = ", ".join(f"{_user_key(k)} ({a.get(k)!r} in the store, {b.get(k)!r} now)" for k in keys[:limit])
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"; it differs in {shown}{more}"


def check_resumable(store: Any, fingerprint: str, *, inputs_digest: str | None = None,
                    fingerprint_for: Callable[[dict], str] | None = None,
                    config_for: Callable[[dict], dict] | None = None, legacy_inputs_digest: str | None = None,
                    inputs_digest_for: Callable[[list[str], bool, bool], str] | None = None,
                    **expected: Any) -> None:
    """Refuse to resume `store` (a :class:`~gcc_dask.store.RunStore`) from another configuration, other model or
    data files, or another layout; the arguments are :meth:`~gcc_dask.store.RunStore.resume`'s.

    Raises
    ------
    StoreError
        One line naming the store, what differs (the first config keys that do, the digests, the layout key) and
        how to go on.
    """
    attrs = store.attrs
    path = store.path
    old, stored = attrs.get("config_fingerprint"), attrs.get("config") or {}
    if old != fingerprint and fingerprint_for is not None and old == fingerprint_for(stored):
        old = fingerprint  # made before keys this config leaves at their defaults existed
    if old != fingerprint:
        now = config_for(stored) if config_for is not None else expected.get("config_resolved") or {}
        diff = _config_diff(stored, now, ignore=tuple(expected.get("config_ignore", ())))
        raise StoreError(f"store path: got {str(path)!r}, a run made by a different configuration "
                         f"(fingerprint {str(old)[:12]}, this config {fingerprint[:12]}{diff}); pass "
                         "--overwrite (store.overwrite: true) to replace it, set those keys back to resume "
                         "it, or choose another --out")
    old_inputs = store.attrs.get("inputs_digest")
    if legacy_inputs_digest is not None and MODEL_SOURCES not in store.attrs:
        inputs_digest = legacy_inputs_digest
    elif inputs_digest_for is not None and MODEL_SOURCES in store.attrs:
        # the module files the store was made with, as it lists them (a store made when only the model's own
        # module counted is checked on that one; a newer one on the modules it imports from beside it too)
        # the data folders and the label arrays count when the store says they did (made since they count)
        inputs_digest = inputs_digest_for([str(m) for m in store.attrs.get(MODEL_SOURCES) or []],
                                          DATA_FOLDERS in store.attrs, LABEL_FILES in store.attrs)
    if inputs_digest is not None and old_inputs is not None and old_inputs != inputs_digest:
        modules = [str(m) for m in store.attrs.get(MODEL_SOURCES) or []]
        also = f", or another source of the model's module {', '.join(modules)}" if modules else ""
        raise StoreError(f"store path: got {str(path)!r}, a run made with other model or data files{also} (their "
                         f"content changed since: digest {str(old_inputs)[:12]}, now {inputs_digest[:12]}); "
                         "pass --overwrite (store.overwrite: true) to start over, or choose another --out")
    want = {"num_samples": int(expected.get("num_samples", store.num_samples)),
            "batch_size": int(expected.get("batch_size", store.batch_size)),
            "output_shape": [int(s) for s in expected.get("output_shape", store.output_shape)],
            "schemes": {str(s): int(w) for s, w in expected.get("schemes", store.schemes).items()},
            "has_labels": bool(expected.get("has_labels", store.attrs["has_labels"])),
            "has_reference": bool(expected.get("has_reference", store.attrs["has_reference"])),
            "dtype": np.dtype(expected.get("dtype", store.attrs["dtype"])).name}
    for key, value in want.items():
        if store.attrs.get(key) != value:
            raise StoreError(f"store path: got {str(path)!r} with {key}={store.attrs.get(key)!r}; this "
                             f"run needs {key}={value!r} (the input data changed?); pass --overwrite "
                             "to replace it")
