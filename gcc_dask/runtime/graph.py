"""Many tasks, each with its own placement and priority, sent to the scheduler as one graph update.

Every ``Client.submit`` or ``Client.map`` call is a graph update of its own: the scheduler deserialises it,
materialises it in a thread (one hop off its event loop and back) and runs its transitions. At the pipeline's
block sizes that per-update cost, a few milliseconds of the driver's CPU, was the largest part of what a batch
costs beyond its tasks (bench: an uncoded batch of 8 shards made 3 updates, 2 placements and a decode).
:class:`GraphUpdate` gathers a batch's tasks (its shards at their placements and priorities, its labels or
reference, the decode of a scheme that keeps every result) and sends them with one ``Client.get`` of a
:class:`~dask.highlevelgraph.HighLevelGraph`: one layer per group of tasks, whose annotations
(``priority``, ``workers``, ``allow_other_workers``, ``resources``) the scheduler applies to each task of
the layer. Tasks are written in Dask's graph specification (a tuple ``(func, *args)``); an argument that
is a list of keys of the same update is replaced by those tasks' results.
"""

from __future__ import annotations

from typing import Any, Callable

from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

__all__ = ["GraphUpdate"]


class GraphUpdate:
    """Tasks gathered for one graph update; :meth:`send` submits them.

    Parameters
    ----------
    client : distributed.Client
    resources : dict, optional
        Worker resources every task of the update needs (``{"GPU": 1}``), as ``Client.submit``'s.

    Examples
    --------
    >>> u = GraphUpdate(client)                                                    # doctest: +SKIP
    >>> u.add(inc, [(1,), (2,)], keys=["a", "b"], priority=5, then=print)          # doctest: +SKIP
    >>> u.add(sum, [(["a", "b"],)], keys=["total"], priority=6)                    # doctest: +SKIP
    >>> u.send()   # one update; print receives the futures of "a" and "b"          # doctest: +SKIP
    """

    def __init__(self, client, resources: dict | None = None) -> None:
        self.client = client
        self.resources = dict(resources or {})
        self._layers: dict[str, MaterializedLayer] = {}
        self._deps: dict[str, set[str]] = {}  # per layer: the layers whose results its tasks take
        self._layer_of: dict[str, str] = {}  # per key: its layer
        self._keys: list[str] = []
        self._then: list[tuple[list[str], Callable[[list], Any] | None]] = []

    def __len__(self) -> int:
        """The number of tasks added so far."""
        return len(self._keys)

    def has(self, key: str) -> bool:
        """Whether a task of `key` was added to this update (and not sent yet)."""
        return key in self._layer_of

    def add(self, func: Callable, args: list[tuple], *, keys: list[str], priority: int,
            workers: list[str] | None = None, allow_other_workers: bool = False,
            then: Callable[[list], Any] | None = None) -> None:
        """Add one task ``func(*args[i])`` under ``keys[i]`` for each i, all with the same placement.

        Parameters
        ----------
        func : callable
        args : list of tuple
            One tuple of positional arguments per task. A list of keys of tasks already added to this update
            stands for their results (Dask's graph specification).
        keys : list of str
            Unique task keys, one per tuple of `args`.
        priority : int
            Dask's user priority: higher runs first.
        workers, allow_other_workers
            As ``Client.submit``'s: where the tasks should run, and whether another worker may run them.
        then : callable, optional
            Called by :meth:`send` with the tasks' futures, in the order of `keys`.

        Raises
        ------
        ValueError
            When `keys` and `args` differ in length, or a key was already added.
        """
        if len(keys) != len(args):
            raise ValueError(f"keys: got {len(keys)} keys for {len(args)} tasks; expected one key per task")
        if len(set(keys)) != len(keys) or any(k in self._layer_of for k in keys):
            raise ValueError(f"keys: {keys!r} repeat a key of this graph update; expected unique keys")
        annotations: dict[str, Any] = {"priority": priority}
        if workers:
            annotations["workers"] = list(workers)
            annotations["allow_other_workers"] = bool(allow_other_workers)
        if self.resources:
            annotations["resources"] = self.resources
        name = f"layer-{keys[0]}"
        self._layers[name] = MaterializedLayer({k: (func, *a) for k, a in zip(keys, args)},
                                               annotations=annotations)
        self._deps[name] = {self._layer_of[k] for a in args for x in a if isinstance(x, list)
                            for k in x if isinstance(k, str) and k in self._layer_of}
        self._layer_of.update(dict.fromkeys(keys, name))
        self._keys += keys
        self._then.append((keys, then))

    def send(self) -> dict[str, Any]:
        """Submit every task added, in one graph update; call each ``then``; return the futures by key.

        An update with no task sends nothing. The update is empty again afterwards.
        """
        if not self._keys:
            return {}
        graph = HighLevelGraph(self._layers, self._deps)
        futures = dict(zip(self._keys, self.client.get(graph, self._keys, sync=False, fifo_timeout="100 ms")))
        then = self._then
        self._layers, self._deps, self._layer_of, self._keys, self._then = {}, {}, {}, [], []
        for keys, fn in then:
            if fn is not None:
                fn([futures[k] for k in keys])
        return futures
