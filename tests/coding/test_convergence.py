"""Convergence on f(x) = x·sin x (docs/methods.rst, section 'Convergence rates'): GCC's MSE against N, worst-case
and Bernoulli stragglers.

K = 10 inputs x ~ U(-3, 3), 50 trials per N, noiseless workers, λ = 0, Chebyshev points, N in
{40, 80, 160, 320, 640} (even N: no α/β coincidence for K = 10). The claimed rate (arXiv 2608.28910)
is O(S³/N³); a stable natural-spline decoder shows slopes near −6 to −7 on this smooth f, so the tests
ask for ≤ −5 (the issue's bar is ≤ −3): a slope near −3 would mean the decoder lost its accuracy.

Set ``GCC_DASK_CONVERGENCE_TABLE=path.md`` to write the measured tables there; ``pytest -s`` prints them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from coding_helpers import bernoulli_mse, slope, worst_case_mse, xsinx

from gcc_dask.coding import make_code

K, TRIALS = 10, 50
NS = [40, 80, 160, 320, 640]
ROWS: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    if not ROWS:
        return
    head = "| stragglers | scheme | " + " | ".join(f"N={n}" for n in NS) + " | slope |\n"
    head += "|---|---|" + "---|" * len(NS) + "---|\n"
    text = (
        f"f(x) = x·sin x, x ~ U(-3, 3), K = {K}, {TRIALS} trials, λ = 0, Chebyshev points; worst case = "
        "max over every contiguous window of S stragglers plus 5 random sets, per trial, then the mean.\n\n"
        + head
        + "\n".join(r for r in ROWS if not r.startswith("noisy"))
        + "\n"
    )
    noisy = [r[len("noisy") :] for r in ROWS if r.startswith("noisy")]
    if noisy:
        text += "\nNoisy workers (ỹ = f + N(0, 0.1²)), N = 80, S = 4 random stragglers, 200 trials:\n\n"
        text += "| decoder | mse |\n|---|---|\n" + "\n".join(noisy) + "\n"
    print("\n" + text)
    path = os.environ.get("GCC_DASK_CONVERGENCE_TABLE")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)


def _row(label: str, name: str, values: list[float]) -> None:
    cells = " | ".join(f"{v:.2e}" for v in values)
    ROWS.append(f"| {label} | {name} | {cells} | {slope(NS, values):.2f} |")


@pytest.mark.parametrize("S", [1, 2, 4])
def test_worst_case_gcc_converges_fast_and_beats_bacc(S):
    X = np.random.default_rng(S).uniform(-3, 3, (K, TRIALS))
    mse = {}
    for name in ("gcc", "bacc"):
        mse[name] = [
            float(worst_case_mse(make_code(name, num_inputs=K, num_workers=N), X, xsinx, S,
                                 np.random.default_rng(N)).mean())
            for N in NS
        ]
        _row(f"S={S} worst", name, mse[name])
    assert slope(NS, mse["gcc"]) <= -5.0, mse["gcc"]
    assert all(g <= b for g, b in zip(mse["gcc"], mse["bacc"], strict=True)), mse


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_bernoulli_gcc_mse_falls_monotonically(p):
    X = np.random.default_rng(7).uniform(-3, 3, (K, TRIALS))
    mse = {}
    for name in ("gcc", "bacc"):
        mse[name] = [
            float(bernoulli_mse(make_code(name, num_inputs=K, num_workers=N), X, xsinx, p,
                                np.random.default_rng(N)).mean())
            for N in NS
        ]
        _row(f"p={p}", name, mse[name])
    assert np.all(np.diff(mse["gcc"]) < 0), mse["gcc"]
    assert slope(NS, mse["gcc"]) <= -5.0, mse["gcc"]


def test_noisy_workers_smoothing_beats_interpolation():
    """ỹ = f(x̃) + N(0, 0.1²): a small positive λ_dec and GCV both beat λ_dec = 0.

    See docs/methods.rst, section 'GCC and LeTCC'.
    """
    N, S, sigma, trials = 80, 4, 0.1, 200
    out = {}
    for lam in (0.0, 1e-9, "gcv"):
        rng = np.random.default_rng(3)
        code = make_code("gcc", num_inputs=K, num_workers=N, lambda_dec=lam)
        X = rng.uniform(-3, 3, (K, trials))
        Y = xsinx(code.encode(X)) + sigma * rng.standard_normal((N, trials))
        errs = []
        for i in range(trials):
            F = np.sort(rng.choice(N, N - S, replace=False))
            errs.append(np.mean((code.decode(Y[F, i], F) - xsinx(X[:, i])) ** 2))
        out[lam] = float(np.mean(errs))
        ROWS.append(f"noisy| gcc λ_dec={lam!r} | {out[lam]:.2e} |")
    assert out[1e-9] < out[0.0], out
    assert out["gcv"] < out[0.0], out
