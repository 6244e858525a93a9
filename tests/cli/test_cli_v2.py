"""CLI behaviour a new user meets: help everywhere, suggestions, no silent empties, per-seed out."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

from gpuplan.cli import build_parser

CLI = [sys.executable, "-m", "gpuplan"]


def _gpuplan(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=timeout)


def test_every_option_of_every_command_has_help_text() -> None:
    def walk(parser: argparse.ArgumentParser, path: str) -> list[str]:
        missing = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    missing += walk(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
        return missing

    assert walk(build_parser(), "gpuplan") == []


def test_unknown_names_suggest_the_closest() -> None:
    bad = _gpuplan("compare", "--scenario", "philly-default", "--policies", "fifo,srtff")
    assert bad.returncode == 2 and "did you mean 'srtf'" in bad.stderr
    bad = _gpuplan("simulate", "--scenario", "philly-defualt", "--policy", "fifo")
    assert bad.returncode == 2 and "did you mean 'philly-default'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def _scenario(tmp_path: Path, **workload: object) -> Path:
    path = tmp_path / "s.yaml"
    jobs = [
        {"id": f"j{i}", "submit_time": 100.0 * i, "requested_gpus": 1, "duration": 50.0}
        for i in range(5)
    ]
    path.write_text(
        yaml.safe_dump(
            {
                "name": "small",
                "cluster": {"nodes": 1, "gpus_per_node": 2},
                "workload": {"source": "inline", "inline_jobs": jobs, **workload},
            }
        )
    )
    return path


def test_no_silent_empties(tmp_path: Path) -> None:
    data = Path(__file__).resolve().parents[2] / "scenarios" / "data"
    late = tmp_path / "late.yaml"
    late.write_text(
        yaml.safe_dump(
            {
                "name": "late",
                "cluster": {"nodes": 1, "gpus_per_node": 8},
                "workload": {
                    "source": "philly",
                    "path": str(data / "philly_6c71a0_4days.csv"),
                    "start_s": 1e8,
                },
            }
        )
    )  # a window past the trace's end
    empty = _gpuplan("simulate", "--scenario", str(late), "--policy", "fifo")
    assert empty.returncode == 2 and "selects no jobs" in empty.stderr
    short = _gpuplan(
        "simulate",
        "--scenario",
        str(_scenario(tmp_path, max_jobs=50)),
        "--policy",
        "fifo",
        "--json",
    )
    assert short.returncode == 0, short.stderr
    assert "warning" in short.stderr and "asks for 50 jobs" in short.stderr


def test_seeds_with_out_write_every_seed_and_the_mean(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _gpuplan(
        "compare",
        "--scenario",
        str(_scenario(tmp_path)),
        "--policies",
        "fifo,srtf",
        "--seeds",
        "0,1",
        "--out",
        str(out),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    for seed in (0, 1):
        assert (out / f"seed-{seed}" / "fifo-jobs.csv").is_file()
        assert (out / f"seed-{seed}" / "summary.json").is_file()
    mean = json.loads((out / "summary.json").read_text())
    assert [row["policy"] for row in mean] == ["fifo", "srtf"]
    assert all(row["seeds"] == [0, 1] and len(row["per_seed"]) == 2 for row in mean)
