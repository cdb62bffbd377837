"""A quiet worker's rescue on plain states (gcc_dask.runtime.quiet): what the batches in flight and the fetch under
way wait for, and what runs again when some of those tasks are stuck on the quiet worker. The scheduler's answer
(which keys are stuck) is given as a set; no cluster, nothing sleeps."""

from __future__ import annotations

from gcc_dask.runtime.quiet import records_waiting, refetched, rescue_plan, scores_to_rejoin, short_of, waits_on
from inflight_helpers import Fut, batch, cut, plan, scheme


def _flight():
    """Batch 0 cut (its decode submitted), batch 1 waiting with 3 of its 6 needed results in, batch 2 finished and
    being fetched (its record held by its decode's worker)."""
    s0, s1, s2 = scheme(number=0), scheme(number=1), scheme(number=2)
    cut(s0)
    s0.decode = Fut("decode-b0")
    for w in range(3):
        s1.machine.shard_finished(w, 0.1)
    cut(s2)
    s2.decode = Fut("decode-b2", "finished")
    s2.machine.decode_finished()
    return batch(0, gcc=s0), batch(1, gcc=s1), batch(2, gcc=s2)


def test_the_batches_wait_for_a_cut_scheme_s_decode_and_kept_shards_and_for_a_waiting_one_s_shards():
    b0, b1, _ = _flight()
    waits, shards = waits_on([b0, b1])
    s0, s1 = b0.schemes["gcc"], b1.schemes["gcc"]
    assert waits["decode-b0"] == [("scheme", 0, "gcc", b0, s0)]
    assert {k for k, entries in waits.items() if entries[0][0] == "scheme"} == \
        {"decode-b0", *(f"eval-b0-w{w}-gcc" for w in range(6))}
    assert waits["ref-b1"] == [("inputs", 1, "", b1, None)]
    assert shards == {f"eval-b1-w{w}-gcc": (1, "gcc", w, b1, s1) for w in range(3, 8)}


def test_the_fetch_waits_for_the_records_not_yet_on_the_driver():
    _, _, b2 = _flight()
    s2 = b2.schemes["gcc"]
    assert records_waiting([b2]) == {"decode-b2": [("record", 2, "gcc", b2, s2)]}
    s2.result = {"scheme": "gcc"}
    assert records_waiting([b2]) == {}


def test_a_stuck_decode_reruns_its_scheme_a_stuck_record_gives_up_the_fetch_and_stuck_shards_run_again_as_needed():
    b0, b1, b2 = _flight()
    waits, shards = waits_on([b0, b1])
    records = records_waiting([b2])
    stuck = {"decode-b0", "decode-b2", "eval-b1-w3-gcc", "eval-b1-w4-gcc", "eval-b1-w5-gcc", "not-waited-for"}
    again, short = rescue_plan(waits, records, shards, stuck, now=2.0)
    assert again == {(0, "gcc"): ("scheme", 0, "gcc", b0, b0.schemes["gcc"]),
                     (2, "gcc"): ("record", 2, "gcc", b2, b2.schemes["gcc"])}
    assert refetched(again) == {2}
    # batch 1: 3 results + 5 awaited - 3 stuck = 5 of the 6 needed, no spare: the lowest stuck shard runs again
    s1 = b1.schemes["gcc"]
    assert short == {(1, "gcc"): (b1, s1, [3])} and s1.rescues == 1 and s1.launch_s[3] == 2.0


def test_stuck_shards_within_what_the_cutoff_can_spare_stay_where_they_are():
    _, b1, _ = _flight()
    _, shards = waits_on([b1])
    assert short_of(shards, {"eval-b1-w7-gcc"}, {}, now=1.0) == {}  # 3 + 5 - 1 = 7 >= 6
    assert short_of(shards, {"eval-b1-w3-gcc", "eval-b1-w4-gcc", "eval-b1-w5-gcc"}, {(1, "gcc"): "again"}, 1.0) == {}
    assert refetched({}) == set()


def test_only_unfinished_scores_without_a_record_join_the_new_reference():
    done, running, recorded, unscored = (scheme(plan(name)) for name in ("a", "b", "c", "d"))
    done.score, running.score, recorded.score = Fut("s-a", "finished"), Fut("s-b"), Fut("s-c")
    recorded.result = {"scheme": "c"}
    assert scores_to_rejoin(batch(3, a=done, b=running, c=recorded, d=unscored)) == [running]
