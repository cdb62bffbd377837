"""The BLAS's threads in the driver's process (NumPy's OpenBLAS, through ``threadpoolctl``)."""

from __future__ import annotations

from typing import Any

__all__ = ["one_blas_thread"]


def one_blas_thread() -> Any:
    """A context in which the BLAS that NumPy loaded runs one thread: what a Dask worker process gets anyway
    (its nanny sets ``OPENBLAS_NUM_THREADS=1``).

    Used for the composition's work in the driver's process and for the embedded cluster's workers when they
    are threads of this process. Their matrices are small (the composition's fit runs QR steps on 4,096 x 42),
    and OpenBLAS's threads on them cost far more than they gain whenever the cores are busy: the fit took 0.15 s
    with one thread and 3.0-3.6 s with two on a loaded 2-core machine. The results agree to rounding (1e-14 on
    the fit's components; the compositions of MNIST's and Fashion-MNIST's splits were the same permutations).
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1, user_api="blas")
