"""The window of batches in flight on its pure policies (gcc_dask.runtime.window), with a simulated clock: when it
takes more batches, which batches take their turn for backups or are overtaken, and the wait once every worker
is gone. No cluster, nothing sleeps."""

from __future__ import annotations

from gcc_dask.runtime.window import Window, WorkerLoss, refill_size, takes_more, turns


def test_the_window_takes_batches_a_quarter_of_it_at_a_time_or_when_empty():
    assert [refill_size(m) for m in (1, 2, 4, 7, 16)] == [1, 1, 1, 1, 4]
    assert not takes_more(free=3, in_flight=13, max_in_flight=16)
    assert takes_more(free=4, in_flight=12, max_in_flight=16)
    assert takes_more(free=0, in_flight=0, max_in_flight=16)  # (nothing in flight: whatever is free)
    assert takes_more(free=1, in_flight=3, max_in_flight=4)


def test_the_oldest_waiting_batch_takes_its_turn_and_an_overtaken_one_takes_it_at_once():
    assert turns([]) == [] and turns([5, 2, 7]) == [2]
    assert turns([5, 2, 7], older_than=6) == [2, 5]  # batch 6 reached its cutoff first: 2 and 5 are overtaken
    assert turns([5, 2, 7], older_than=2) == []


def test_a_batch_is_overtaken_once_a_later_one_reached_its_cutoff_for_the_same_scheme():
    w = Window()
    assert not w.overtaken("gcc", 0)
    assert w.cut("gcc", 2)  # the latest so far: the batches before it that wait are overtaken
    assert w.overtaken("gcc", 0) and w.overtaken("gcc", 1) and not w.overtaken("gcc", 2)
    assert not w.overtaken("uncoded", 0)  # per scheme
    assert not w.cut("gcc", 1)  # an older one reaching its cutoff later overtakes none
    assert w.cut("gcc", 3) and w.decided == {"gcc": 3}


def test_every_worker_gone_is_said_once_back_is_said_and_the_run_stops_past_the_timeout():
    loss = WorkerLoss(timeout=10.0)
    assert loss.step(2, now=0.0) is None
    assert loss.step(0, now=1.0) == "gone"
    assert loss.step(0, now=5.0) is None and loss.step(0, now=11.0) is None  # 10 s since 1.0: not past it yet
    assert loss.step(3, now=11.5) == "back" and loss.step(3, now=12.0) is None
    assert loss.step(0, now=20.0) == "gone"  # a second loss counts from its own start
    assert loss.step(0, now=30.5) == "stop"


def test_priorities_rank_a_decode_over_its_shards_and_spares_and_metrics_below_every_batch_in_flight():
    from gcc_dask.runtime.window import priority

    window = 4
    ranks = {seq: {what: priority(seq, what, window) for what in ("decode", "shard", "spare", "background")}
             for seq in range(window)}
    assert ranks[0] == {"decode": 1, "shard": 0, "spare": -4, "background": -9}
    # every batch's shards above every spare of the batches in flight, every spare above every metrics task
    assert min(r["shard"] for r in ranks.values()) > max(r["spare"] for r in ranks.values())
    assert min(r["spare"] for r in ranks.values()) > max(r["background"] for r in ranks.values())
    assert all(r["decode"] > r["shard"] for r in ranks.values())
