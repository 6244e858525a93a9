"""Command-line arguments and paths: every file option given a directory, a device, a FIFO, a
symlink (to a file, dangling, a loop), a missing or empty file, an odd name; every number and
list option given hostile text (unicode digits, empty list entries, huge values, signs)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import strategies as st

from gpuplan.solver_core.problems.generate import generate, instance_text

from .bases import SMALL, STATE, SWEEP, dump
from .harness import Outcome, check, classify, explore, run_in_process


@pytest.fixture(autouse=True)
def _stub_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep's report.html reads no input; its figures would cost ~20 s per clean sweep."""
    monkeypatch.setattr(
        "gpuplan.report.write_report", lambda path, *_: Path(path).write_text("<html></html>")
    )


def _valid(folder: Path) -> dict[str, Path]:
    """One valid file per slot, so a case changes only the argument under test."""
    files = {
        "scenario": folder / "scenario.yaml",
        "state": folder / "state.json",
        "instance": folder / "mckp.json",
        "sweep": folder / "sweep.yaml",
    }
    files["scenario"].write_bytes(dump(SMALL, "yaml"))
    files["state"].write_bytes(dump(STATE, "json"))
    files["instance"].write_text(instance_text(generate("mckp", 4, 1)))
    files["sweep"].write_bytes(
        dump(
            {**SWEEP, "scenarios": ["scenario.yaml"], "policies": ["fifo"], "overrides": []}, "yaml"
        )
    )
    return files


def _argv(slot: str, path: str, files: dict[str, Path], folder: Path) -> list[str]:
    s = {k: str(v) for k, v in files.items()}
    return {
        "scenario": ["simulate", "--scenario", path, "--policy", "fifo"],
        "state": ["plan", "--state", path, "--policy", "fifo"],
        "instance": ["solve", "mckp", "--instance", path, "--solvers", "greedy"],
        "sweep": ["sweep", path, "--out", str(folder / "out"), "--workers", "1"],
        "simulate-out": [
            "simulate",
            "--scenario",
            s["scenario"],
            "--policy",
            "fifo",
            "--out",
            path,
        ],
        "compare-out": [
            "compare",
            "--scenario",
            s["scenario"],
            "--policies",
            "fifo",
            "--out",
            path,
        ],
        "solve-out": [
            "solve",
            "mckp",
            "--instance",
            s["instance"],
            "--solvers",
            "greedy",
            "--out",
            path,
        ],
        "generate-instance": ["solve", "mckp", "--generate", "--size", "3", "--instance", path],
        "sweep-out": ["sweep", s["sweep"], "--out", path, "--workers", "1"],
    }[slot]


def _make(how: str, folder: Path) -> str:
    """A hostile path of kind ``how`` inside ``folder`` (or a device)."""
    p = folder / "target"
    if how == "directory":
        p.mkdir()
    elif how == "dev-null":
        return "/dev/null"
    elif how == "dev-zero":
        return "/dev/zero"
    elif how == "fifo":
        os.mkfifo(p)
    elif how == "missing":
        pass
    elif how == "empty":
        p.write_text("")
    elif how == "dangling-symlink":
        p.symlink_to(folder / "nowhere")
    elif how == "symlink-to-file":
        (folder / "victim").write_text("keep me")
        p.symlink_to(folder / "victim")
    elif how == "symlink-loop":
        p.symlink_to(p)
    elif how == "unicode-name":
        p = folder / "sc\u00e9nario \u202e\u0661.yaml"
        p.write_text("name: [")
    elif how == "long-name":
        return str(folder / ("x" * 300))
    elif how == "deep-missing":
        return str(folder / "no" / "such" / "dir" / "file")
    elif how == "empty-string":
        return ""
    return str(p)


PATH_KINDS = [
    "directory",
    "dev-null",
    "dev-zero",
    "fifo",
    "missing",
    "empty",
    "dangling-symlink",
    "symlink-to-file",
    "symlink-loop",
    "unicode-name",
    "long-name",
    "deep-missing",
    "empty-string",
]
INPUT_SLOTS = ["scenario", "state", "instance", "sweep"]
OUTPUT_SLOTS = ["simulate-out", "compare-out", "solve-out", "generate-instance", "sweep-out"]
OUTPUT_KINDS = [
    "dev-null",
    "fifo",
    "empty",
    "dangling-symlink",
    "symlink-to-file",
    "symlink-loop",
    "long-name",
    "empty-string",
    "directory",
]


@pytest.mark.parametrize("how", PATH_KINDS)
@pytest.mark.parametrize("slot", INPUT_SLOTS)
def test_cli_input_paths(slot: str, how: str, case_dir: Callable[[], Path]) -> None:
    """None of these is valid input (the link points at "keep me"): each is refused."""
    folder = case_dir()
    files = _valid(folder)
    path = _make(how, folder)
    outcome = classify(
        *run_in_process(_argv(slot, path, files, folder), cwd=folder),
        names=[path or "''", slot, "scenario", "instance", "state"],
    )
    if outcome.kind == "clean":
        outcome = Outcome(
            "accepted-nonsense", 0, outcome.out, outcome.err, f"ran on a {how} as its {slot}"
        )
    check("cli", f"{slot} = {how} ({path!r})", outcome)


