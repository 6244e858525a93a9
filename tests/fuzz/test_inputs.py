"""Targeted checks of the CLI's file inputs (the suite's first tests, before the generated
kinds of tests/fuzz): known bad scenarios name their field, state files are cross-checked,
``--out`` is checked before running and never follows links, malformed seeds, hostile files in
a real process, and a device refused rather than read."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .bases import SMALL as BASE_SCENARIO
from .bases import STATE as BASE_STATE
from .harness import run_in_process


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code, out, err, why = run_in_process(argv)
    assert code is not None, f"{argv}: {why}"
    return code, out, err


@pytest.mark.parametrize(
    ("name", "mutate", "field"),
    [
        (
            "inf-duration",
            lambda d: d["workload"]["inline_jobs"][0].update(duration=math.inf),
            "duration",
        ),
        (
            "inf-submit",
            lambda d: d["workload"]["inline_jobs"][0].update(submit_time=math.inf),
            "submit_time",
        ),
        (
            "huge-duration",
            lambda d: d["workload"]["inline_jobs"][0].update(duration=1e15),
            "duration",
        ),
        (
            "max-gpus",
            lambda d: d["workload"]["inline_jobs"][1]["elasticity"].update(max_gpus=2**63),
            "max_gpus",
        ),
        ("negative-seed", lambda d: d.update(seed=-1), "seed"),
        (
            "server-size",
            lambda d: d.update(loaning={"servers": 2, "gpus_per_server": 300}),
            "gpus_per_server",
        ),
    ],
)
def test_known_bad_scenarios_name_their_field(
    name: str, mutate: Any, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = copy.deepcopy(BASE_SCENARIO)
    mutate(doc)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = _run_cli(["simulate", "--scenario", str(path), "--policy", "fifo"], capsys)
    assert code == 2 and field in err and len(err.strip().splitlines()) == 1, err


def test_state_files_are_cross_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "other-job": lambda d: d["jobs"][0]["allocation"].update(job_id="b"),
        "future-job": lambda d: d["jobs"][1]["spec"].update(submit_time=500),
        "infinity": lambda d: d.update(now=math.inf),
    }
    for name, mutate in cases.items():
        doc = copy.deepcopy(BASE_STATE)
        mutate(doc)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))  # json writes Infinity for math.inf
        code, _, err = _run_cli(["plan", "--state", str(path), "--policy", "fifo"], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, (name, err)
    assert "Infinity" in (tmp_path / "infinity.json").read_text()


def test_out_is_checked_before_running_and_never_follows_links(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(BASE_SCENARIO))
    existing = tmp_path / "file"
    existing.write_text("keep me")
    code, _, err = _run_cli(
        ["simulate", "--scenario", str(scenario), "--policy", "fifo", "--out", str(existing)],
        capsys,
    )
    assert code == 2 and "not a directory" in err and existing.read_text() == "keep me"
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    code, _, err = _run_cli(
        ["simulate", "--scenario", str(scenario), "--policy", "fifo", "--out", str(link)], capsys
    )
    assert code == 2 and "symlink" in err and not (tmp_path / "elsewhere").exists()
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    (out / "summary.json").symlink_to(victim)
    code, _, err = _run_cli(
        ["simulate", "--scenario", str(scenario), "--policy", "fifo", "--out", str(out)], capsys
    )
    assert code == 0, err
    assert not victim.exists() and not (out / "summary.json").is_symlink()
    assert json.loads((out / "summary.json").read_text())[0]["policy"] == "fifo"
    assert not list(out.glob(".gpuplan-*")), "the staging directory was left behind"


@pytest.mark.parametrize("argv", [["--seed", "-1"], ["--seed", "1e3"]])
def test_negative_or_malformed_seeds_are_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run_cli(
        ["simulate", "--scenario", "philly-default", "--policy", "fifo", *argv], capsys
    )
    assert code == 2 and "--seed" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("deep.yaml", "a: " + "[" * 100_000 + "]" * 100_000 + "\n"),
        ("digits.yaml", "name: x\nseed: " + "9" * 5000 + "\nworkload: {source: inline}\n"),
        ("bad-utf8.yaml", b"name: \xff\xfe\n"),
        ("state.json", '{"now": Infinity, "cluster": {"nodes": []}}'),
    ],
)
def test_hostile_files_in_a_real_process(name: str, content: str | bytes, tmp_path: Path) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    argv = (
        ["plan", "--state", str(path)]
        if name.endswith(".json")
        else ["simulate", "--scenario", str(path)]
    )
    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan", *argv, "--policy", "fifo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_device_is_refused_not_read() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuplan",
            "simulate",
            "--scenario",
            "/dev/zero",
            "--policy",
            "fifo",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr
