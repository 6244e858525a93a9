"""Gavel as Gavel runs it (issue 29 item 4): ``workload.throughputs``, ``gavel-fifo`` and
``max-min-agnostic`` on the embedded ``gavel-artifact`` scenario.

Reference numbers are what Gavel's own simulator prints (``stanford-futuredata/gavel`` at
c4fa400, ``scripts/drivers/simulate_scheduler_with_trace.py`` logic: ``Scheduler(simulate=True,
time_per_iteration=360, throughputs_file=physical_cluster_throughputs.json)`` on
``artifact_evaluation.trace``, cluster ``2:0:4``, one GPU per server, ``--seed 0``):
6,517.164 s average JCT and 8,982.909 s makespan for ``fifo``, the same for every seed. How
they come about, and each remaining difference, is in docs/results/fidelity.md, "Gavel".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan import plan
from gpuplan.api import prepare
from gpuplan.cli import main
from gpuplan.models import Cluster, ClusterState, JobSnapshot, JobSpec, Node

pytestmark = [pytest.mark.traces, pytest.mark.usefixtures("traces")]

GAVEL_FIFO_AVG_S = 6517.164
GAVEL_FIFO_MAKESPAN_S = 8982.909
FIXED_UPSTREAM = {0: (6668.787, 19286.083), 1: (6438.995, 17091.038), 2: (6930.675, 18924.850)}
"""Gavel's simulator with its FIFO's drawn type actually used (one line added to
``FIFOPolicy.get_allocation``: ``worker_type = available_worker_types_with_scale_factor[
worker_type_idx]``): (average JCT, makespan) per ``--seed``."""


def _summary(policies: str, seed: int = 0) -> dict[str, dict[str, float]]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            ["compare", "--scenario", "gavel-artifact", "--policies", policies,
             "--seeds", str(seed), "--json"]
        )  # fmt: skip
    assert code == 0
    rows = json.loads(out.getvalue())
    assert all(r["unfinished"] == 0 for r in rows)
    return {r["policy"]: r for r in rows}


def test_gavel_fifo_as_shipped_meets_the_issue_goal() -> None:
    """Within 10 % of Gavel's average JCT and 15 % of its makespan; our numbers pinned."""
    got = _summary("gavel-fifo-shipped")["gavel-fifo-shipped"]
    assert got["avg_jct_s"] == pytest.approx(GAVEL_FIFO_AVG_S, rel=0.10)
    assert got["makespan_s"] == pytest.approx(GAVEL_FIFO_MAKESPAN_S, rel=0.15)
    assert got["avg_jct_s"] == pytest.approx(6197.746, abs=5e-3)
    assert got["makespan_s"] == pytest.approx(8481.753, abs=5e-3)


def test_as_shipped_does_not_depend_on_the_seed() -> None:
    """Upstream draws a type but never reads it: every seed gives the same run."""
    a = _summary("gavel-fifo-shipped", seed=0)["gavel-fifo-shipped"]
    b = _summary("gavel-fifo-shipped", seed=3)["gavel-fifo-shipped"]
    assert (a["avg_jct_s"], a["makespan_s"]) == (b["avg_jct_s"], b["makespan_s"])


@pytest.mark.parametrize(
    ("seed", "avg", "makespan"),
    [(0, 6517.834, 19603.134), (1, 5979.030, 16718.623), (2, 6634.157, 18920.325)],
)
def test_gavel_fifo_random_type_against_fixed_upstream(
    seed: int, avg: float, makespan: float
) -> None:
    """The seeded random type as the code intends: within 10 % (average) and 15 % (makespan)
    of Gavel's simulator with the draw used, per seed; ours pinned."""
    got = _summary("gavel-fifo", seed=seed)["gavel-fifo"]
    want_avg, want_makespan = FIXED_UPSTREAM[seed]
    assert got["avg_jct_s"] == pytest.approx(want_avg, rel=0.10)
    assert got["makespan_s"] == pytest.approx(want_makespan, rel=0.15)
    assert (got["avg_jct_s"], got["makespan_s"]) == pytest.approx((avg, makespan), abs=5e-3)


def _state(n_jobs: int) -> ClusterState:
    nodes = [Node(name="v100", gpus=2, gpu_type="v100"), Node(name="k80", gpus=4, gpu_type="k80")]
    jobs = [
        JobSnapshot(spec=JobSpec(id=f"j{i}", submit_time=0, requested_gpus=1, duration=600))
        for i in range(n_jobs)
    ]
    return ClusterState(now=0, cluster=Cluster(nodes=nodes), jobs=jobs)


