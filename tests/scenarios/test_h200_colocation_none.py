"""``h200-colocation-none`` is ``h200-colocation`` without its interference block
(docs/results/interference.md compares fifo-ojpp's packing with and without the measured
slowdowns on the same jobs)."""

from __future__ import annotations

from gpuplan import api


def test_the_none_twin_has_the_same_jobs_and_cluster_without_interference() -> None:
    measured = api.prepare("h200-colocation")
    none = api.prepare("h200-colocation-none")
    assert none.jobs == measured.jobs and len(none.jobs) == 8
    assert none.cluster == measured.cluster
    assert none.spec.seed == measured.spec.seed
    assert measured.spec.simulator.interference is not None
    assert none.spec.simulator.interference is None
