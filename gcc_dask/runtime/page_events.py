"""What a run tells its page on the Dask dashboard (pure): the events the Dask shell publishes
(:func:`gcc_dask.dashboard.publish`; docs/dashboard.rst), as plain dicts, and the rule that tells the page about
quiet workers only when they changed (:class:`QuietPage`). The run's first event is
:func:`gcc_dask.dashboard.start_event`; a batch's records are summed up by :func:`gcc_dask.dashboard.record_summary`.
"""

from __future__ import annotations

from typing import Iterable, Sequence

__all__ = ["QuietPage", "cutoff_event", "done_event", "end_event", "submit_event"]


def submit_event(token: str, work: Iterable[tuple[int, Sequence[str]]]) -> dict:
    """Batches submitted, as ``(batch, schemes)``.

    >>> submit_event("t", [(3, ("gcc", "bacc"))])
    {'kind': 'submit', 'run': 't', 'work': [[3, ['gcc', 'bacc']]]}
    """
    return {"kind": "submit", "run": token, "work": [[b, list(s)] for b, s in work]}


def cutoff_event(token: str, batch: int, scheme: str, kept: list[int], cutoff_s: float, status: int) -> dict:
    """A scheme's batch reached its cutoff at `cutoff_s` (seconds since its start), keeping the shards `kept`."""
    return {"kind": "cutoff", "run": token, "batch": batch, "scheme": scheme, "kept": kept, "cutoff_s": cutoff_s,
            "status": status}


def done_event(token: str, batch: int, records: list[dict]) -> dict:
    """A batch's records are on the driver (`records`: their summary, one per scheme)."""
    return {"kind": "done", "run": token, "batch": batch, "records": records}


def end_event(token: str, clean: bool) -> dict:
    """The run ended: ``complete`` when `clean`, else ``stopped`` (an error, Ctrl-C)."""
    return {"kind": "end", "run": token, "status": "complete" if clean else "stopped"}


class QuietPage:
    """Which workers the run's page was told are quiet (missed their heartbeats) and ended: :meth:`update` returns
    the event to publish only when that changed."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.told: tuple[frozenset, frozenset] = (frozenset(), frozenset())  # (quiet, ended) as last told

    def update(self, quiet: Iterable[str], ended: Iterable[str]) -> dict | None:
        """The workers `quiet` and those `ended` (unresponsive) now: the event that tells the page (the quiet ones,
        and those ended since it was told last), or None when nothing changed.

        >>> page = QuietPage("t")
        >>> page.update({"w1"}, set()), page.update({"w1"}, set())
        ({'kind': 'quiet', 'run': 't', 'workers': ['w1'], 'ended': []}, None)
        """
        now = (frozenset(quiet), frozenset(ended))
        if now == self.told:
            return None
        new_ended = now[1] - self.told[1]
        self.told = now
        return {"kind": "quiet", "run": self.token, "workers": sorted(now[0]), "ended": sorted(new_ended)}
