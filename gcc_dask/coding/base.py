"""The :class:`CodingScheme` interface: validation of received sets, the decoder cache, the apply path.

Every scheme is linear once its points and smoothing parameters are fixed
(docs/methods.rst, section 'Linear maps'): encoding is ``X̃ = E X`` with ``E`` of shape (N, K) and decoding
is ``Ŷ = D_F Ỹ_F`` with ``D_F`` of shape ``(K, |F|)``. Both matrices are built once on the host in float64 with NumPy/SciPy; ``D_F`` is kept in a bounded
LRU cache keyed by the bytes of the received index array. Applying a matrix is one matmul in the namespace,
dtype and device of the data (NumPy, CuPy, or any Array API library via ``array_api_compat``), over the
data reshaped to (rows, d).

NaN/Inf checks cost no extra pass over the input: with ``nan_policy="raise"`` one output row whose
coefficients are all non-zero (a *probe row*) is scanned, since a NaN or Inf anywhere in column j of the
input makes entry j of that row non-finite. That scans 1/p of the output (p = N for encode, K for decode)
where the earlier version's extra row of ones made the matmul itself 1/p larger: at K = 8 that row cost
up to 26% of a decode in the BLAS, not 1/8. A matrix without such a row (some B-spline decoders) still gets
the extra row of ones. Only when the probe is non-finite is the input scanned: NaN/Inf there raise, and
finite input whose output overflowed the dtype (float16/float32 data near the dtype's maximum, times the
code's weights) raises an overflow error rather than returning inf. An overflow confined to rows the probe
does not read is not seen: finding it would take a pass over the whole output.

Selection schemes (``replication``, ``uncoded``) have one-hot matrices: they are applied as a gather of
rows, never as a matmul, so a NaN in one input stays in that input's output (in a matmul 0·NaN = NaN
would spread it to every output).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, ClassVar, Sequence

import array_api_compat.numpy as _NP
import numpy as np
from array_api_compat import array_namespace

from gcc_dask.errors import ConfigError, InvalidInputError, NotEnoughResultsError

from . import points as _points
from gcc_dask.limits import MAX_INPUTS, MAX_WORKERS

from .apply import _ArrayApply
from .apply import _host_dtype  # noqa: F401  (importable from here, as before the split)
from .validation import check_choice, check_code_size, check_int, index_array

__all__ = ["CodingScheme", "CoincidenceWarning", "ConditioningWarning"]

NAN_POLICIES = ("raise", "propagate")
ON_COINCIDENCE = ("warn", "nudge", "ignore")
DECODER_CACHE_SIZE = 256


class CoincidenceWarning(UserWarning):
    """A worker point equals a data point, so the scheme is partly systematic.

    See docs/methods.rst, section 'Point placement'.
    """


class ConditioningWarning(UserWarning):
    """The encoder amplifies the data's scale (LCC on equispaced points: the Runge phenomenon)."""