@pytest.mark.parametrize("how", OUTPUT_KINDS)
@pytest.mark.parametrize("slot", OUTPUT_SLOTS)
def test_cli_output_paths(slot: str, how: str, case_dir: Callable[[], Path]) -> None:
    """An output that is a link, a device, a FIFO or an empty name is refused before anything
    is written; a directory is fine for --out, a regular file for --instance (replaced); and
    nothing is ever written through a link (the victim keeps its content)."""
    folder = case_dir()
    files = _valid(folder)
    path = _make(how, folder)
    option = "instance" if slot == "generate-instance" else "out"
    outcome = classify(
        *run_in_process(_argv(slot, path, files, folder), cwd=folder), names=[path or "''", option]
    )
    fine = ("empty", "dev-null") if option == "instance" else ("directory",)
    victim = folder / "victim"
    if victim.exists() and victim.read_text() != "keep me":
        outcome = Outcome(
            "wrong-outcome", outcome.code, outcome.out, outcome.err, "wrote through a symlink"
        )
    elif outcome.kind == "clean" and how not in fine:
        outcome = Outcome(
            "accepted-nonsense", 0, outcome.out, outcome.err, f"accepted a {how} as --{option}"
        )
    check("cli", f"{slot} = {how} ({path!r})", outcome)


HOSTILE_ARGS = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "-1",
            "0",
            "1",
            "²",
            "١٢",
            "1e3",
            "0x10",
            "+5",
            "4294967295",
            "4294967296",
            "18446744073709551616",
            "9" * 5000,
            "nan",
            "inf",
            ",",
            "1,,2",
            "1, 2",
            "1,1",
            "fifo,,srtf",
            "fifo,fifo",
            "srtf(",
            "fifo()",
            "afs-l(work_limit_s=1e308)",
            "tiresias-l(thresholds=[nan])",
            "fifo(x=1)",
            "\u202efifo",
            "-",
            "--json",
        ]
    ),
    st.text(max_size=16),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)


def _option_argv(option: str, value: str, files: dict[str, Path], folder: Path) -> list[str]:
    s = {k: str(v) for k, v in files.items()}
    return {
        "seed": ["simulate", "--scenario", s["scenario"], "--policy", "fifo", "--seed", value],
        "seeds": ["compare", "--scenario", s["scenario"], "--policies", "fifo", "--seeds", value],
        "policies": ["compare", "--scenario", s["scenario"], "--policies", value],
        "policy": ["plan", "--state", s["state"], "--policy", value],
        "plan-seed": ["plan", "--state", s["state"], "--policy", "fifo", "--seed", value],
        "size": ["solve", "mckp", "--generate", "--size", value, "--solvers", "greedy"],
        "solve-seed": [
            "solve",
            "packing",
            "--generate",
            "--size",
            "3",
            "--seed",
            value,
            "--solvers",
            "greedy-deficit",
        ],
        "time-limit": [
            "solve",
            "mckp",
            "--instance",
            s["instance"],
            "--solvers",
            "cp-sat",
            "--time-limit",
            value,
        ],
        "solvers": ["solve", "mckp", "--instance", s["instance"], "--solvers", value],
        "workers": ["sweep", s["sweep"], "--out", str(folder / "out"), "--workers", value],
        "scenario-name": ["simulate", "--scenario", value, "--policy", "fifo"],
    }[option]


SAFE_COUNTS = st.sampled_from(
    [
        "",
        "0",
        "-1",
        "²",
        "١٢",
        "1e3",
        "0x10",
        "+5",
        " 1",
        "1.5",
        "nan",
        ",",
        "9" * 5000,
        "4294967296",
        "18446744073709551616",
        "100000000",
        "1",
    ]
)
"""``--size`` and ``--workers``: hostile text, the issue's 1e8 and sizes past 2^32, but no
mid-sized value that is legitimately slow (a million-group knapsack, a 50-process Dask
cluster): those are work, not hostile input, and would cost the suite minutes."""
STRATEGY = {"size": SAFE_COUNTS, "workers": SAFE_COUNTS}

OPTIONS = [
    "seed",
    "seeds",
    "policies",
    "policy",
    "plan-seed",
    "size",
    "solve-seed",
    "time-limit",
    "solvers",
    "workers",
    "scenario-name",
]


@pytest.mark.parametrize("option", OPTIONS)
def test_cli_option_values(option: str, case_dir: Callable[[], Path]) -> None:
    def body(value: str) -> tuple[str, Outcome]:
        folder = case_dir()
        files = _valid(folder)
        name = option.split("-")[-1] if option != "scenario-name" else "scenario"
        argv = _option_argv(option, value, files, folder)
        return f"--{option} {value[:80]!r}", classify(
            *run_in_process(argv, cwd=folder), names=[name, "polic", "solver"]
        )

    explore("cli", STRATEGY.get(option, HOSTILE_ARGS), body, 10)
