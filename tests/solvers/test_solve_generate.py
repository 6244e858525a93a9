"""``gpuplan solve --generate``: seeded instances that every loader accepts, byte-identical per
seed, different across seeds, and answered feasibly by every heuristic; the CLI's three modes."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli import main
from gpuplan.models.ojpp import load_ojpp
from gpuplan.solver_core.limits import SolveLimits
from gpuplan.solver_core.problems import mckp, packing, placement, reclaim
from gpuplan.solver_core.problems.generate import (
    DEFAULT_SIZES,
    GENERATORS,
    generate,
    instance_text,
)

LOADERS = {
    "mckp": mckp.load,
    "reclaim": reclaim.load,
    "placement": placement.load,
    "packing": packing.load,
    "ojpp": load_ojpp,
}
CHECKS = {"mckp": mckp, "reclaim": reclaim, "placement": placement, "packing": packing}
HEURISTICS = {
    "mckp": ("greedy",),
    "reclaim": ("aryl", "scf", "random"),
    "placement": ("greedy",),
    "packing": ("greedy-deficit", "greedy-marginal"),
}


def test_every_problem_has_a_generator() -> None:
    from gpuplan.solve import PROBLEMS

    assert set(GENERATORS) == set(PROBLEMS) == set(DEFAULT_SIZES)


@pytest.mark.parametrize("problem", sorted(LOADERS))
@pytest.mark.parametrize("size", [1, 2, 7, 40])
def test_generated_instances_load_and_round_trip(problem: str, size: int) -> None:
    for seed in range(6):
        data = generate(problem, size, seed)
        text = instance_text(data)
        assert json.loads(text) == data  # nothing lost in the file
        assert instance_text(generate(problem, size, seed)) == text  # same seed, same bytes
        LOADERS[problem](json.loads(text), f"{problem}-{size}-{seed}")  # raises if invalid


@pytest.mark.parametrize("problem", sorted(LOADERS))
def test_seeds_and_sizes_give_different_instances(problem: str) -> None:
    texts = [instance_text(generate(problem, 12, seed)) for seed in range(5)]
    for a, b in combinations(texts, 2):
        assert a != b
    assert instance_text(generate(problem, 12, 0)) != instance_text(generate(problem, 13, 0))


def test_size_is_what_the_docs_say() -> None:
    assert len(generate("mckp", 9, 1)["groups"]) == 9
    assert len(generate("reclaim", 9, 1)["servers"]) == 9
    assert len(generate("placement", 9, 1)["nodes"]) == 9
    assert len(generate("packing", 9, 1)["jobs"]) == 9
    assert len(generate("ojpp", 9, 1)["jobs"]) == 9
    with pytest.raises(ValueError):
        generate("mckp", 0, 0)
    with pytest.raises(ValueError):
        generate("nope", 3, 0)


def test_generated_reclaim_is_one_coupled_component_at_scale() -> None:
    """The hard case of issue 15: a thousand servers tied together by multi-server jobs."""
    from gpuplan.solver_core.policies.aryl.reclaim_exact import components

    rf = reclaim.load(generate("reclaim", 1000, 0), "r")
    assert max(len(c) for c in components(rf.inst)) > 900
    assert rf.demand == 250


@pytest.mark.parametrize("problem", sorted(CHECKS))
def test_heuristics_are_feasible_on_generated_instances(problem: str) -> None:
    mod: Any = CHECKS[problem]
    limits = SolveLimits.wall(10.0)
    for seed in range(8):
        inst = mod.load(generate(problem, 15, seed), "g")
        for solver in HEURISTICS[problem]:
            out = mod.run(inst, solver, limits)
            value = mod.check(inst, out.solution)  # independent feasibility check
            assert value == pytest.approx(out.objective)


def test_cli_writes_byte_identical_files_per_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    for path, seed in ((a, "4"), (b, "4"), (c, "5")):
        assert (
            main(
                [
                    "solve",
                    "reclaim",
                    "--generate",
                    "--size",
                    "30",
                    "--seed",
                    seed,
                    "--instance",
                    str(path),
                ]
            )
            == 0
        )
    assert "wrote" in capsys.readouterr().out
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert a.read_text() == instance_text(generate("reclaim", 30, 4))
    # the written file is an ordinary instance file
    assert main(["solve", "reclaim", "--instance", str(a), "--json", "--solvers", "aryl,scf"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rf = reclaim.load(json.loads(a.read_text()), "a")
    for row in rows:
        assert reclaim.check(rf, row["solution"]) == row["objective"]


def test_cli_generate_without_instance_solves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    assert (
        main(
            [
                "solve",
                "mckp",
                "--generate",
                "--size",
                "20",
                "--seed",
                "2",
                "--json",
                "--solvers",
                "dp,greedy",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [r["solver"] for r in rows] == ["dp", "greedy"]
    inst = mckp.load(generate("mckp", 20, 2), "g")
    assert rows[0]["status"] == "optimal"
    assert mckp.check(inst, rows[0]["solution"]) == pytest.approx(rows[0]["objective"])
    assert rows[1]["objective"] <= rows[0]["objective"] + 1e-9
    assert (out / "instance.json").read_text() == instance_text(generate("mckp", 20, 2))
    assert (out / "solve.csv").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["solve", "mckp", "--size", "5", "--instance", "x.json"],
        ["solve", "mckp", "--seed", "5", "--instance", "x.json"],
        ["solve", "mckp", "--generate", "--size", "0"],
        ["solve", "nope", "--generate"],
        ["solve", "mckp", "--generate", "--solvers", "nope"],
    ],
)
def test_cli_generate_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err


def test_bench_matrix_cells_and_table() -> None:
    """The solver x size bench on tiny instances: one cell per solver and size, gaps measured
    against the best found, so some solver has gap 0 and none is negative."""
    from tests.bench.solver_matrix import run_problem, table

    cells = run_problem("packing", (3, 5), 2, SolveLimits.wall(10.0))
    for n in (3, 5):
        gaps = [g for row in cells.values() for g in row[n].gaps]
        assert min(gaps) == 0.0 and all(g >= 0 for g in gaps)
        assert all(row[n].runs == 2 for row in cells.values())
    text = table("packing", cells)
    assert text.count("\n") == len(cells) + 1 and "n=3" in text and "jobs" in text
