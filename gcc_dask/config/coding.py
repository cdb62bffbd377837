"""The config sections of how the inputs are coded: ``code`` (K, N, block size), ``composition`` (which samples
are coded together), and each scheme's own parameters: ``gcc``, ``lcc``, ``replication``, ``uncoded``
(docs/configuration.rst).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from ..sizing import MAX_BLOCK_SIZE
from .fields import FitSamples, InputCount, LeafSize, Points, PosInt, WindowSize, WorkerCount, _Invalid, _Section


def _block_size(value: Any) -> Any:
    """an integer from 1 to 262,144, or 'auto'"""
    if value == "auto" and isinstance(value, str):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        if 1 <= value <= MAX_BLOCK_SIZE:
            return int(value)
    raise _Invalid(None, value, "an integer from 1 to 262,144, or 'auto' (chosen from f's cost)")


class CodeConfig(_Section):
    """The batch geometry: K inputs per coding group, N workers for the coded schemes, B groups per batch.

    A batch is one *block* of ``block_size`` groups: K·B samples, N shard tasks that each evaluate f on B
    samples at once, one cutoff and one decode (docs/pipeline.rst, section 'Batches, groups and blocks').
    ``block_size: 1`` is one sample per shard.

    Attributes
    ----------
    num_inputs
        K, the inputs coded together in one group (encoded into N coded inputs).
    num_workers
        N, the coded inputs (shard tasks) per batch for the coded schemes (gcc, letcc, bacc, bspline,
        lcc), for ``replication`` (unless ``replication.copies`` sets r·K) and for ``auto`` (the budget it
        chooses within); at least K. ``uncoded`` uses K and ``speculative`` (copies + 1)·K, so a run of only
        those (or of entries that set their own ``num_workers``) may leave it out.
    block_size
        B, the groups of a batch: each shard evaluates f once on a block of B coded samples, so a batch is
        K·B samples, N shard tasks, one cutoff and one decode. ``auto`` (the default) times f on a sample of
        the source when the store is created and picks B so that a shard spends about 0.1 s in f, within
        128 MiB of samples per batch, at least 4 batches, and aligned with the source's chunks; the batches in
        flight follow (:mod:`gcc_dask.sizing`; docs/pipeline.rst, section 'Block size'). The choice and its
        reason are stored with the run (attrs ``block_size``, ``block_size_reason``) and reused on resume. A
        number (1 to 262,144) gives the same layout on every machine.
    points
        Placement of the data points α and worker points β on [-1, 1]: ``systematic`` (the default for
        pipelines: α Chebyshev points of the first kind, and the data points among the worker points, the best
        of the placements in the sweeps of RESULTS.md on two datasets), ``chebyshev`` (first kind for α,
        second kind for β; the default of :func:`gcc_dask.make_code`), ``equispaced``,
        ``twins`` (⌊N/K⌋ workers next to each data point), or explicit ``{alpha: [...], beta: [...]}``
        (strictly increasing in [-1, 1], at least 1e-6 apart; an omitted list is Chebyshev). See
        docs/methods.rst, section 'Point placement'.
    """

    num_inputs: InputCount
    num_workers: WorkerCount | None = None
    block_size: Annotated[int | str, BeforeValidator(_block_size)] = "auto"
    points: Points = "systematic"


class CompositionConfig(_Section):
    """Which K samples are coded together, in which order (:mod:`gcc_dask.composition`).

    No policy looks at labels or at f. The composition is stored with the run and reused on resume.

    Attributes
    ----------
    policy
        ``similarity`` (the default) chains similar inputs (greedy nearest neighbours on their leading
        principal components, within windows of ``window`` samples) and cuts the chain into groups of K;
        ``tree`` splits each window by a k-d tree on the same components into leaves of at most ``leaf``
        samples and chains each leaf, the leaves' leftovers chained up the tree (work per sample O(leaf),
        whatever the window; groups a little looser than the chain's over the same window); ``kd`` grows the
        same tree down to leaves of one group, with no chain (about 1 µs a sample; looser groups still);
        ``pc1`` sorts by the first principal component; ``random`` is a seeded permutation; ``as_stored`` keeps
        the source's order. ``auto`` (the default of :func:`gcc_dask.coded_map`) takes ``similarity`` when f
        costs at least 5 µs a sample (measured on the probe; the chain costs about 10-20 µs a sample, so it
        would multiply the cost of a cheaper f), ``tree`` from 2 µs and ``kd`` below; the run's root attribute
        ``composition`` says which it took.
    window
        Samples per window of the ``similarity`` chain, the ``tree`` and ``kd`` (rounded up to a multiple of K): each
        window is read, projected and ordered on its own (a Dask task each when there are several), so a large
        source is never loaded whole. Larger windows group better; the chain costs O(window) more per sample,
        the tree O(log window). At most 65,536.
    leaf
        Most samples per leaf of the ``tree`` policy (rounded up to a multiple of K): each leaf is chained, so
        its work per sample is O(leaf). At most 65,536; ignored by the other policies.
    dims
        Principal components the samples are compared on.
    fit_samples
        Samples the principal components are fitted on, spread evenly over the source, or over 8 of its chunks
        spread evenly for a compressed Zarr array of more (read at once, as float64). At most 65,536.
    seed
        Seeds ``random`` and the randomized PCA.
    """

    policy: Literal["as_stored", "random", "pc1", "similarity", "tree", "kd", "auto"] = "similarity"
    window: WindowSize = 8192
    leaf: LeafSize = 256
    dims: PosInt = 32
    fit_samples: FitSamples = 4096
    seed: Annotated[int, Field(ge=0)] = 0


def _lambda_dec(value: Any) -> Any:
    """number ≥ 0 or ``'gcv'``"""
    if isinstance(value, str) and value == "gcv":
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value) and value >= 0:
            return float(value)
    raise _Invalid(None, value, "a number >= 0 or 'gcv'")


class GccConfig(_Section):
    """Parameters of the GCC scheme (docs/methods.rst, section 'GCC and LeTCC').

    Both smoothing parameters are in the mean form on Ω = [-1, 1]; 0 interpolates.

    Attributes
    ----------
    kernel
        The RKHS kernel: ``sobolev2`` (natural cubic smoothing splines, LeTCC's decoder), ``sobolev1``
        (natural linear smoothing splines: piecewise linear, a kernel of lower order), ``matern32``,
        ``matern52`` or ``gaussian``.
    lambda_enc
        λ_enc, the encoder's smoothing parameter (0: the encoder passes through the K inputs).
    lambda_dec
        λ_dec, the decoder's smoothing parameter, or ``gcv`` to choose it per batch by generalised
        cross-validation. Use a small positive value when workers return noisy results.
    length_scale
        ℓ of the Matérn and Gaussian kernels, in units of Ω; null means the scheme's default (1.0).
        Ignored by ``sobolev2``.
    """

    kernel: Literal["sobolev2", "sobolev1", "matern32", "matern52", "gaussian"] = "sobolev2"
    lambda_enc: Annotated[float, Field(ge=0)] = 0.0
    lambda_dec: Annotated[float | str, BeforeValidator(_lambda_dec)] = 0.0
    length_scale: Annotated[float, Field(gt=0)] | None = None


class LccConfig(_Section):
    """Lagrange coded computing: the polynomial degree of f it assumes.

    Attributes
    ----------
    degree
        D, the total degree of the polynomial f; LCC needs ``(K - 1)·D + 1`` results (its recovery
        threshold) and so ``code.num_workers`` at least that.
    """

    degree: PosInt = 1


def _extra_rule(value: Any) -> Any:
    """``replication.extra``: ``spread``, ``ends`` or a list of positions (integers >= 0; one line otherwise)."""
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, str) and value in ("spread", "ends"):
        return value
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return value
    raise _Invalid(None, value, "'spread', 'ends' or a list of distinct positions (integers >= 0), one for each of the "
                                "N mod K extra copies")


class ReplicationConfig(_Section):
    """Replication, full or partial: N workers hold copies of the K inputs (docs/methods.rst, section
    'Replication and uncoded').

    Attributes
    ----------
    copies
        r: run on r·K workers, every input copied r times. Null (the default): run on ``code.num_workers``
        workers, the coded schemes' N (equal cost); when N is not a multiple of K the N mod K extra copies go
        to the positions ``extra`` chooses (partial replication).
    extra
        Which positions of a group get the extra copies of partial replication: ``spread`` (the default:
        ``round(linspace(0, K - 1, N mod K))``, the group's two end positions first, chosen on training data:
        RESULTS.md, section 'The frontier'), ``ends`` (from the outside in: 0, K - 1, 1, K - 2, ...) or a list
        of positions.
    stop
        ``cutoff`` (the default): stop at the same cutoff as the coded schemes (``cutoff.wait_for``, the
        deadline, the adaptive rule), the fair comparison; an input whose copies all straggled is then
        lost. ``recovery``: wait for one copy of every input, however long that takes.
    fill
        What a lost input gets: ``linear`` (the default) interpolates between the received neighbours on each
        side along the group's positions (the nearest one beyond an end), the strongest cheap estimator on the
        held-out frontiers of RESULTS.md; ``nearest`` gives it the result of the received input nearest along
        the group's positions; ``none`` leaves it NaN (counted in the summary's ``missing``). A similarity
        composition makes neighbours similar. Filled outputs are marked in the store (``filled``) and counted
        in the summary.
    """

    copies: Annotated[int, Field(ge=1)] | None = None
    extra: Annotated[str | list[int], BeforeValidator(_extra_rule)] = "spread"
    stop: Literal["cutoff", "recovery"] = "cutoff"
    fill: Literal["none", "nearest", "linear"] = "linear"


class UncodedConfig(_Section):
    """Uncoded: worker k evaluates f(x_k), N = K.

    Attributes
    ----------
    stop
        ``all`` (the default): wait for all K results, what users do today. ``cutoff``: stop at the same cutoff
        as the other schemes (``cutoff.wait_for``: K - S results, the deadline, the adaptive rule); the lost
        inputs get the ``fill``.
    fill
        What a lost input gets (see ``replication.fill``): ``none``, ``nearest`` or ``linear``.
    """

    stop: Literal["all", "cutoff"] = "all"
    fill: Literal["none", "nearest", "linear"] = "none"
