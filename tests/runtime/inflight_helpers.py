"""Plain stand-ins of the driver's state of batches in flight, for the tests of the shell's pure bookkeeping
(test_inflight.py, test_quiet.py): futures with a key and a status, schemes whose machine is driven by events."""

from __future__ import annotations

from gcc_dask.runtime.cutoff import CutoffPolicy
from gcc_dask.runtime.plans import SchemePlan, _BatchState, _SchemeState


class Fut:
    """A stand-in for a Dask future: a key and a status."""

    def __init__(self, key: str, status: str = "pending") -> None:
        self.key, self.status = key, status

    def __repr__(self) -> str:
        return f"Fut({self.key!r})"


def plan(name="gcc", n=8, wait_for=6, **kwargs) -> SchemePlan:
    """A scheme of N = `n` shards cut at `wait_for` results."""
    return SchemePlan(name=name, num_workers=n, policy=CutoffPolicy(num_workers=n, wait_for=wait_for), **kwargs)


def scheme(of: SchemePlan | None = None, virtual=False, start_wall=100.0, number: int = 0) -> _SchemeState:
    """A scheme's batch (batch `number`, for its shards' keys) started at 0 on the monotonic clock (`start_wall` on
    the wall clock), every shard submitted."""
    of = of or plan()
    s = _SchemeState(plan=of, start_wall=start_wall, start_mono=0.0, delays=None, virtual=virtual,
                     regular=of.regular(False))
    s.machine.start()
    s.shards = [Fut(f"eval-b{number}-w{w}-{of.name}") for w in range(of.num_workers)]
    return s


def batch(number: int, seq: int | None = None, **schemes: _SchemeState) -> _BatchState:
    """A batch in flight (its seq: its number unless given) with its reference and `schemes` by name."""
    return _BatchState(batch=number, n_real=4, reference=Fut(f"ref-b{number}"), schemes=dict(schemes),
                       seq=number if seq is None else seq)


def cut(s: _SchemeState, arrived=range(6), failed=()) -> None:
    """Shards `failed` fail, then `arrived` arrive 0.1 s apart (6 of 8 reach a cutoff at 6)."""
    for w in failed:
        s.machine.shard_failed(w, 0.0)
    for i, w in enumerate(arrived):
        s.machine.shard_finished(w, 0.1 * (i + 1))
