"""The keys of a run's tasks (pure): what the Dask shell (:mod:`~.runner_tasks`) names each task it submits.

Every key ends with the run's token (``-{token}``: the workers' log filter and the run page recognise a run's tasks
by it), and says which batch and scheme the task is of. A task submitted again gets a key of its own, so that it
never meets the old one's result or cancellation:

=========================  ============================================================================
task                       key
=========================  ============================================================================
shard ``w``                ``eval-b{batch}-w{w}-{scheme}{restart}{copy}-{token}``
decode                     ``decode-b{batch}-{scheme}{restart}{attempt}{direct}-{token}``
score                      ``score-b{batch}-{scheme}{restart}{attempt}-{token}``
reference, labels          ``reference-b{batch}{attempt}-{token}``, ``labels-b{batch}{attempt}-{token}``
the batch's one read       ``load-b{batch}{again}-{token}`` (``{again}``: ``-l{n}`` read again, :func:`load_key`)
=========================  ============================================================================

with ``{restart}`` ``-r{n}`` for the n-th run of a scheme's batch again (its kept shards were lost,
:func:`restart_suffix`), ``{attempt}`` ``-a{n}`` for the n-th submission again of a decode, score or the batch's
inputs (:func:`attempt_suffix`), ``{direct}`` :data:`DIRECT` for a decode submitted with all its shards, and
``{copy}`` one of :data:`BACKUP` (a backup copy of a late shard),
:data:`PROMOTED` (a spare run again at its batch's priority) or :func:`rescue_suffix` (shards stuck on a quiet
worker, run again elsewhere). The run page parses shard keys back
(:func:`~gcc_dask.dashboard.state.parse_shard_key`).
"""

from __future__ import annotations

__all__ = ["BACKUP", "DIRECT", "PROMOTED", "attempt_suffix", "decode_key", "inputs_key", "load_key", "rescue_suffix",
           "restart_suffix", "score_key", "shard_key"]

#: the suffix of a late shard's backup copy
BACKUP = "-b"
#: the suffix of a spare submitted again at its batch's priority
PROMOTED = "-p"
#: the suffix of a decode submitted with all its shards (a scheme whose cutoff keeps every result): when one of
#: them fails, the decode of the others that follows must not meet that decode's error under the same key (it did,
#: while the scheduler still held it: the batch failed instead of decoding around the erasure)
DIRECT = "-d"


def restart_suffix(restarts: int) -> str:
    """``-r{restarts}`` for a scheme's batch run again, ``""`` for its first run."""
    return f"-r{restarts}" if restarts else ""


def attempt_suffix(restarts: int, attempt: int = 0) -> str:
    """The suffix of a scheme's decode and score: :func:`restart_suffix`, then ``-a{attempt}`` for a decode (or
    score) submitted again.

    >>> attempt_suffix(0), attempt_suffix(1), attempt_suffix(0, 2), attempt_suffix(1, 2)
    ('', '-r1', '-a2', '-r1-a2')
    """
    return "".join(f"-{c}{n}" for c, n in (("r", restarts), ("a", attempt)) if n)


def rescue_suffix(rescues: int) -> str:
    """The suffix of the shards of a batch run again because they were stuck on a quiet worker (the
    `rescues`-th rescue of the batch)."""
    return f"-q{rescues}"


def shard_key(batch: int, w: int, scheme: str, token: str, restart: str = "", copy: str = "") -> str:
    """The key of shard `w` of `scheme`'s `batch`: `restart` its run's :func:`restart_suffix`, `copy` the suffix of
    a copy (:data:`BACKUP`, :data:`PROMOTED`, :func:`rescue_suffix`; ``""``: the shard itself).

    >>> shard_key(3, 7, "gcc", "1a2b", "-r1", BACKUP)
    'eval-b3-w7-gcc-r1-b-1a2b'
    """
    return f"eval-b{batch}-w{w}-{scheme}{restart}{copy}-{token}"


def decode_key(batch: int, scheme: str, token: str, restarts: int = 0, attempt: int = 0, direct: bool = False) -> str:
    """The key of the decode of `scheme`'s `batch` (:func:`attempt_suffix`); `direct`: the decode submitted with
    all its shards, which a failed shard fails (:data:`DIRECT`): the decode of the kept shards that follows it
    has a key of its own.

    >>> decode_key(4, "gcc", "1a2b"), decode_key(4, "gcc", "1a2b", direct=True)
    ('decode-b4-gcc-1a2b', 'decode-b4-gcc-d-1a2b')
    """
    return f"decode-b{batch}-{scheme}{attempt_suffix(restarts, attempt)}{DIRECT if direct else ''}-{token}"


def score_key(batch: int, scheme: str, token: str, restarts: int = 0, attempt: int = 0) -> str:
    """The key of the score that joins the decode of `scheme`'s `batch` with its reference."""
    return f"score-b{batch}-{scheme}{attempt_suffix(restarts, attempt)}-{token}"


def inputs_key(kind: str, batch: int, token: str, attempt: int = 0) -> str:
    """The key of the task of `kind` (``"reference"`` or ``"labels"``) of `batch`, submitted `attempt` times
    before.

    >>> inputs_key("reference", 4, "1a2b"), inputs_key("labels", 4, "1a2b", 1)
    ('reference-b4-1a2b', 'labels-b4-a1-1a2b')
    """
    return f"{kind}-b{batch}{attempt_suffix(0, attempt)}-{token}"


def load_key(batch: int, token: str, reads: int = 0) -> str:
    """The key of the batch's one read (:func:`~gcc_dask.runtime.tasks.load_batch`), after `reads` reads of it
    submitted before (a read lost with its worker, or let go on a quiet one, is submitted again).

    >>> load_key(4, "1a2b"), load_key(4, "1a2b", 1)
    ('load-b4-1a2b', 'load-b4-l1-1a2b')
    """
    return f"load-b{batch}{f'-l{reads}' if reads else ''}-{token}"
