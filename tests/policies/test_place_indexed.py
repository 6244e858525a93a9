"""Best fit of the AFS stages' changed jobs with the engine's free-count index (round 7e).

``place_changed`` places the growing and new jobs with ``_place_indexed`` (the view's
free-count index) where it can, and with ``_place`` (a copy of ``view.free``, node names
sorted, every node scanned per job) otherwise. Both must give the same allocations in the same
order: here every call of ``_place_indexed`` during simulated AFS runs is compared with
``_place`` on the same view, and the index must be back as it was afterwards. The runs are
sized so that growing jobs take GPUs on the nodes they hold, jobs span several nodes (the
"fullest node" branch), growing jobs find too few GPUs and shrinking or stopping jobs release
GPUs that others take in the same decision.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster, ClusterView, Node
from gpuplan.solver_core import change_verify
from gpuplan.solver_core.placement import best_fit
from gpuplan.solver_core.registry import make_policy
from tests.bench.afs_scale import workload

_MIXED = Cluster(
    nodes=[Node(name=f"m{i}", gpus=g) for i, g in enumerate([8, 4, 8, 2, 4, 8, 8, 4, 8, 2])]
)
"""Nodes of different sizes (one GPU type): the index's buckets hold several counts."""


class _Compared:
    """Wraps ``_place_indexed``: each answer checked against ``_place``; counts what ran."""

    def __init__(self, original: Any) -> None:
        self.original = original
        self.calls = self.grown_in_place = self.spanning = self.kept = self.released = 0

    def __call__(
        self,
        view: ClusterView,
        grow: list[tuple[str, int]],
        new: list[tuple[str, int]],
        released: dict[str, list[int]],
    ) -> Any:
        got = self.original(view, list(grow), list(new), released)
        assert got is not None  # one GPU type, one rack, no shapes: always indexed here
        index = view.free_index
        assert index is not None
        index.check(view.free)  # put back as it was
        want = best_fit._place(view, list(grow), list(new), released, {})
        assert list(got.items()) == list(want.items())  # same allocations, same order
        self.calls += 1
        self.released += bool(released)
        for job_id, _ in grow:
            before = view.running[job_id].allocation
            assert before is not None
            after = got[job_id]
            if after is before:
                self.kept += 1
            elif any(len(after.placement[n]) > len(g) for n, g in before.placement.items()):
                self.grown_in_place += 1
        self.spanning += sum(len(a.placement) > 1 for a in got.values())
        return got


@pytest.mark.parametrize("verify", [True, False], ids=["verify", "plain"])
@pytest.mark.parametrize(
    ("policy", "cluster", "active"),
    [
        ("afs-l", Cluster.uniform(8, 8), 20),
        ("afs-l", _MIXED, 20),
        ("afs-p", Cluster.uniform(4, 4), 40),  # time slicing: starts and stops, no resizes
    ],
    ids=["afs-l-uniform", "afs-l-mixed", "afs-p"],
)
def test_indexed_placement_equals_best_fit_at_every_call(
    monkeypatch: pytest.MonkeyPatch, verify: bool, policy: str, cluster: Cluster, active: int
) -> None:
    monkeypatch.setattr(change_verify, "VERIFY", verify)
    compared = _Compared(best_fit._place_indexed)
    monkeypatch.setattr(best_fit, "_place_indexed", compared)
    jobs = workload(active, 80, seed=5)
    result, _, _ = simulate(
        cluster, jobs, make_policy(policy), sample_interval_s=None, horizon_s=60 * 3600.0
    )
    assert len(result.jobs) == len(jobs)
    assert compared.calls >= 100
    assert compared.released >= 10  # shrinks and stops handing GPUs to the same decision
    if policy == "afs-l":
        assert compared.spanning >= 10  # jobs over several nodes: the index's "fullest" node
        assert compared.grown_in_place >= 10  # growing jobs first take their own nodes
