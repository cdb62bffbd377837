"""The frontier's configuration: which function and data, which estimators at which N/K, which stragglers.

A frontier file is a sweep file with ``kind: frontier`` (``gcc-dask sweep pipelines/frontier_mnist.yaml``)::

    kind: frontier
    name: frontier-mnist
    function: {kind: dnn, source: {kind: mnist, split: test}, workload: {kind: onnx, path: models/lenet5_mnist.onnx}}
    composition: similarity        # how the groups of K are formed (every group of the split is measured)
    num_inputs: 8                  # K
    ratios: [1, 1.25, 1.5, 2]      # N/K: N = round(ratio * K)
    stragglers: {S: [1, 2, 3, 4], patterns: [random, contiguous, worst]}
    candidates: default            # every estimator at equal cost; or a list of {label, code, params, ratios}

See docs/frontier.rst for the protocol and what each estimator is.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, ValidationError, model_validator

from gcc_dask.config import ClusterConfig
from gcc_dask.errors import ConfigError
from gcc_dask.limits import MAX_INPUTS
from gcc_dask.sweep_config import (
    FunctionConfig, StoreSection, _as_list, _Bad, _error_line, _Section, read_job_file,
)

from .sets import PATTERNS

__all__ = ["CandidateSpec", "FrontierConfig", "default_candidates", "load_frontier_config"]

CODES = ("bacc", "bspline", "gcc", "lcc", "letcc", "replication", "uncoded")
_FINGERPRINT_EXCLUDE = ("store", "cluster", "run", "name")


class CandidateSpec(_Section):
    """One estimator of the frontier: a code with its parameters, run at every ratio where it fits.

    Attributes
    ----------
    label
        Its name in the tables and figures (the ``candidate`` coordinate, with ``@N`` appended per ratio).
    code
        The registered code: bacc, bspline, gcc, lcc, letcc, replication or uncoded.
    params
        The code's parameters (``fill``, ``extra``, ``points``, ``kernel``, ``lambda_dec``, ...).
    ratios
        Only at these N/K (null: every ratio of the frontier where the code can run; ``uncoded`` only at 1).
    """

    label: str
    code: Literal["bacc", "bspline", "gcc", "lcc", "letcc", "replication", "uncoded"]
    params: dict[str, Any] = Field(default_factory=dict)
    ratios: Annotated[list[Annotated[float, Field(ge=1)]], BeforeValidator(_as_list)] | None = None


class FrontierStragglers(_Section):
    """Which received sets every cell is measured on (docs/frontier.rst, section 'Protocol').

    Attributes
    ----------
    S
        The numbers of stragglers S (each below every N of the frontier it is used with).
    patterns
        ``random`` (the mean over every straggler set: the exact expectation when there are at most
        ``exhaustive_limit``, else over ``draws`` seeded sets), ``contiguous`` (every window of S consecutive
        workers) and ``worst`` (each estimator's own worst set per group, over the ``random`` sets).
    exhaustive_limit
        Enumerate every straggler set when C(N, S) is at most this.
    draws
        Seeded straggler sets per cell when C(N, S) is larger (shared by every group and estimator).
    """

    S: Annotated[list[Annotated[int, Field(ge=0)]], BeforeValidator(_as_list), Field(min_length=1)]
    patterns: Annotated[list[Literal["random", "contiguous", "worst"]], BeforeValidator(_as_list),
                        Field(min_length=1)] = list(PATTERNS)
    exhaustive_limit: Annotated[int, Field(ge=1, le=100_000)] = 20_000
    draws: Annotated[int, Field(ge=1, le=100_000)] = 2000


class FrontierRun(_Section):
    """Execution knobs (not part of the fingerprint).

    Attributes
    ----------
    progress
        Show a progress bar.
    """

    progress: bool = True


class FrontierConfig(_Section):
    """A validated frontier. Build with :func:`load_frontier_config`.

    Attributes
    ----------
    kind
        ``frontier`` (what tells a frontier file from a grid sweep).
    name
        The frontier's name (default: the file's stem); the default store is ``runs/<name>.zarr``.
    function
        f and its inputs, as in a sweep (``dnn`` with a ``source`` and a ``workload``, or an analytic
        function).
    composition
        How the groups of K are formed: the pipeline's composition policies (``similarity``, ``tree``,
        ``kd``, ``pc1``, ``random``, ``as_stored``, with their default parameters), applied to the source (``dnn``) or
        to the drawn inputs (analytic).
    groups
        Analytic functions: how many groups of K inputs to draw. ``dnn``: at most this many of the split's
        groups (a seeded choice; null: every group).
    samples
        ``dnn`` only: compose a seeded sample of this many of the source's samples instead of the whole
        source (null: every sample).
    num_inputs
        K.
    ratios
        The values of N/K; N = round(ratio · K), each N at least K.
    stragglers
        See :class:`FrontierStragglers`.
    candidates
        ``default`` (every estimator at equal cost, :func:`default_candidates`) or a list of
        :class:`CandidateSpec`.
    metric
        What decides a cell: ``rel_acc`` (higher is better), ``mse`` (lower is better) or ``auto`` (RelAcc for
        an f with more than one output, else MSE). Both are stored either way.
    seed
        Seeds the analytic inputs, the group choice, the composition and the straggler draws.
    """

    kind: Literal["frontier"]
    name: str = "frontier"
    function: FunctionConfig
    composition: Literal["as_stored", "random", "pc1", "similarity", "tree", "kd"] = "similarity"
    groups: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    samples: Annotated[int, Field(ge=2, le=10_000_000)] | None = None
    num_inputs: Annotated[int, Field(ge=2, le=MAX_INPUTS)]
    ratios: Annotated[list[Annotated[float, Field(ge=1, le=64)]], BeforeValidator(_as_list), Field(min_length=1)]
    stragglers: FrontierStragglers
    candidates: Literal["default"] | list[CandidateSpec] = "default"
    metric: Literal["auto", "rel_acc", "mse"] = "auto"
    seed: Annotated[int, Field(ge=0)] = 0
    store: StoreSection = Field(default_factory=StoreSection)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    run: FrontierRun = Field(default_factory=FrontierRun)

    _config_path: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check(self) -> FrontierConfig:
        if self.function.kind != "dnn" and self.groups is None:
            raise _Bad("groups", None, "the number of groups of K inputs to draw (analytic functions)")
        if self.function.kind != "dnn" and self.samples is not None:
            raise _Bad("samples", self.samples, "null unless function.kind is 'dnn' (use groups)")
        ns = self.num_workers
        if len(set(ns)) != len(ns):
            raise _Bad("ratios", self.ratios, f"ratios giving distinct N = round(ratio * {self.num_inputs})")
        for s in self.stragglers.S:
            if s >= min(ns):
                raise _Bad("stragglers.S", self.stragglers.S, f"values below the smallest N = {min(ns)}")
        if not isinstance(self.candidates, str):
            labels = [c.label for c in self.candidates]
            if len(set(labels)) != len(labels):
                raise _Bad("candidates", labels, "distinct labels")
        return self

    @property
    def num_workers(self) -> list[int]:
        """N for each ratio, in the order of ``ratios``."""
        return [max(self.num_inputs, int(round(r * self.num_inputs))) for r in self.ratios]

    @property
    def config_path(self) -> str | None:
        return self._config_path

    def candidate_specs(self) -> list[CandidateSpec]:
        """The candidates: the listed ones, or :func:`default_candidates`."""
        if isinstance(self.candidates, str):
            return default_candidates(self.function.kind == "polynomial", self.function.degree)
        return list(self.candidates)

    def resolved(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.model_dump(mode="python", exclude_none=False)))

    def data_fingerprint(self) -> str:
        """SHA-256 of what fixes the groups and f (function, composition, groups, K, seed): coded outputs
        computed for one frontier are reused by another with the same data fingerprint."""
        data = {k: self.resolved()[k] for k in ("function", "composition", "groups", "samples", "num_inputs", "seed")}
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(("gcc-dask-frontier-data-v1\n" + blob).encode()).hexdigest()


def default_candidates(polynomial: bool = False, degree: int | None = None) -> list[CandidateSpec]:
    """Every estimator at equal cost (docs/frontier.rst, section 'Estimators').

    * ``replication`` at every N ≥ K with each fill (``none``, ``nearest``, ``linear``): at N = K it is uncoded
      cut off at K − S results (the same decoder as the ``uncoded`` scheme with that fill), below 2K partial
      replication (the extra copies at ``spread`` positions, and at ``ends`` for comparison);
    * ``gcc`` with the pipeline's defaults (``sobolev2``, λ = 0, ``systematic`` points), with Chebyshev
      points, and with the ``sobolev1`` kernel (piecewise linear); ``bacc`` (Berrut, Chebyshev points);
    * ``lcc`` (exact from its recovery threshold) when f is a polynomial of known degree.
    """
    out = [CandidateSpec(label=f"replication/{fill}", code="replication", params={"fill": fill})
           for fill in ("none", "nearest", "linear")]
    out += [CandidateSpec(label="replication-ends/linear", code="replication",
                          params={"fill": "linear", "extra": "ends"}, ratios=None)]
    out += [CandidateSpec(label="gcc", code="gcc", params={"points": "systematic"}),
            CandidateSpec(label="gcc/chebyshev", code="gcc", params={"points": "chebyshev"}),
            CandidateSpec(label="gcc/sobolev1", code="gcc", params={"points": "systematic", "kernel": "sobolev1"}),
            CandidateSpec(label="bacc", code="bacc", params={"points": "chebyshev"})]
    if polynomial and degree:
        out.append(CandidateSpec(label="lcc", code="lcc", params={"degree": int(degree), "points": "chebyshev"}))
    return out


def load_frontier_config(path_or_mapping: Any, overrides: Any = ()) -> FrontierConfig:
    """Read, override and validate a frontier file (a YAML path, a mapping, or a FrontierConfig).

    Raises
    ------
    ConfigError
        One line naming the key, the value and what would be valid.
    """
    if isinstance(path_or_mapping, FrontierConfig) and not overrides:
        return path_or_mapping
    data, config_path = read_job_file(path_or_mapping, FrontierConfig, "frontier", overrides)
    try:
        cfg = FrontierConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_error_line(exc, FrontierConfig).replace("\n", "\\n")) from None
    cfg._config_path = config_path
    return cfg
