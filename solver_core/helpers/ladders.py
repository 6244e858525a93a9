"""Ladders: the GPU counts a job may climb through, for AFS and every elastic baseline.

A share policy never hands a job a count it is not allowed to hold, nor one that buys nothing.
The *ladder* of a job is therefore its allowed counts (ascending, from its smallest), cut at
``limit`` (the cluster's usable GPUs) and kept only while the throughput rises. One question
has two answers in the project, so it is an explicit parameter, :data:`Plateau`:

* ``"stop"`` (AFS's saturation guard, digest §2.6 / §7.2 item 13): the ladder *ends* at the
  first count whose rate is not strictly higher than the previous count's. AFS climbs one step
  at a time and compares steps by (3), so a step that does not help must never be taken;
* ``"skip"`` (the baselines' *useful ladder*, AFS Fig. 6 "max GPUs"): such a count is *left
  out* and the walk goes on, so a later count that does rise is still reachable; the last
  element is the job's max useful count.

They agree whenever the monotone envelope (:mod:`gpuplan.models.throughput`) has no flat
stretch *followed by a rise*: flat extrapolation past the peak, the whole AFS zoo on any cap or
allowed set (checked for 972 ladders), and linear profiles. They differ on a profile whose
points plateau and rise again, e.g. ``{1: 1.0, 2: 1.5, 3: 1.5, 4: 2.0}`` ("stop": 1, 2; "skip":
1, 2, 4), and that happens in practice with throughput learning (AFS §4.5): a job measured at
8 and 12 GPUs past its peak is believed flat on 8..12 and linear beyond 12. AFS then stops at
the saturation point, the baselines jump to 13, exactly as before the two were merged.

A count the profile refuses to evaluate (``extrapolation="none"`` past the last measured
point) ends the ladder in both modes: a rise cannot be confirmed, and every larger count is
unmeasured too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from gpuplan.models import ActiveJob, JobSpec

__all__ = [
    "Ladder",
    "LadderCache",
    "Ladders",
    "Plateau",
    "build_ladder",
    "max_useful_gpus",
    "useful_ladder",
]

Plateau = Literal["stop", "skip"]
"""What a count that does not raise throughput does to a ladder: end it, or be left out."""

Ladder = tuple[tuple[int, ...], tuple[float, ...]]
"""A job's ladder: the counts it may climb through and the throughput ``P`` at each."""


def build_ladder(spec: JobSpec, limit: int, plateau: Plateau = "stop") -> Ladder:
    """The counts ``spec`` may hold up to ``limit`` GPUs while throughput rises, and their rates.

    Follows the job's allowed counts upwards from the smallest (they never exceed its
    ``max_gpus``). A count whose rate is not strictly above the best so far (0 at first) ends
    the ladder with ``plateau="stop"`` (the default, AFS) and is left out with ``"skip"``
    (baselines); see the module docstring for when the two differ. Empty when not even the
    smallest allowed count fits under ``limit``.
    """
    if plateau not in ("stop", "skip"):
        raise ValueError(f"plateau must be 'stop' or 'skip', got {plateau!r}")
    stop = plateau == "stop"
    rate = spec.throughput.rate
    counts: list[int] = []
    rates: list[float] = []
    best = 0.0
    for c in spec.allowed_counts():
        if c > limit:
            break
        try:
            r = rate(c)
        except ValueError:  # unmeasured and not extrapolated: a rise cannot be confirmed
            break
        if r <= best:
            if stop:
                break
            continue
        counts.append(c)
        rates.append(r)
        best = r
    return tuple(counts), tuple(rates)


def useful_ladder(spec: JobSpec, limit: int) -> tuple[int, ...]:
    """Allowed counts up to ``min(max_gpus, limit)`` that each raise throughput (``"skip"``).

    The last element is the job's max useful count (the smallest count reaching the peak within
    the cap); empty when not even the smallest allowed count fits under ``limit``.
    """
    return build_ladder(spec, limit, "skip")[0]


