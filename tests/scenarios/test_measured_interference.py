"""A measured co-location table in ``simulator.interference`` (issue 26 item 5).

Parsing (good and hostile tables: one line naming the file and the field, exit 2), the replay
(a measured group slows its jobs by exactly the measured factor, in the model and in a whole
simulation), the embedded H200 table and its example scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan import api
from gpuplan.cli import main
from gpuplan.models import InputError, JobRecord, JobSpec, ScenarioSpec
from gpuplan.models.measured_interference import MeasuredInterference, MeasuredTable
from gpuplan.models.scenario import SimulatorSpec
from gpuplan.scenarios.build import resolve_scenario
from gpuplan.scenarios.measured_tables import h200_runs, measured_table

TABLE = """    measured:
      source: a test table
      jobs: {a: 100.0, b: 50.0}
      groups:
        - {models: [a, b], slowdowns: [1.25, 1.75]}
        - {models: [a, a], slowdowns: [1.5, 1.5]}
        - {models: [b, b], slowdowns: [2.0, 2.0]}
        - {models: [a, b, b], slowdowns: [3.0, 2.5, 2.5]}
"""


def _scenario(tmp_path: Path, interference: str, jobs: str | None = None) -> str:
    """One GPU; job ``x`` (model a, 100 it/s alone, 10,000 iterations) and ``y`` (model b,
    50 it/s, long) co-located from t=0 by fifo-ojpp (their alphas sum to 0.6)."""
    jobs = jobs or (
        "    - {id: x, submit_time: 0, requested_gpus: 1, total_iterations: 10000, model: a, "
        "throughput: {points: {1: 100.0}}, memory: {gamma: 0.1, delta: 0, p: 0, compute: 0.3}}\n"
        "    - {id: y, submit_time: 0, requested_gpus: 1, total_iterations: 1000000, model: b, "
        "throughput: {points: {1: 50.0}}, memory: {gamma: 0.1, delta: 0, p: 0, compute: 0.3}}\n"
    )
    text = (
        "name: measured-test\nseed: 0\ncluster: {nodes: 1, gpus_per_node: 1}\n"
        "overheads: {start_s: 0}\n"
        f"simulator:\n  interference:\n{interference}"
        f"workload:\n  source: inline\n  inline_jobs:\n{jobs}"
    )
    path = tmp_path / "measured.scenario.yaml"
    path.write_text(text)
    return str(path)


def _spec(model: str, n: int = 0) -> JobSpec:
    return JobSpec(
        id=f"{model}{n}", submit_time=0, requested_gpus=1, total_iterations=1.0, model=model
    )


def _jobs(path: str | ScenarioSpec, policy: str = "fifo-ojpp") -> dict[str, JobRecord]:
    return {j.job_id: j for j in api.run(api.prepare(path), policy).jobs}


def test_a_measured_group_is_replayed_exactly_in_a_simulation(tmp_path) -> None:
    jobs = _jobs(_scenario(tmp_path, TABLE))
    # x trains next to y the whole time: 10,000 iterations at 100 it/s / 1.25
    assert jobs["x"].first_start == 0.0
    assert jobs["x"].finish_time == pytest.approx(100.0 * 1.25, rel=1e-9)
    # without the block the same two jobs run at full speed (alpha covers their share)
    free = _jobs(_scenario(tmp_path, "    null\n"))
    assert free["x"].finish_time == pytest.approx(100.0, rel=1e-9)


def test_the_model_replays_every_measured_group_and_composes_the_rest() -> None:
    table = MeasuredTable.model_validate(
        {
            "jobs": {"a": 100.0, "b": 50.0, "c": 10.0},
            "groups": [
                {"models": list(p), "slowdowns": list(s)}
                for p, s in (
                    (("a", "b"), (1.25, 1.75)),
                    (("a", "a"), (1.5, 1.4)),
                    (("b", "b"), (2.0, 2.0)),
                    (("c", "a"), (1.1, 1.2)),
                    (("b", "c"), (1.3, 1.05)),
                    (("c", "c"), (1.01, 1.03)),
                    (("b", "a", "b"), (3.0, 2.5, 2.5)),
                )
            ],
        }
    )
    for composition in ("additive", "max", "multiplicative"):
        model = MeasuredInterference(table, composition)  # type: ignore[arg-type]
        a, b, c = _spec("a"), _spec("b"), _spec("c")
        assert model.slowdown(a, [b]) == 1.25 and model.slowdown(b, [a]) == 1.75
        assert model.slowdown(c, [a]) == 1.1 and model.slowdown(a, [c]) == 1.2
        assert model.factor(b, [c]) == 1 / 1.3
        assert model.slowdown(a, [_spec("a", 1)]) == pytest.approx(1.45)  # copies: their mean
        assert model.slowdown(a, [b, _spec("b", 1)]) == 2.5  # the measured triple, any order
        assert model.slowdown(b, [_spec("b", 1), a]) == 2.75  # b's two copies: their mean
    # an unmeasured triple composes the measured pair terms
    additive = MeasuredInterference(table, "additive")
    assert additive.slowdown(_spec("a"), [_spec("b"), _spec("c")]) == pytest.approx(1 + 0.25 + 0.2)
    assert MeasuredInterference(table, "max").slowdown(
        _spec("a"), [_spec("b"), _spec("c")]
    ) == pytest.approx(1.25)
    assert MeasuredInterference(table, "multiplicative").slowdown(
        _spec("a"), [_spec("b"), _spec("c")]
    ) == pytest.approx(1.25 * 1.2)


def test_the_h200_table_is_embedded_with_both_repetitions() -> None:
    run1, run2 = h200_runs()
    assert (run1.name, run2.name) == ("run1", "run2")
    for run in (run1, run2):
        assert sorted(run.table.jobs) == ["lstm", "mlp", "resnet18", "resnet50", "transformer"]
        assert sum(len(g.models) == 2 for g in run.table.groups) == 15
        assert sum(len(g.models) == 3 for g in run.table.groups) == 4
        assert "2026-11-27" in run.table.source and "H200" in run.table.source
    # the README's figures (rounded there)
    pair = {g.models: g.slowdowns for g in run1.table.groups}
    assert [round(v, 2) for v in pair[("resnet18", "mlp")]] == [1.24, 1.90]
    assert [round(v, 2) for v in pair[("resnet50", "transformer", "lstm")]] == [2.91, 2.01, 2.77]
    assert round(run2.table.jobs["resnet18"], 2) == 41.22 and run1.util["mlp"] == 0.13675
    # table h200 replays their mean, job by job
    mean = MeasuredInterference(measured_table("h200"))
    for g1, g2 in zip(run1.table.groups, run2.table.groups, strict=True):
        specs = [_spec(m, n) for n, m in enumerate(g1.models)]
        for n, spec in enumerate(specs):
            if g1.models.count(spec.model) == 1:
                want = (g1.slowdowns[n] + g2.slowdowns[n]) / 2
                assert mean.slowdown(spec, specs[:n] + specs[n + 1 :]) == pytest.approx(want)
        for run, g in ((run1, g1), (run2, g2)):  # each repetition's own table: exact
            model = MeasuredInterference(run.table)
            for n, spec in enumerate(specs):
                if g.models.count(spec.model) == 1:
                    assert model.slowdown(spec, specs[:n] + specs[n + 1 :]) == g.slowdowns[n]


def test_the_example_scenario_replays_the_h200_table() -> None:
    spec, _ = resolve_scenario("h200-colocation")
    assert spec.simulator.interference is not None
    assert spec.simulator.interference.table == "h200"
    replayed = _jobs(spec)
    free = _jobs(spec.model_copy(update={"simulator": SimulatorSpec()}))
    assert all(j.finish_time is not None for j in replayed.values())
    assert all(j.finish_time is not None for j in free.values())
    # fifo-ojpp co-locates, and the measured table slows the co-located jobs
    assert sum(j.jct for j in replayed.values()) > 1.05 * sum(j.jct for j in free.values())
    # fifo never shares a GPU: the table changes nothing there
    assert {k: j.jct for k, j in _jobs(spec, "fifo").items()} == {
        k: j.jct
        for k, j in _jobs(spec.model_copy(update={"simulator": SimulatorSpec()}), "fifo").items()
    }


def test_a_sweep_style_dump_and_reload_keeps_a_measured_block() -> None:
    spec, _ = resolve_scenario("h200-colocation")
    again = ScenarioSpec.model_validate(spec.model_dump(mode="json", exclude_unset=False))
    assert again.simulator == spec.simulator
    inline = spec.model_copy(deep=True)
    data = inline.model_dump(mode="json")
    data["simulator"]["interference"] = {"measured": measured_table("h200").model_dump(mode="json")}
    reloaded = ScenarioSpec.model_validate(data)
    twice = ScenarioSpec.model_validate(reloaded.model_dump(mode="json"))
    assert twice.simulator == reloaded.simulator
    assert twice.simulator.interference is not None
    assert twice.simulator.interference.measured == measured_table("h200")


def _groups(*rows: str) -> str:
    return "    measured:\n      jobs: {a: 100.0, b: 50.0}\n      groups:\n" + "".join(
        f"        - {r}\n" for r in rows
    )


_OK = (
    "{models: [a, b], slowdowns: [1.25, 1.75]}",
    "{models: [a, a], slowdowns: [1.5, 1.5]}",
    "{models: [b, b], slowdowns: [2.0, 2.0]}",
)

BAD = {
    "faster than alone": (
        _groups("{models: [a, b], slowdowns: [0.9, 1.75]}", *_OK[1:]),
        "is not in [1, 100]",
    ),
    "non-finite": (
        _groups("{models: [a, b], slowdowns: [.nan, 1.75]}", *_OK[1:]),
        "simulator.interference.measured.groups.0.slowdowns.0",
    ),
    "infinite": (
        _groups("{models: [a, b], slowdowns: [.inf, 1.75]}", *_OK[1:]),
        "simulator.interference.measured.groups.0.slowdowns.0",
    ),
    "huge": (_groups("{models: [a, b], slowdowns: [1e300, 1.75]}", *_OK[1:]), "is not in [1, 100]"),
    "string": (
        _groups("{models: [a, b], slowdowns: [fast, 1.75]}", *_OK[1:]),
        "simulator.interference.measured.groups.0.slowdowns.0",
    ),
    "count mismatch": (
        _groups("{models: [a, b], slowdowns: [1.25, 1.5, 1.5]}", *_OK[1:]),
        "2 models but 3 slowdowns",
    ),
    "one job": (
        _groups("{models: [a], slowdowns: [1.25]}", *_OK),
        "simulator.interference.measured.groups.0.models",
    ),
    "unmeasured model": (
        _groups(*_OK, "{models: [a, c], slowdowns: [1.2, 1.2]}"),
        "groups[3]: model(s) c have no solo rate",
    ),
    "twice": (
        _groups(*_OK, "{models: [b, a], slowdowns: [1.7, 1.2]}"),
        "groups[3] measures a + b again (first at groups[0])",
    ),
    "missing pair": (_groups(*_OK[:2]), "the pair b + b is not measured"),
    "zero rate": (
        "    measured:\n      jobs: {a: 0.0, b: 50.0}\n      groups:\n"
        + "".join(f"        - {r}\n" for r in _OK),
        "solo rate 0.0 of 'a'",
    ),
    "unknown field": (
        _groups(*_OK).replace("      jobs:", "      runs: 2\n      jobs:"),
        "simulator.interference.measured.runs",
    ),
    "no groups": (
        "    measured: {jobs: {a: 1.0}, groups: []}\n",
        "simulator.interference.measured.groups",
    ),
    "table and measured": ("    table: h200\n" + _groups(*_OK), "exactly one of"),
    "collisions": (_groups(*_OK) + "    collisions: true\n", "apply to a matrix"),
    "kappa on h200": ("    {table: h200, kappa: 2.0}\n", "apply to a matrix"),
    "job model not measured": (
        _groups(*_OK)
        .replace("{a: 100.0, b: 50.0}", "{a: 1.0, d: 1.0}")
        .replace("[a, b]", "[a, d]")
        .replace("[b, b]", "[d, d]"),
        "job y's model 'b' was not measured (models: a, d)",
    ),
    "job not in h200": ("    {table: h200}\n", "job x's model 'a' was not measured"),
    "mapping": ("    measured: [1, 2]\n", "simulator.interference.measured"),
    "long name": (
        _groups(*_OK).replace("{a: 100.0,", "{" + "z" * 300 + ": 1.0, a: 100.0,"),
        "is not 1-200 characters",
    ),
    "17 jobs": (
        _groups(
            *_OK,
            "{models: ["
            + ", ".join(["a"] * 17)
            + "], slowdowns: ["
            + ", ".join(["2.0"] * 17)
            + "]}",
        ),
        "simulator.interference.measured.groups.3.models",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_measured_table_is_one_line_and_exit_2(capsys, tmp_path, case) -> None:
    block, expected = BAD[case]
    path = _scenario(tmp_path, block)
    code = main(["simulate", "--scenario", path, "--policy", "fifo-ojpp"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert path in lines[0] and expected in lines[0], lines[0]
    assert "simulator.interference" in lines[0]


def test_a_job_without_a_model_is_refused() -> None:
    table = measured_table("h200")
    assert table.jobs
    from gpuplan.models.scenario import SimInterferenceSpec
    from gpuplan.scenarios.sim_interference import simulator_interference

    spec = SimInterferenceSpec(table="h200")
    anon = JobSpec(id="anon", submit_time=0, requested_gpus=1, total_iterations=1.0)
    with pytest.raises(InputError, match="job anon has no model"):
        simulator_interference(spec, [anon], 0, "s.yaml")
