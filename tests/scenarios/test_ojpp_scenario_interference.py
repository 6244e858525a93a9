"""A scenario's ``simulator.interference`` block from the command line (issue 10 item 5).

The embedded ``ojpp-<queue>`` scenarios declare the true interference of the simulated cluster;
``gpuplan simulate``/``compare`` must then charge co-location (matrix + drawn collisions) and
let OJPAP migrate, while every scenario without the block runs exactly as before."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpuplan import api
from gpuplan.cli import main
from gpuplan.scenarios.build import embedded_scenarios, resolve_scenario
from gpuplan.scenarios.ojpp_workloads import QUEUES, scenario_text, workload

TIMING = ("decision_", "wall_s", "jobs_per_s", "solver_p")
BLOCK = "  interference: {table: ojpp, composition: additive, collisions: true, kappa: 1.0}"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _results(summary: dict) -> dict:
    """A run's summary without its wall-clock fields (those vary run to run)."""
    return {k: v for k, v in summary.items() if not k.startswith(TIMING)}


def _scenario(tmp_path: Path, queue: str, block: str | None) -> str:
    """``ojpp-<queue>`` written to a file with its simulator block replaced (None: removed)."""
    text = scenario_text(queue)
    assert BLOCK in text
    text = text.replace("simulator:\n" + BLOCK + "\n", "" if block is None else block)
    path = tmp_path / f"ojpp-{queue}.scenario.yaml"
    path.write_text(text)
    return str(path)


def test_interference_slows_fifo_ojpp_above_the_standalone_mean(capsys, tmp_path) -> None:
    standalone = statistics.fmean(j.standalone_s for j in workload("c-high"))
    with_block = _json(
        capsys, "simulate", "--scenario", "ojpp-c-high", "--policy", "fifo-ojpp", "--json"
    )
    without = _json(
        capsys,
        "simulate",
        "--scenario",
        _scenario(tmp_path, "c-high", None),
        "--policy",
        "fifo-ojpp",
        "--json",
    )
    assert with_block["finished"] == without["finished"] == 20
    # without the block co-location is free: fifo-ojpp beats the 4.8 h standalone mean only by
    # ... nothing: its JCTs are standalone times plus a little queueing
    assert without["avg_jct_s"] < standalone * 1.05
    # with it, every shared worker pays the matrix (LeNet/LSTM 6-18 %) plus collisions
    assert with_block["avg_jct_s"] > standalone * 1.08
    assert with_block["avg_jct_s"] > without["avg_jct_s"] * 1.05


def test_equal_seeds_identical_and_seeds_differ_only_through_collisions(capsys, tmp_path) -> None:
    def run(scenario: str, seed: int) -> dict:
        return _results(
            _json(
                capsys,
                "simulate",
                "--scenario",
                scenario,
                "--policy",
                "fifo-ojpp",
                "--seed",
                str(seed),
                "--json",
            )
        )

    a, b, c = run("ojpp-c-high", 3), run("ojpp-c-high", 3), run("ojpp-c-high", 4)
    assert a == b
    assert a["avg_jct_s"] != c["avg_jct_s"]  # different draws of the collisions
    quiet = _scenario(
        tmp_path, "c-high", "simulator:\n  interference: {table: ojpp, collisions: false}\n"
    )
    q3, q4 = run(quiet, 3), run(quiet, 4)
    # without collisions the seed enters nothing: identical apart from the seed itself
    assert {**q3, "seed": 0} == {**q4, "seed": 0}
    # and the matrix alone is charged: the drawn collisions only add to it
    assert q3["avg_jct_s"] < a["avg_jct_s"]