def max_useful_gpus(spec: JobSpec, limit: int) -> int:
    """Smallest allowed count reaching the profile's peak, capped by ``max_gpus`` and ``limit``."""
    ladder = useful_ladder(spec, limit)
    return ladder[-1] if ladder else 0


class LadderCache:
    """Ladders per job, for one policy, rebuilt only when the spec object or the limit changes.

    Keyed by job id and validated against the spec *object*: specs are immutable, and the
    engine installs a new spec when it learns a job's throughput (AFS §4.5), which may move the
    peak, so that must rebuild the ladder. The limit is part of the key because loans and
    failures change the usable capacity. A ladder costs one profile evaluation per count (up to
    the cluster size for a linearly extrapolated profile), so equal inputs (profile, min, max,
    allowed counts, limit) share one built ladder: jobs of one model then share the very same
    tuples, which :func:`~.afs_l_fast.afs_l_shares` exploits by flattening each distinct ladder
    object once.
    """

    __slots__ = ("_built", "_cache", "plateau")

    def __init__(self, plateau: Plateau) -> None:
        if plateau not in ("stop", "skip"):
            raise ValueError(f"plateau must be 'stop' or 'skip', got {plateau!r}")
        self.plateau: Plateau = plateau
        self._cache: dict[str, tuple[int, JobSpec, object, Ladder]] = {}
        self._built: dict[object, Ladder] = {}

    def ladder(self, job: ActiveJob, limit: int) -> Ladder:
        """``job``'s counts and rates under ``limit`` GPUs (memoised)."""
        spec = job.spec
        hit = self._cache.get(spec.id)
        if hit is not None and hit[0] == limit and hit[1] is spec:
            return hit[3]
        allowed = spec.elasticity.allowed if spec.elasticity is not None else ()
        shape = spec.node_shape
        # The node shape filters the allowed counts (JobSpec.allowed_counts), so it is part of
        # the key: without it a job without a shape could be handed a shaped job's ladder.
        cut = None if shape is None else (shape.gpus_per_node, shape.max_nodes)
        key = (spec.throughput, spec.min_gpus, spec.max_gpus, allowed, cut, limit)
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = build_ladder(spec, limit, self.plateau)
        self._cache[spec.id] = (limit, spec, key, built)
        return built

    def ladders(self, jobs: Iterable[ActiveJob], limit: int) -> list[Ladder]:
        """``[self.ladder(job, limit) for job in jobs]`` with the cache hit inlined (AFS-L
        asks for every active job's ladder at every event)."""
        cache = self._cache
        out = []
        for job in jobs:
            spec = job.spec
            hit = cache.get(spec.id)
            if hit is not None and hit[0] == limit and hit[1] is spec:
                out.append(hit[3])
            else:
                out.append(self.ladder(job, limit))
        return out

    def __len__(self) -> int:
        """Jobs with a cached ladder (so a caller can tell when :meth:`prune` is due)."""
        return len(self._cache)

    def __call__(self, job: ActiveJob, limit: int) -> tuple[int, ...]:
        """``job``'s counts under ``limit`` GPUs (memoised)."""
        return self.ladder(job, limit)[0]

    def max_useful(self, job: ActiveJob, limit: int) -> int:
        """Top of ``job``'s ladder under ``limit`` (0 when it cannot run at all)."""
        counts = self.ladder(job, limit)[0]
        return counts[-1] if counts else 0

    def prune(self, alive: Iterable[str]) -> None:
        """Forget jobs not in ``alive`` once the cache holds more than twice as many."""
        keep = set(alive)
        if len(self._cache) > 2 * len(keep) + 64:
            self._cache = {k: v for k, v in self._cache.items() if k in keep}
            live = {v[2] for v in self._cache.values()}
            self._built = {k: v for k, v in self._built.items() if k in live}


class Ladders(LadderCache):
    """The baselines' cache of *useful* ladders (``plateau="skip"``): Max-Min, Optimus, Themis,
    SRTF-E/SRSF-E and the max-GPUs variants all step through (or run at the top of) these."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("skip")