def _types(p) -> set[str]:  # type: ignore[no-untyped-def]
    return {node for a in p.allocations.values() for node in a.placement}


def test_as_shipped_puts_every_job_on_the_last_type_by_name() -> None:
    """Six 1-GPU jobs on 2 V100 + 4 K80: as shipped, only the V100s run (two jobs); with
    the draw used, the K80s run jobs too and all six start."""
    shipped = plan(_state(6), "gavel-fifo(type_choice=as-shipped)", include_keep=False)
    assert _types(shipped) == {"v100"} and len(shipped.allocations) == 2
    drawn = plan(_state(6), "gavel-fifo", include_keep=False)
    assert _types(drawn) == {"v100", "k80"} and len(drawn.allocations) == 6


def test_max_min_agnostic_lp_is_max_min_perf_on_one_gpu_type() -> None:
    """With a single GPU type the normalised LP is the same problem (throughput cancels
    against the equal-share throughput), so the max-min value is the same; on 2 V100 + 4 K80
    the heterogeneity-aware LP does better (runs pinned)."""
    from gpuplan.solver_core.policies.baselines.maxmin_perf import solve_allocation

    rates = {"a": {"v100": 3.0}, "b": {"v100": 0.5}, "c": {"v100": 7.25}}
    scale = {"a": 1, "b": 2, "c": 1}
    perf = solve_allocation(rates, scale, {"v100": 4})
    ones = solve_allocation({j: {"v100": 1.0} for j in rates}, scale, {"v100": 4})
    assert perf.z == pytest.approx(ones.z, rel=1e-9) and perf.z > 0
    hetero = {
        "a": {"v100": 3.0, "k80": 1.0},
        "b": {"v100": 0.5, "k80": 0.4},
        "c": {"v100": 7.25, "k80": 1.0},
    }
    aware = solve_allocation(hetero, scale, {"v100": 2, "k80": 4})
    blind = solve_allocation(
        {j: {"v100": 1.0, "k80": 1.0} for j in hetero}, scale, {"v100": 2, "k80": 4}
    )
    assert aware.z > 0 and blind.x != aware.x
    rows = _summary("max-min-perf,max-min-agnostic")
    assert rows["max-min-perf"]["avg_jct_s"] == pytest.approx(3728.592, abs=5e-3)
    assert rows["max-min-agnostic"]["avg_jct_s"] == pytest.approx(4863.435, abs=5e-3)


def test_workload_throughputs_picks_the_table() -> None:
    """``gavel-artifact`` reads physical_cluster_throughputs.json: ResNet-18 (batch 128) runs
    22.372 steps/s on a V100 there, 17.995 in the default simulation table."""
    jobs = {j.id: j for j in prepare("gavel-artifact").jobs}
    rn18 = jobs["gavel-artifact_evaluation-3"]
    assert rn18.model == "ResNet-18 (batch size 128)"
    assert rn18.throughput.rate(1) == pytest.approx(22.372, abs=1e-3)
    from gpuplan.models import ScenarioSpec

    spec = prepare("gavel-artifact").spec
    default = spec.model_copy(
        update={"workload": spec.workload.model_copy(update={"throughputs": None})}
    )
    jobs = {j.id: j for j in prepare(ScenarioSpec.model_validate(default.model_dump())).jobs}
    assert jobs["gavel-artifact_evaluation-3"].throughput.rate(1) == pytest.approx(17.995, abs=1e-3)


@pytest.mark.parametrize(
    ("workload", "needle"),
    [
        ("{source: philly, vc: 2869ce, throughputs: gavel/physical_cluster_throughputs.json}",
         "throughputs (Gavel's throughput table) needs source: gavel"),
        ("{source: gavel, path: gavel/physical_cluster/artifact_evaluation.trace, "
         "throughputs: gavel/no-such-table.json}", "no-such-table.json"),
    ],
)  # fmt: skip
def test_bad_throughputs_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workload: str, needle: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\ncluster: {{nodes: 1, gpus_per_node: 8}}\nworkload: {workload}\n")
    code = main(["simulate", "--scenario", str(path), "--policy", "fifo"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err
