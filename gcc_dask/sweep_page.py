"""What a sweep tells the run page on its cluster's dashboard (docs/dashboard.rst): its grid in one line, its tasks
as they are submitted, each finished task's metric per scheme, and its end, in the shapes the page takes from a
run (:mod:`gcc_dask.dashboard`)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from gcc_dask import dashboard

__all__ = ["SweepPage", "grid_text", "page_records", "page_work"]


class SweepPage:
    """A sweep's events on the run page of `client`'s scheduler: attached (its link said through `say`), then the
    sweep's name, grid and tasks published at once (`todo`: the (K, N, S|p) indices of the cells to run;
    `blocks`: the trials of each task; task i is the i-th (cell, block) in that order, the ``sweep-b{i}-...``
    key's i)."""

    def __init__(self, client, token: str, cfg: Any, path: str, todo: Sequence[tuple[int, int, int]],
                 blocks: Sequence[Sequence[int]], grid: tuple[Sequence[int], Sequence[int], Sequence[float]],
                 output_size: int, say: Callable[[str], None]) -> None:
        self.client, self.token = client, token
        self.labels = [sp.label for sp in cfg.schemes]
        self.metric = "rel_acc" if int(output_size) > 1 else "mse"
        link = dashboard.attach(client)  # the run page, as a run's
        if link:
            say(f"gcc-dask run page: {link}")
        work = page_work(todo, blocks, *grid, self.labels, cfg.stragglers.dim)
        dashboard.publish(client, {"kind": "meta", "run": token, "name": cfg.name, "store": str(path)})
        dashboard.publish(client, dashboard.sweep_start_event(token, self.labels, grid_text(cfg), len(work),
                                                              self.metric))
        dashboard.publish(client, {"kind": "submit", "run": token, "work": work})

    def done(self, task: int, res: dict, skipped: np.ndarray) -> None:
        """Task `task` finished with `res` (:func:`gcc_dask.sweep.evaluate_cell`'s result); `skipped`, bool per
        scheme, marks the schemes its cell does not run."""
        dashboard.publish(self.client, {"kind": "done", "run": self.token, "batch": task,
                                        "records": page_records(self.labels, res, skipped, self.metric)})

    def end(self, complete: bool) -> None:
        dashboard.publish(self.client, {"kind": "end", "run": self.token,
                                        "status": "complete" if complete else "stopped"})


def grid_text(cfg: Any) -> str:
    """The sweep's grid in one line for the run page: ``K 8; N 16, 32; S 0, 2, 4`` (`cfg` a
    :class:`~gcc_dask.sweep_config.SweepConfig`)."""
    def values(xs) -> str:
        return ", ".join(f"{x:g}" for x in xs)

    st = cfg.stragglers
    return f"K {values(cfg.code.num_inputs)}; N {values(cfg.code.num_workers)}; {st.dim} {values(st.values)}"


def page_work(todo: Sequence[tuple[int, int, int]], blocks: Sequence[Sequence[int]], K: Sequence[int],
              N: Sequence[int], S: Sequence[float], labels: list[str], dim: str) -> list[list]:
    """The sweep's tasks as the page lists them, in submission order: ``[task, labels, cell]`` per (cell, block
    of trials)."""
    work: list[list] = []
    for (a, b, s_i) in todo:
        for trials in blocks:
            cell = f"K={K[a]} N={N[b]} {dim}={S[s_i]:g} trials {trials[0]}-{trials[-1]}"
            work.append([len(work), labels, cell])
    return work


def page_records(labels: list[str], res: dict, skipped: np.ndarray, metric: str) -> list[dict]:
    """What the run page takes of a finished task, per scheme that ran at the cell: its metric over the task's
    trials (status 3 when no trial could be decoded)."""
    out = []
    for j, label in enumerate(labels):
        if skipped[j]:
            continue
        values = np.asarray(res[metric][j], dtype=np.float64)
        finite = values[np.isfinite(values)]
        out.append({"scheme": label, "status": 1 if finite.size else 3, "batch_latency_s": None,
                    metric: float(finite.mean()) if finite.size else float("nan"), "backups": 0, "received": None})
    return out
