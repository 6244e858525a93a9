"""EDL's dynamic data pipeline: exactly-once per epoch under any scale events and failures."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.executors.data_pipeline import (
    DataLeader,
    PipelineError,
    Shard,
    permutation,
    shard_samples,
)


class Driver:
    """Simulated workers around one leader; records every sample whose commit the leader
    accepted (the samples the epoch's model update counts)."""

    def __init__(self, leader: DataLeader) -> None:
        self.leader = leader
        self.next_id = 0
        self.processed: Counter[int] = Counter()

    def join(self) -> None:
        self.leader.join(self.next_id)
        self.next_id += 1

    def step(self, worker: int, amount: int) -> None:
        """The worker trains on ``amount`` samples (asking for a shard when it has none or
        finished its own) and reports its offset, as EDL does at each mini-batch end."""
        held = self.leader.held(worker)
        if held is None or held[1] == held[0].end:
            if self.leader.next_shard(worker) is None:
                return
            held = self.leader.held(worker)
            assert held is not None
        shard, pos = held
        new = min(shard.end, pos + amount)
        if self.leader.commit(worker, new) != new - pos:
            raise AssertionError("commit miscounted")
        self.processed.update(self.leader.samples(shard.partition, pos, new))

    def drain(self) -> None:
        if not self.leader.workers:
            self.join()
        for _ in range(10 * self.leader.num_samples + 10):  # bounded: a lost sample fails
            if self.leader.epoch_complete():
                return
            for w in self.leader.workers:
                self.step(w, 7)
        raise AssertionError(f"epoch incomplete: {self.leader.committed} committed")


OPS = st.lists(
    st.tuples(
        st.sampled_from(["join", "leave", "fail", "step", "handover", "restart"]),
        st.integers(0, 50),
        st.integers(1, 40),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 300),
    psize=st.integers(1, 64),
    seed=st.integers(0, 2**32),
    max_shard=st.one_of(st.none(), st.integers(1, 20)),
    ops=OPS,
    epochs=st.integers(1, 2),
)
def test_exactly_once_per_epoch(
    n: int,
    psize: int,
    seed: int,
    max_shard: int | None,
    ops: list[tuple[str, int, int]],
    epochs: int,
) -> None:
    leader = DataLeader(n, psize, seed, max_shard=max_shard)
    drv = Driver(leader)
    for epoch in range(epochs):
        for op, who, amount in ops:
            workers = drv.leader.workers
            if op == "join" or not workers:
                drv.join()
                continue
            w = workers[who % len(workers)]
            if op == "step":
                drv.step(w, amount)
            elif op == "leave":
                held = drv.leader.held(w)
                if held is None:
                    drv.leader.leave(w)
                else:  # graceful exit: report the last offset it reached
                    shard, pos = held
                    end = min(shard.end, pos + amount % 5)
                    drv.processed.update(drv.leader.samples(shard.partition, pos, end))
                    drv.leader.leave(w, end)
            elif op == "fail":
                drv.leader.fail(w)  # anything it did since its last commit is lost
            elif op == "handover":  # leader exit: the state moves (through JSON) to a new one
                drv.leader = DataLeader.restore(json.loads(json.dumps(drv.leader.state())))
            else:  # whole-job restart from a checkpoint: no worker survives
                drv.leader = DataLeader.restore(drv.leader.state(), keep_workers=False)
        drv.drain()
        assert drv.leader.committed == n
        assert drv.processed == Counter({s: epoch + 1 for s in range(n)})
        if epoch + 1 < epochs:
            drv.leader.next_epoch()


def test_failure_returns_uncommitted_samples_to_the_next_worker() -> None:
    # 10 samples, partitions of 5; order for seed 3 is fixed by the permutation.
    leader = DataLeader(10, 5, seed=3)
    first = permutation(2, 3, 0)[0]
    leader.join("a")
    leader.join("b")
    assert leader.next_shard("a") == Shard(first, 0, 5)
    assert leader.commit("a", 2) == 2
    leader.fail("a")  # samples at positions 2..4 were handed out, not committed
    assert leader.next_shard("b") == Shard(first, 2, 5)  # the remainder goes first
    assert leader.committed == 2


def test_graceful_exit_hands_the_rest_of_the_partition_to_a_new_worker() -> None:
    leader = DataLeader(1000, 100, seed=1)
    leader.join(0)
    shard = leader.next_shard(0)
    assert shard is not None and len(shard) == 100
    leader.leave(0, 40)  # reports its final offset
    leader.join(1)  # scale-out
    assert leader.next_shard(1) == Shard(shard.partition, 40, 100)
    assert leader.committed == 40


def test_permutation_is_seeded_and_changes_per_epoch() -> None:
    assert permutation(50, 7, 0) == permutation(50, 7, 0)
    assert sorted(permutation(50, 7, 0)) == list(range(50))
    assert permutation(50, 7, 0) != permutation(50, 7, 1)
    assert permutation(50, 7, 0) != permutation(50, 8, 0)


def test_protocol_errors() -> None:
    leader = DataLeader(10, 4, seed=0)
    leader.join("w")
    with pytest.raises(PipelineError):
        leader.join("w")
    shard = leader.next_shard("w")
    assert shard is not None
    with pytest.raises(PipelineError):
        leader.next_shard("w")  # previous shard not committed
    with pytest.raises(PipelineError):
        leader.commit("w", shard.end + 1)
    leader.commit("w", shard.begin + 1)
    with pytest.raises(PipelineError):
        leader.commit("w", shard.begin)  # offsets never go back
    with pytest.raises(PipelineError):
        leader.next_epoch()
    with pytest.raises(PipelineError):
        leader.fail("nobody")


def test_max_shard_splits_and_last_partition_is_short() -> None:
    leader = DataLeader(23, 10, seed=5, max_shard=4)
    seen = list(shard_samples(leader, "solo") if leader.join("solo") is None else [])
    assert sorted(seen) == list(range(23))
    assert leader.epoch_complete()
    leader.next_epoch()
    assert leader.epoch == 1 and leader.committed == 0