def _rebuild(cls: type[CodingScheme], params: dict) -> CodingScheme:
    """Unpickle: rebuild from the constructor parameters (matrices are cheap to rebuild). The warnings
    were given where the scheme was built, not again on every worker."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoincidenceWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        return cls(**params)


# --------------------------------------------------------------------------------------------------
# the interface


class _Entry:
    """One cached decoder: host matrix ``(K, |F|)`` or None, decodable mask, indices, device copies."""

    __slots__ = ("matrix", "mask", "received", "applied", "rows", "blend")

    def __init__(self, matrix, mask, received, rows=None, blend=None):
        if matrix is not None:
            matrix.setflags(write=False)
        mask.setflags(write=False)
        self.matrix, self.mask, self.received = matrix, mask, received
        #: for selection schemes: output row i is input row rows[i] (rows[i] < 0: no input, a NaN row)
        self.rows = rows
        #: for selection schemes with a linear fill: (outputs, rows a, rows b, w) with output i of `outputs`
        #: = (1 - w) * input row a + w * input row b; None when no output mixes two rows
        self.blend = blend
        self.applied: dict = {}


class CodingScheme(_ArrayApply):
    """A linear coded-computing scheme: K inputs → N coded inputs → decode from any received set F.

    The parameters below are shared by every scheme; build schemes with :func:`make_code`.

    Parameters
    ----------
    num_inputs : int
        K, 1 ≤ K ≤ 65,536, inputs per batch.
    num_workers : int
        N, 1 ≤ N ≤ 65,536, coded inputs (one per worker); also K·N ≤ 2**26, so that the (N, K) encoder
        matrix stays under 512 MiB (``gcc_dask.limits``).
    points : {"chebyshev", "equispaced", "systematic", "twins"} or mapping
        Placement of α and β on Ω = [-1, 1], or explicit ``{"alpha": [...], "beta": [...]}``
        (:func:`gcc_dask.coding.points.placement`;
        docs/methods.rst, section 'Point placement').
    nan_policy : {"raise", "propagate"}
        ``"raise"``: NaN/Inf in X or Y raise :class:`InvalidInputError` (found at no extra pass over
        the data, see the module docs), and so do coded values that overflow the dtype where the check
        sees them. ``"propagate"``: they flow through the matmul.
    on_coincidence : {"warn", "nudge", "ignore"}
        When some β_n equals some α_k the scheme is partly systematic (exact while worker n survives),
        which is good for accuracy but makes measured convergence rates optimistic. ``"warn"`` (the
        default for approximate schemes) keeps the points and emits :class:`CoincidenceWarning`;
        ``"nudge"`` moves each such β_n a quarter of a gap towards the centre (``nudged_workers``
        lists them); ``"ignore"`` keeps them silently. Either way `coincident_points` reports what
        remains. We warn rather than nudge by default so that the documented point sets are what runs.

    Attributes
    ----------
    name : str
        Registry name.
    num_inputs, num_workers : int
        K and N.
    data_points : ndarray of shape (K,), float64
        α, ascending (read-only).
    worker_points : ndarray of shape (N,), float64
        β, ascending for point-based schemes (read-only); worker n evaluates f at u_enc(β_n).
    encoder_matrix : ndarray of shape (N, K), float64
        ``E`` with ``X̃ = E X`` (read-only).
    recovery_threshold : int or None
        Results that guarantee exact recovery (exact schemes), None for approximate schemes.
    min_received : int
        Fewer results raise :class:`NotEnoughResultsError` in :meth:`decode`.
    coincident_points : ndarray of shape (m, 2), int64
        Pairs (k, n) with β_n = α_k after any nudge (see ``on_coincidence``).
    nudged_workers : ndarray of int64
        Workers whose point was moved by ``on_coincidence="nudge"``.
    params : dict
        The constructor parameters, JSON-able; ``make_code(name, **params)`` rebuilds the scheme.
    """

    name: ClassVar[str] = ""
    #: Check α/β coincidences (only meaningful for approximate, point-based schemes).
    check_coincidence: ClassVar[bool] = True
    #: One-hot encoder and decoders (replication, uncoded): applied as a gather of rows (:meth:`_select`).
    selection: ClassVar[bool] = False
    recovery_threshold: int | None = None
    min_received: int = 1

    def __init__(
        self,
        *,
        num_inputs: int,
        num_workers: int,
        points: str = "chebyshev",
        nan_policy: str = "raise",
        on_coincidence: str = "warn",
    ) -> None:
        self.num_inputs = check_int("num_inputs", num_inputs, 1, MAX_INPUTS, "inputs per batch")
        self.num_workers = check_int("num_workers", num_workers, 1, MAX_WORKERS,
                                     "one Dask task per worker per batch; no cluster runs more")
        check_code_size(self.num_inputs, self.num_workers)
        if isinstance(points, dict):
            points = {k: [float(v) for v in vals] if isinstance(vals, (list, tuple, np.ndarray)) else vals
                      for k, vals in points.items()}
        else:
            points = check_choice("points", points, _points.POINTS)
        self.points = points
        self.nan_policy = check_choice("nan_policy", nan_policy, NAN_POLICIES)
        self.on_coincidence = check_choice("on_coincidence", on_coincidence, ON_COINCIDENCE)

    # -- construction (called by subclasses once their own parameters are set) ---------------------

    def _scheme_params(self) -> dict:
        return {}

    def _make_points(self) -> tuple[np.ndarray, np.ndarray]:
        return _points.placement(self.points, self.num_inputs, self.num_workers)

    def _finish(self) -> None:
        if self.min_received > self.num_workers:
            raise ConfigError(
                f"num_workers={self.num_workers!r} is below what code {self.name!r} needs to decode "
                f"(min_received={self.min_received}); use num_workers >= {self.min_received}"
            )
        alpha, beta = self._make_points()
        self.nudged_workers = np.zeros(0, dtype=np.int64)
        pairs = np.zeros((0, 2), dtype=np.int64)
        intended = isinstance(self.points, str) and self.points in _points.INTENDED_COINCIDENCE
        if self.check_coincidence:
            pairs = _points.coincidences(alpha, beta)
            if pairs.size and self.on_coincidence == "nudge":
                beta, self.nudged_workers = _points.nudge(alpha, beta)
                pairs = _points.coincidences(alpha, beta)
            elif pairs.size and self.on_coincidence == "warn" and not intended:
                warnings.warn(
                    f"code {self.name!r} with num_inputs={self.num_inputs}, num_workers={self.num_workers}"
                    f", points={self.points!r}: {len(pairs)} worker point(s) equal a data point "
                    f"(workers {pairs[:, 1].tolist()}), so those outputs are exact while those workers "
                    "survive; convergence rates measured with this N are optimistic. Pass "
                    "on_coincidence='nudge' to move them or 'ignore' to silence this.",
                    CoincidenceWarning,
                    stacklevel=3,
                )
        self.coincident_points = pairs
        alpha.setflags(write=False)
        beta.setflags(write=False)
        self.data_points, self.worker_points = alpha, beta
        E = np.ascontiguousarray(self._build_encoder(), dtype=np.float64)
        E.setflags(write=False)
        self._encoder = E
        self._encoder_applied: dict = {}
        self._encoder_subsets: dict[tuple[int, ...], dict] = {}  # encode(X, workers): one cache per subset
        self._encoder_rows = self._selection_rows(E)
        self._lookup = functools.lru_cache(maxsize=DECODER_CACHE_SIZE)(self._entry_from_key)
        self.params = {
            "num_inputs": self.num_inputs,
            "num_workers": self.num_workers,
            "points": self.points,
            "nan_policy": self.nan_policy,
            "on_coincidence": self.on_coincidence,
            **self._scheme_params(),
        }

    def __reduce__(self):
        return (_rebuild, (type(self), dict(self.params)))

    def __repr__(self) -> str:
        extra = ", ".join(f"{k}={v!r}" for k, v in self._scheme_params().items())
        extra = f", {extra}" if extra else ""
        return f"{type(self).__name__}(K={self.num_inputs}, N={self.num_workers}{extra})"

    # -- subclass hooks -----------------------------------------------------------------------------

    def encoder_at(self, z: Any) -> np.ndarray:
        """The encoder curve u_enc as weights on the K inputs at points `z`, shape (len(z), K), float64.

        ``encoder_at(worker_points)`` is `encoder_matrix`.
        """
        raise ConfigError(f"code {self.name!r} has no encoder curve (it is not point-based)")

    def decoder_at(self, received: Any, z: Any) -> np.ndarray:
        """The decoder curve u_dec as weights on the results of `received` at `z`, shape ``(len(z), |F|)``.

        ``decoder_at(received, data_points)`` is ``decoder_matrix(received)`` (fixed smoothing).
        """
        r = self._validated(self._key(received))
        rs, order = self._sorted(r)
        return self._unsort_columns(self._decoder_map(rs, np.asarray(z, dtype=np.float64)), order)

    def _build_encoder(self) -> np.ndarray:
        return self.encoder_at(self.worker_points)

    def _decoder_map(self, rs: np.ndarray, z: np.ndarray) -> np.ndarray:  # pragma: no cover
        """Decoder weights at `z` for survivors `rs` sorted by worker point, shape (len(z), len(rs))."""
        raise ConfigError(f"code {self.name!r} has no decoder curve (it is not point-based)")

    def _build_entry(self, received: np.ndarray) -> _Entry:
        """Decoder for validated indices `received` (columns in the given order)."""
        rs, order = self._sorted(received)
        D = self._unsort_columns(self._decoder_map(rs, self.data_points), order)
        return _Entry(D, np.ones(self.num_inputs, dtype=bool), received)

    # -- matrices -----------------------------------------------------------------------------------

    @property
    def encoder_matrix(self) -> np.ndarray:
        """``E`` of shape (N, K), float64, read-only: ``X̃ = E X``."""
        return self._encoder

    def _key(self, received: Any) -> bytes:
        return index_array(received, self.num_workers).tobytes()

    def _validated(self, key: bytes) -> np.ndarray:
        """Indices from a cache key, checked: in range, no repeats, at least `min_received`."""
        r = np.frombuffer(key, dtype=np.int64)
        N = self.num_workers
        if r.size and (r.min() < 0 or r.max() >= N):
            bad = r[(r < 0) | (r >= N)]
            raise InvalidInputError(
                f"received holds worker indices {bad.tolist()} outside [0, {N}) (num_workers={N})"
            )
        if np.unique(r).size != r.size:
            vals, counts = np.unique(r, return_counts=True)
            raise InvalidInputError(
                f"received must not repeat a worker; got repeated indices {vals[counts > 1].tolist()}"
            )
        if r.size < self.min_received:
            raise NotEnoughResultsError(
                f"received has {r.size} result(s); code {self.name!r} needs at least "
                f"{self.min_received} (min_received) with num_inputs={self.num_inputs}, "
                f"num_workers={N}"
            )
        return r.copy()

    def _entry_from_key(self, key: bytes) -> _Entry:
        return self._build_entry(self._validated(key))

    def _entry(self, received: Any) -> _Entry:
        return self._lookup(self._key(received))

    def decoder_matrix(self, received: Any) -> np.ndarray:
        """``D_F`` of shape ``(K, |F|)``, float64, read-only, cached per received set (LRU, 256 sets).

        Column j belongs to worker ``received[j]``. Rows of outputs that cannot be estimated from `F`
        (replication, uncoded) are NaN, so they come out NaN from the matmul.

        Raises
        ------
        InvalidInputError
            Indices not 1-D integers, out of [0, N), or repeated.
        NotEnoughResultsError
            Fewer than `min_received` indices.
        """
        return self._entry(received).matrix

    def decodable(self, received: Any) -> np.ndarray:
        """Mask of shape (K,), bool: which outputs :meth:`decode` can estimate from `received`.

        All False when fewer than `min_received` results arrived (no error is raised here).
        """
        try:
            return self._entry(received).mask
        except NotEnoughResultsError:
            return np.zeros(self.num_inputs, dtype=bool)

    def filled(self, received: Any) -> np.ndarray:
        """Mask of shape (K,), bool: the outputs a fill estimates from *other* inputs' results (their own were
        all lost). Only the selection schemes with a ``fill`` have any (:class:`~.replication.Replication`);
        a coded scheme's decode is its estimate of every output, and this is all False."""
        return np.zeros(self.num_inputs, dtype=bool)

    def _selection_rows(self, E: np.ndarray) -> np.ndarray | None:
        """For selection schemes (``selection = True``, one-hot `E`): the input row of each coded row."""
        if not self.selection:
            return None
        rows = np.argmax(E, axis=1).astype(np.int64)
        rows.setflags(write=False)
        return rows

    def selected_input(self, worker: int) -> int | None:
        """The input that `worker` evaluates unchanged, for selection schemes (``replication``, ``uncoded``:
        coded input n is input ``selected_input(n)``, bit for bit); None for schemes that mix inputs.

        A runtime can then hand worker n that input alone instead of encoding the whole batch.
        """
        return None if self._encoder_rows is None else int(self._encoder_rows[worker])

    def check_input(self, X: Any, name: str = "X") -> None:
        """Raise what :meth:`encode` raises for NaN/Inf in `X` under ``nan_policy="raise"`` (else nothing).

        For a runtime that feeds a selection scheme's workers their inputs directly (:meth:`selected_input`).

        Raises
        ------
        InvalidInputError
            `X` holds NaN or Inf and ``nan_policy`` is ``"raise"``.
        """
        if self.nan_policy == "raise":
            xp = _NP if type(X) is np.ndarray else array_namespace(X)
            if not bool(xp.all(xp.isfinite(X))):
                raise self._non_finite(name)

    def encode(self, X: Any, workers: Sequence[int] | None = None):
        """Coded inputs X̃ = E X for the N workers (or for the `workers` given).

        Parameters
        ----------
        X : array of shape ``(K, *shape)``, real floating (float32 or float64; float16 works, in float16)
            The batch of K inputs; numpy, cupy or any Array API array.
        workers : sequence of int, optional
            Only the coded inputs of these workers (indices in ``[0, N)``), in this order: rows ``E[workers]``
            of the encoder applied to `X`. A shard that evaluates one coded input encodes its own row, 1/N of
            the work and memory of the whole encode (the values agree with ``encode(X)[workers]`` to rounding,
            and are the same bits on every machine with the same BLAS).

        Returns
        -------
        X_coded : array of shape ``(N, *shape)``, or ``(len(workers), *shape)``
            Same namespace, dtype and device as `X`; row n is worker n's input u_enc(β_n).

        Raises
        ------
        InvalidInputError
            Wrong leading size or dtype, NaN/Inf in `X` with ``nan_policy="raise"``, or a worker index out of
            range.
        """
        xp, X = self._as_array("X", X, self.num_inputs)
        if workers is None:
            rows, E, cache = self._encoder_rows, self._encoder, self._encoder_applied
        else:
            key = self._worker_subset(workers)
            cache = self._encoder_subsets.get(key)
            if cache is None:
                if len(self._encoder_subsets) >= 4 * self.num_workers:
                    self._encoder_subsets.clear()
                cache = self._encoder_subsets[key] = {}
            pick = np.asarray(key, dtype=np.int64)
            rows = None if self._encoder_rows is None else self._encoder_rows[pick]
            E = self._encoder[pick]
        if rows is not None:
            return self._select(xp, rows, X, cache, "X")
        return self._apply(xp, E, X, cache, "X")

    def _worker_subset(self, workers: Any) -> tuple[int, ...]:
        """`workers` as a tuple of ints in ``[0, N)``, or one :class:`InvalidInputError` naming the bad value."""
        try:
            arr = np.asarray(workers)
        except Exception:  # noqa: BLE001 - anything that is not a sequence of ints is refused the same way
            arr = np.asarray([None])
        n = self.num_workers
        has_bool = isinstance(workers, (list, tuple)) and any(isinstance(w, (bool, np.bool_)) for w in workers)
        if (has_bool or arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer)
                or arr.min() < 0 or arr.max() >= n):
            raise InvalidInputError(f"workers: got {workers!r}; expected a non-empty sequence of worker indices "
                                    f"in [0, {n}) for code {self.name!r}")
        return tuple(int(w) for w in arr)

    def decode(self, Y: Any, received: Any, *, return_error: bool = False):
        """Estimates of f(x_k), k < K, from the results of the workers in `received`.

        Parameters
        ----------
        Y : array of shape ``(|F|, *out)``, real floating
            Worker outputs f(x̃_n) for n in `received`, in that order.
        received : array-like of int, shape ``(|F|,)``
            Indices of the returning workers, each in [0, N), no repeats; any order. A boolean mask
            of shape (N,) is accepted too.
        return_error : bool
            Also return a per-sample error estimate (``gcc``/``letcc`` only).

        Returns
        -------
        estimates : array of shape ``(K, *out)``
            Same namespace, dtype and device as `Y`; NaN rows where :meth:`decodable` is False.

        Raises
        ------
        NotEnoughResultsError
            Fewer than `min_received` results.
        InvalidInputError
            Bad indices, shape mismatch, non-float dtype, or NaN/Inf with ``nan_policy="raise"``.
        ConfigError
            ``return_error=True`` for a scheme without an error estimate.
        """
        if return_error:
            raise ConfigError(
                f"return_error=True is only available for codes 'gcc' and 'letcc'; got code {self.name!r}"
            )
        entry = self._entry(received)
        xp, Y = self._as_array("Y", Y, entry.received.size)
        if entry.rows is not None:
            return self._select(xp, entry.rows, Y, entry.applied, "Y", entry.blend)
        return self._apply(xp, entry.matrix, Y, entry.applied, "Y")

    # -- helpers for point-based schemes --------------------------------------------------------------

    def _sorted(self, received: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Received indices sorted by worker point, and the permutation used (``sorted = r[order]``)."""
        order = np.argsort(self.worker_points[received], kind="stable")
        return received[order], order

    @staticmethod
    def _unsort_columns(D_sorted: np.ndarray, order: np.ndarray) -> np.ndarray:
        D = np.empty_like(D_sorted)
        D[:, order] = D_sorted
        return D