BAD_BLOCKS = {
    "negative": (
        "{matrix: {LeNet: {LeNet: -0.1, LSTM: 0.1}, LSTM: {LeNet: 0.1, LSTM: 0.1}}}",
        "simulator.interference.matrix.LeNet.LeNet",
    ),
    "non-finite": (
        "{matrix: {LeNet: {LeNet: .nan, LSTM: 0.1}, LSTM: {LeNet: 0.1, LSTM: 0.1}}}",
        "simulator.interference.matrix.LeNet.LeNet",
    ),
    "missing pair": (
        "{matrix: {LeNet: {LeNet: 0.1, LSTM: 0.1}, LSTM: {LSTM: 0.1}}}",
        "lacks the pair(s) LeNet",
    ),
    "unknown type": (
        "{matrix: {LeNet: {LeNet: 0.1, LSTM: 0.1, Foo: 0.1}, LSTM: {LeNet: 0.1, "
        "LSTM: 0.1, Foo: 0.1}, Foo: {LeNet: 0.1, LSTM: 0.1, Foo: 0.1}}}",
        "Foo are no job's model",
    ),
    "job without a row": ("{matrix: {LeNet: {LeNet: 0.1}}}", "model 'LSTM' has no row"),
    "unknown table": ("{table: gavel2}", "simulator.interference.table"),
    "table and matrix": ("{table: ojpp, matrix: {LeNet: {LeNet: 0.1}}}", "exactly one of"),
    "unknown field": ("{table: ojpp, colisions: true}", "simulator.interference.colisions"),
}


@pytest.mark.parametrize("case", sorted(BAD_BLOCKS))
def test_a_bad_interference_block_is_one_line_and_exit_2(capsys, tmp_path, case) -> None:
    block, expected = BAD_BLOCKS[case]
    path = _scenario(tmp_path, "c-high", f"simulator:\n  interference: {block}\n")
    code = main(["simulate", "--scenario", path, "--policy", "fifo-ojpp"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert path in lines[0] and expected in lines[0]
    assert "simulator.interference" in lines[0]


@pytest.mark.parametrize("queue", ["c-high", "mixed"])
def test_ojpap_migrates_from_the_cli(capsys, queue: str) -> None:
    rows = _json(
        capsys,
        "compare",
        "--scenario",
        f"ojpp-{queue}",
        "--policies",
        "fifo-ojpp,fifo-ojpp-ojpap",
        "--json",
    )
    plain, online = rows
    assert plain["migrations"] == 0
    assert online["migrations"] > 0
    assert online["finished"] == plain["finished"] == 20
    # the table shows the migrations column only when some run migrated
    assert (
        main(["compare", "--scenario", f"ojpp-{queue}", "--policies", "fifo-ojpp,fifo-ojpp-ojpap"])
        == 0
    )
    assert "Migrations" in capsys.readouterr().out


def test_only_the_ojpp_scenarios_declare_it_and_the_others_run_without(monkeypatch) -> None:
    declaring = {
        name
        for name in embedded_scenarios()
        if resolve_scenario(name)[0].simulator.interference is not None
    }
    # the OJPP queues, and the replay of the measured H200 table
    # (tests/scenarios/test_measured_interference.py)
    assert declaring == {f"ojpp-{q}" for q in QUEUES} | {"h200-colocation"}
    seen: list[object] = []
    real = api.simulate

    def spy(*args: object, **kwargs: object):
        seen.append(kwargs["interference"])
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "simulate", spy)
    prepared = api.prepare("philly-default")
    for policy in ("fifo", "fifo-ojpp"):
        api.run(prepared, policy)
    assert seen == [None, None]  # the simulator is handed no model: shares alone, as before
    api.run(api.prepare("ojpp-average"), "fifo-ojpp")
    assert seen[-1] is not None and seen[-1].draw_seed == 0  # type: ignore[attr-defined]


def test_drawn_collisions_are_one_draw_per_group_around_the_expectation() -> None:
    from gpuplan.models import JobSpec, MemoryProfile
    from gpuplan.scenarios.ojpp_interference import OjppInterference

    spiky = MemoryProfile(gamma=0.2, delta=0.5, p=0.3, compute=0.3)
    a, b = (
        JobSpec(
            id=i, submit_time=0, requested_gpus=1, total_iterations=1.0, model="m", memory=spiky
        )
        for i in ("a", "b")
    )
    matrix = {"m": {"m": 0.1}}
    # 0.4 basic + one 0.5 spike fits; two spikes overflow: P = 0.3^2 = 0.09
    assert OjppInterference(matrix).slowdown(a, [b]) == pytest.approx(0.1 + 0.09)
    draws = []
    for seed in range(400):
        model = OjppInterference(matrix, draw_seed=seed)
        s = model.slowdown(a, [b])
        assert s == model.slowdown(b, [a])  # both workers of the group see the same draw
        assert round((s - 0.1) * 100, 9).is_integer()  # hits of a 100-iteration window
        draws.append(s - 0.1)
    assert len(set(draws)) > 5  # the seed draws them
    assert statistics.fmean(draws) == pytest.approx(0.09, abs=0.01)
