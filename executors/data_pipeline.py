"""EDL's dynamic data pipeline (paper 003 §4.3, digest §2.11): exactly-once data per epoch.

Why: an elastic job changes its worker set in the middle of an epoch (scale-out, graceful
scale-in, a worker crashing). A static split of the dataset over workers would then either
wait for the epoch end or lose / repeat samples. EDL instead keeps the dataset *logically*
divided into many more partitions than workers, shuffles the partition order per epoch with a
seed, and lets a leader hand partitions out on demand. Every worker reports how far it got in
its current partition (EDL piggybacks that on the gradient sync); when a worker leaves or
fails, the part of its partition it has not *committed* goes back to the leader and is handed
to someone else. Hence each epoch covers every sample exactly once, whatever the sequence of
scale events.

Terms used here:

* a **sample** is an integer ``0 <= s < num_samples``; partition ``p`` holds the contiguous
  samples ``[p * partition_size, min((p + 1) * partition_size, num_samples))`` (only metadata,
  nothing is copied);
* a **shard** is what a worker holds: a range ``[begin, end)`` of positions inside one
  partition, handed out by :meth:`DataLeader.next_shard`;
* a sample is **committed** when its worker reported an offset past it
  (:meth:`DataLeader.commit`). Handed-out but uncommitted samples are exactly what a failure
  puts back.

The leader is a plain object (no I/O, no threads): a training script keeps it in its leader
process and calls it from its RPC handler; :meth:`DataLeader.state` / :meth:`DataLeader.restore`
carry the permutation and all progress into a checkpoint or to a new leader (EDL's leader
exit), so a restored job resumes the epoch where it stood.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any

Worker = Hashable


@dataclass(frozen=True, slots=True)
class Shard:
    """Positions ``[begin, end)`` of partition ``partition`` (as handed to one worker)."""

    partition: int
    begin: int
    end: int

    def __len__(self) -> int:
        return self.end - self.begin


@dataclass(slots=True)
class _Lease:
    """A shard a worker holds and how far into it the worker has committed."""

    shard: Shard
    committed: int  # a position inside [shard.begin, shard.end]


class PipelineError(ValueError):
    """A call that breaks the protocol (unknown worker, offset out of range, ...)."""


def permutation(num_partitions: int, seed: int, epoch: int) -> list[int]:
    """The partition order of ``epoch``: a seeded shuffle, different for every epoch (EDL
    reshuffles the dataset each epoch) and the same for the same ``(seed, epoch)``."""
    order = list(range(num_partitions))
    random.Random(f"gpuplan-data:{seed}:{epoch}").shuffle(order)
    return order


class DataLeader:
    """Hands out shards of a seeded random partition order and tracks per-worker progress.

    ``num_samples`` samples in partitions of ``partition_size`` (the last may be shorter).
    ``max_shard`` (optional) caps a shard's length, so a worker that joins late (scale-out)
    can get part of a large partition's remainder instead of waiting for a whole one.
    """

    def __init__(
        self,
        num_samples: int,
        partition_size: int,
        seed: int,
        *,
        epoch: int = 0,
        max_shard: int | None = None,
    ) -> None:
        if num_samples <= 0 or partition_size <= 0:
            raise PipelineError("num_samples and partition_size must be > 0")
        if max_shard is not None and max_shard <= 0:
            raise PipelineError("max_shard must be > 0")
        self.num_samples = num_samples
        self.partition_size = partition_size
        self.num_partitions = -(-num_samples // partition_size)
        self.seed = seed
        self.max_shard = max_shard
        self.epoch = epoch
        self._queue: deque[Shard] = deque()
        self._leases: dict[Worker, _Lease | None] = {}
        self._committed = 0
        self._start_epoch(epoch)

    # ------------------------------------------------------------------ partitions
    def partition_length(self, partition: int) -> int:
        start = partition * self.partition_size
        return min(self.partition_size, self.num_samples - start)

    def samples(self, partition: int, begin: int, end: int) -> range:
        """Dataset sample ids at positions ``[begin, end)`` of ``partition``."""
        base = partition * self.partition_size
        return range(base + begin, base + end)

    def _start_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._committed = 0
        self._queue = deque(
            Shard(p, 0, self.partition_length(p))
            for p in permutation(self.num_partitions, self.seed, epoch)
        )

    # ------------------------------------------------------------------ membership
    @property
    def workers(self) -> tuple[Worker, ...]:
        return tuple(self._leases)

    def join(self, worker: Worker) -> None:
        """Scale-out: ``worker`` may now ask for shards (it gets unprocessed or partially
        processed ones, in the queue's order)."""
        if worker in self._leases:
            raise PipelineError(f"worker {worker!r} already joined")
        self._leases[worker] = None

    def leave(self, worker: Worker, offset: int | None = None) -> None:
        """Graceful scale-in: the worker reports its final ``offset`` (a position in its
        shard, as for :meth:`commit`), and the rest of its shard goes back to the front of
        the queue, to be handed to another worker next."""
        if offset is not None:
            self.commit(worker, offset)
        self._release(worker)
        del self._leases[worker]

    def fail(self, worker: Worker) -> None:
        """Forced exit (crash, lost node): whatever the worker held but had not committed goes
        back; its uncommitted samples will be processed again by someone else."""
        self._release(worker)
        del self._leases[worker]

    def _release(self, worker: Worker) -> None:
        lease = self._lease_of(worker)
        if lease is None:
            return
        rest = Shard(lease.shard.partition, lease.committed, lease.shard.end)
        if len(rest):
            self._queue.appendleft(rest)
        self._leases[worker] = None

    def _lease_of(self, worker: Worker) -> _Lease | None:
        try:
            return self._leases[worker]
        except KeyError:
            raise PipelineError(f"unknown worker {worker!r}") from None

    # ------------------------------------------------------------------ data
    def next_shard(self, worker: Worker) -> Shard | None:
        """The next unassigned shard for ``worker`` (EDL's ``next()`` on the shard generator).

        The worker's previous shard must be fully committed. None when nothing is unassigned:
        either the epoch is complete, or other workers still hold the rest (a later failure
        may put some back, so ask again)."""
        lease = self._lease_of(worker)
        if lease is not None:
            if lease.committed < lease.shard.end:
                raise PipelineError(
                    f"worker {worker!r} asks for a shard before committing {lease.shard}"
                )
            self._leases[worker] = None
        if not self._queue:
            return None
        shard = self._queue.popleft()
        if self.max_shard is not None and len(shard) > self.max_shard:
            cut = shard.begin + self.max_shard
            self._queue.appendleft(Shard(shard.partition, cut, shard.end))
            shard = Shard(shard.partition, shard.begin, cut)
        self._leases[worker] = _Lease(shard, shard.begin)
        return shard

    def commit(self, worker: Worker, offset: int) -> int:
        """The worker has processed its shard up to position ``offset`` (exclusive); returns
        how many samples this newly commits. Offsets never go back."""
        lease = self._lease_of(worker)
        if lease is None:
            raise PipelineError(f"worker {worker!r} holds no shard")
        if not lease.committed <= offset <= lease.shard.end:
            raise PipelineError(
                f"offset {offset} outside [{lease.committed}, {lease.shard.end}] of "
                f"{worker!r}'s {lease.shard}"
            )
        new = offset - lease.committed
        lease.committed = offset
        self._committed += new
        return new

    def held(self, worker: Worker) -> tuple[Shard, int] | None:
        """The worker's shard and its committed position (None when it holds nothing)."""
        lease = self._lease_of(worker)
        return None if lease is None else (lease.shard, lease.committed)

    @property
    def committed(self) -> int:
        """Samples committed in the current epoch."""
        return self._committed

    def epoch_complete(self) -> bool:
        return self._committed == self.num_samples

    def next_epoch(self) -> None:
        """Start the next epoch (new permutation). Only when every sample was committed."""
        if not self.epoch_complete():
            raise PipelineError(
                f"epoch {self.epoch} has {self.num_samples - self._committed} samples left"
            )
        for worker in self._leases:
            self._leases[worker] = None
        self._start_epoch(self.epoch + 1)

    # ------------------------------------------------------------------ hand-over
    def state(self) -> dict[str, Any]:
        """JSON-able state for a checkpoint or a new leader: the unassigned queue (which
        encodes the permutation still to go) and every worker's shard and offset."""
        return {
            "num_samples": self.num_samples,
            "partition_size": self.partition_size,
            "seed": self.seed,
            "epoch": self.epoch,
            "max_shard": self.max_shard,
            "committed": self._committed,
            "queue": [[s.partition, s.begin, s.end] for s in self._queue],
            "leases": [
                [
                    w,
                    None
                    if ls is None
                    else [ls.shard.partition, ls.shard.begin, ls.shard.end, ls.committed],
                ]
                for w, ls in self._leases.items()
            ],
        }

    @classmethod
    def restore(cls, state: dict[str, Any], *, keep_workers: bool = True) -> DataLeader:
        """A leader from :meth:`state`. ``keep_workers`` False is a restart from a checkpoint:
        no worker survives, so every held shard's uncommitted rest goes back to the queue."""
        leader = cls(
            int(state["num_samples"]),
            int(state["partition_size"]),
            int(state["seed"]),
            epoch=int(state["epoch"]),
            max_shard=state.get("max_shard"),
        )
        leader._queue = deque(Shard(int(p), int(b), int(e)) for p, b, e in state["queue"])
        leader._committed = int(state["committed"])
        for worker, lease in state["leases"]:
            key = tuple(worker) if isinstance(worker, list) else worker
            if lease is None:
                leader._leases[key] = None
                continue
            p, b, e, c = (int(v) for v in lease)
            leader._leases[key] = _Lease(Shard(p, b, e), c)
            if not keep_workers:
                leader.fail(key)
        return leader


def shard_samples(leader: DataLeader, worker: Worker) -> Iterator[int]:
    """Worker side, EDL's ``elastic_shard_generator``: yields sample ids shard after shard,
    committing each sample when the next one is requested (i.e. after it was processed).
    Stops when nothing is unassigned. For a single-process script; a distributed worker calls
    the leader over its RPC instead."""
    while True:
        shard = leader.next_shard(worker)
        if shard is None:
            return
        base = shard.partition * leader.partition_size
        for pos in range(shard.begin, shard.end):
            yield base + pos
            leader.commit(worker, pos + 1)
