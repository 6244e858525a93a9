"""The ``pollux`` policy on Pollux's own workloads (issue 29 item 1).

Upstream's simulator (``petuum/adaptdl`` osdi21-artifact) records 2,088.769 s average JCT for
Pollux on ``workloads/workload-1.csv`` (16 x 4 T4, 60-s rounds). Ours must be within 10 % and,
on every workload, below both baselines Pollux compares against (its Tiresias and Optimus).
Numbers, commands and differences: docs/results/fidelity.md, "Pollux itself".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuplan.api import prepare, run
from gpuplan.cli import main
from gpuplan.models import InputError, ScenarioSpec
from gpuplan.scenarios.build import embedded_scenarios

pytestmark = [pytest.mark.traces, pytest.mark.usefixtures("traces")]

DOC = Path(__file__).resolve().parents[2] / "docs" / "results" / "fidelity.md"
UPSTREAM_W1 = 2088.769
"""Pollux's average JCT on workload 1 in its simulator (issue 29)."""


def _avg_jct(capsys: pytest.CaptureFixture[str], scenario: str, policy: str) -> float:
    code = main(["compare", "--scenario", scenario, "--policies", policy, "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    (row,) = json.loads(out)
    assert row["unfinished"] == 0 and row["jobs"] == 160
    return float(row["avg_jct_s"])


@pytest.mark.slow
def test_pollux_workload1_within_10_percent_and_pinned(capsys) -> None:
    ours = _avg_jct(capsys, "pollux-w1", "pollux")
    assert ours == pytest.approx(UPSTREAM_W1, rel=0.10)
    assert ours == pytest.approx(2102.493, abs=5e-3)  # measured, docs/results/fidelity.md


@pytest.mark.slow
def test_pollux_workload1_with_60s_rounds() -> None:
    """Pollux's own cadence: decisions only at 60-s round boundaries; still within 10 %."""
    path = embedded_scenarios()["pollux-w1"]
    import yaml

    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["engine"] = {"round_interval_s": 60, "decide_only_at_rounds": True}
    result = run(prepare(ScenarioSpec.model_validate(doc)), "pollux")
    jcts = [j.jct for j in result.jobs]
    assert None not in jcts and len(jcts) == 160
    avg = sum(jcts) / len(jcts)  # type: ignore[arg-type]
    assert avg == pytest.approx(UPSTREAM_W1, rel=0.10)
    assert avg == pytest.approx(2119.662, abs=5e-3)  # measured
    assert sum(j.resizes for j in result.jobs) > 0  # it does re-allocate


@pytest.mark.slow
def test_documented_pollux_commands_print_the_documented_numbers(capsys) -> None:
    """Every ``gpuplan compare --scenario pollux-w<N>[-rigid|-elastic] ...`` command in the
    fidelity doc prints (``avg_jct_s``, 3 decimals) its row's number, and on every workload
    ``pollux`` beats both of Pollux's baselines."""
    text = DOC.read_text(encoding="utf-8")
    rows = re.findall(
        r"`gpuplan compare --scenario (pollux-w\d(?:-rigid|-elastic)?) --policies (\S+) --json`"
        r"\s*\|\s*prints (\d+\.\d{3})\s*\|",
        text,
    )
    assert len(rows) >= 12, "the doc must name the commands (see this test's pattern)"
    by_workload: dict[str, dict[str, float]] = {}
    for scenario, policy, number in rows:
        got = round(_avg_jct(capsys, scenario, policy), 3)
        assert got == float(number), (scenario, policy)
        by_workload.setdefault(scenario[:9], {})[policy] = got
    for workload, numbers in by_workload.items():
        assert set(numbers) == {"pollux", "optimus", "pollux-tiresias"}, workload
        assert numbers["pollux"] < min(numbers["optimus"], numbers["pollux-tiresias"]), workload


def test_goodput_mapping_jobs_carry_their_model() -> None:
    prepared = prepare(ScenarioSpec.model_validate(_spec("goodput", max_jobs=20)))
    by_id = {j.id: j for j in prepared.jobs}
    cifar = by_id["cifar10-0"]
    assert cifar.goodput is not None and cifar.elasticity is not None
    assert cifar.elasticity.max_gpus == 16  # min(64, 4096 // 32), capped at the 16 GPUs
    assert cifar.total_iterations == pytest.approx(cifar.goodput.work)
    ncf = next(j for j in prepared.jobs if j.model == "ncf")
    assert ncf.elasticity.max_gpus == 1 and ncf.goodput.fixed_batch == 32768  # type: ignore[union-attr]


@pytest.mark.slow
def test_pollux_run_is_deterministic() -> None:
    """No random choice and no time limit inside the policy: two runs give the same JCTs."""
    prepared = prepare(ScenarioSpec.model_validate(_spec("goodput", max_jobs=20)))
    first = run(prepared, "pollux")
    again = run(prepared, "pollux")
    assert [(j.job_id, j.jct) for j in first.jobs] == [(j.job_id, j.jct) for j in again.jobs]
    assert all(j.jct is not None for j in first.jobs)


def test_goodput_mapping_needs_pollux_rows(capsys, tmp_path: Path) -> None:
    spec = {
        "name": "bad",
        "cluster": {"nodes": 2, "gpus_per_node": 4},
        "workload": {"source": "tiresias", "path": "tiresias/60_job.csv", "mapping": "goodput"},
    }
    with pytest.raises(InputError, match=r"workload\.mapping"):
        prepare(ScenarioSpec.model_validate(spec))
    path = tmp_path / "bad.yaml"
    import yaml

    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    code = main(["simulate", "--scenario", str(path), "--policy", "pollux"])
    _, err = capsys.readouterr()
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "workload.mapping" in err


def _spec(mapping: str, max_jobs: int) -> dict[str, object]:
    return {
        "name": "p",
        "cluster": {"nodes": 4, "gpus_per_node": 4, "gpu_type": "t4"},
        "workload": {
            "source": "pollux",
            "path": "pollux/workloads/workload-1.csv",
            "mapping": mapping,
            "max_jobs": max_jobs,
        },
        "overheads": {"start_s": 30, "restart_s": 30, "migrate_s": 30, "preempt_s": 0},
    }


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_pollux_beats_both_baselines_at_half_load(n: int) -> None:
    """``workloads-0.5`` (80 jobs each): ``pollux`` below Pollux's Tiresias and Optimus. The
    1.5x, 2.0x and realistic-request sets were measured once (docs/results/fidelity.md)."""
    avg = {}
    for mapping, policy in (
        ("goodput", "pollux"),
        ("rigid", "pollux-tiresias"),
        ("elastic", "optimus"),
    ):
        spec = _spec(mapping, max_jobs=1000)
        spec["cluster"] = {"nodes": 16, "gpus_per_node": 4, "gpu_type": "t4"}
        spec["workload"]["path"] = f"pollux/workloads-0.5/workload-{n}.csv"  # type: ignore[index]
        spec["policies"] = {
            "pollux-tiresias": {"base": "tiresias-l", "thresholds": [57600], "promote_knob": None}
        }
        result = run(prepare(ScenarioSpec.model_validate(spec)), policy)
        jcts = [j.jct for j in result.jobs]
        assert len(jcts) == 80 and None not in jcts
        avg[policy] = sum(jcts) / len(jcts)  # type: ignore[arg-type]
    assert avg["pollux"] < min(avg["optimus"], avg["pollux-tiresias"]), avg
