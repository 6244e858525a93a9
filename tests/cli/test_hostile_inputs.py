"""Issue 23's careless and hostile inputs, each through the real command line: one line naming
the file and field, exit status 2 — never an internal error, a traceback, a hang or a write
through a planted link — and a quiet exit when the reader of stdout goes away.

Most cases run ``cli.main`` in-process (fast); the closed-pipe cases and one device case run
as real subprocesses. Cases that could hang (a FIFO, ``/dev/zero``) run under an alarm.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan import cli
from gpuplan import solve as solve_mod
from gpuplan.models import InputError
from gpuplan.scenarios.input_files import parse_structured, read_text
from gpuplan.solver_core.problems.generate import MAX_SIZES, generate

HANG_S = 60
"""A case still running after this long is a hang (each takes well under a second here)."""

SCENARIO: dict[str, Any] = {
    "name": "hostile",
    "seed": 1,
    "cluster": {"nodes": 2, "gpus_per_node": 4},
    "workload": {
        "source": "inline",
        "inline_jobs": [
            {"id": "a", "submit_time": 0, "requested_gpus": 2, "duration": 100},
            {"id": "b", "submit_time": 5, "requested_gpus": 4, "duration": 50},
        ],
    },
}

STATE: dict[str, Any] = {
    "now": 100.0,
    "cluster": {"nodes": [{"name": "n1", "gpus": 4}, {"name": "n2", "gpus": 4}]},
    "jobs": [
        {
            "spec": {"id": "a", "submit_time": 0, "requested_gpus": 2, "duration": 100},
            "done_iterations": 10.0,
            "allocation": {"job_id": "a", "placement": {"n1": [0, 1]}},
        },
        {"spec": {"id": "b", "submit_time": 50, "requested_gpus": 4, "duration": 300}},
    ],
}

MCKP: dict[str, Any] = {
    "capacity": 4,
    "groups": [
        {"id": "g0", "items": [{"weight": 2, "value": 5.0}, {"weight": 4, "value": 8.0}]},
        {"id": "g1", "items": [{"weight": 2, "value": 3.0}]},
    ],
}


@contextlib.contextmanager
def _alarm(seconds: int = HANG_S) -> Iterator[None]:
    def hang(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], *names: str) -> str:
    """Run the CLI; assert exit 2 and exactly one ``error:`` line on stderr that holds every
    one of ``names`` (the file, the field). Returns that line."""
    with _alarm():
        status = cli.main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2, (status, out[-500:], err[-2000:])
    assert len(lines) == 1 and lines[0].startswith(("error:", "gpuplan")), err[-2000:]
    assert "internal error" not in err and "Traceback" not in err
    for name in names:
        assert name in lines[0], (name, lines[0][:500])
    return lines[0]


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data) if path.suffix == ".json" else yaml.safe_dump(data))
    return path


# ----------------------------------------------------------------------- 1. the one reader
@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--scenario", "{d}", "--policy", "fifo"],
        ["compare", "--scenario", "{d}", "--policies", "fifo"],
        ["plan", "--state", "{d}", "--policy", "fifo"],
        ["solve", "mckp", "--instance", "{d}"],
        ["sweep", "{d}", "--out", "{d}-out"],
    ],
)
def test_a_directory_as_an_input_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    folder = tmp_path / "adir.yaml"
    folder.mkdir()
    line = _refused(capsys, [a.format(d=folder) for a in argv], str(folder))
    assert "not a regular file (a directory)" in line


def _secondary(tmp_path: Path, kind: str, target: str) -> Path:
    doc = json.loads(json.dumps(SCENARIO))
    if kind == "loaning.qps":
        doc["loaning"] = {"servers": 2, "gpus_per_server": 8, "gpu_type": "t4", "qps": target}
    elif kind == "philly":
        doc["workload"] = {"source": "philly", "path": target}
    elif kind == "aryl_testbed":
        doc["workload"] = {"source": "aryl_testbed", "path": target}
    elif kind == "gavel":
        doc["workload"] = {"source": "gavel", "path": target}
    return _write(tmp_path / f"s-{kind}.yaml", doc)


@pytest.mark.parametrize("kind", ["loaning.qps", "philly", "aryl_testbed", "gavel"])
def test_dev_zero_as_a_secondary_path_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """It used to be read until MemoryError at 4-5 GB: only top-level files had the reader."""
    scenario = _secondary(tmp_path, kind, "/dev/zero")
    line = _refused(
        capsys, ["simulate", "--scenario", str(scenario), "--policy", "fifo"], "/dev/zero"
    )
    assert "not a regular file (a device)" in line


@pytest.mark.parametrize("kind", ["loaning.qps", "philly", "aryl_testbed"])
def test_a_fifo_as_a_secondary_path_is_refused_without_blocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """A FIFO nobody writes would block an ``open()`` for ever; it is refused on ``stat``."""
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    scenario = _secondary(tmp_path, kind, str(fifo))
    line = _refused(
        capsys, ["simulate", "--scenario", str(scenario), "--policy", "fifo"], str(fifo)
    )
    assert "not a regular file (a FIFO)" in line


def test_dev_zero_as_qps_in_a_real_process(tmp_path: Path) -> None:
    scenario = _secondary(tmp_path, "loaning.qps", "/dev/zero")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuplan",
            "simulate",
            "--scenario",
            str(scenario),
            "--policy",
            "fifo",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {scenario}, field 'loaning.qps': /dev/zero: QPS series is not a regular file "
        "(a device)"
    ], proc.stderr


def test_the_reader_checks_size_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:  # sparse: 300 MiB that cost no disk
        fh.truncate(300 << 20)
    with pytest.raises(InputError, match="at most 268435456 are read") as err:
        read_text(big, "scenario file")
    assert err.value.source == str(big)
    with pytest.raises(InputError, match="at most 10 are read"):
        read_text(big, "trace file", limit=10, field="workload.path")


def test_the_reader_follows_a_link_to_a_regular_file_only(tmp_path: Path) -> None:
    real = tmp_path / "real.csv"
    real.write_text("\ufeffa,b\n1,2\n")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    assert read_text(link, "trace file", bom=True) == "a,b\n1,2\n"
    dev = tmp_path / "dev.csv"
    dev.symlink_to("/dev/zero")
    with pytest.raises(InputError, match=r"not a regular file \(a device\)"):
        read_text(dev, "trace file")
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"a,b\n\xff\n")
    with pytest.raises(InputError, match="not UTF-8 text"):
        read_text(bad, "trace file")


# ----------------------------------------------------------------------- 2. no internal error
@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--scenario", "{long}", "--policy", "fifo"],
        ["compare", "--scenario", "{long}", "--policies", "fifo"],
        ["plan", "--state", "{long}", "--policy", "fifo"],
        ["solve", "mckp", "--instance", "{long}"],
        ["sweep", "{long}", "--out", "{tmp}/out"],
    ],
)
def test_a_5000_character_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """``Path.exists()`` raised ENAMETOOLONG (exit 1, internal error) for ``--scenario``."""
    long = "s" * 5000
    line = _refused(capsys, [a.format(long=long, tmp=tmp_path) for a in argv])
    assert "too long" in line and len(line) < 400


def test_a_5000_character_scenario_in_a_sweep_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = _write(tmp_path / "sweep.yaml", {"scenarios": ["x" * 5000], "policies": ["fifo"]})
    line = _refused(
        capsys,
        ["sweep", str(sweep), "--out", str(tmp_path / "out")],
        str(sweep),
        "field 'scenarios[0]'",
    )
    assert "too long" in line


@pytest.mark.parametrize("out", ["file", "/dev/null"])
def test_solve_out_is_checked_before_any_solver_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, out: str
) -> None:
    instance = _write(tmp_path / "i.json", MCKP)
    target = str(tmp_path / "a-file") if out == "file" else out
    if out == "file":
        Path(target).write_text("keep me\n")

    def ran(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a solver ran before --out was checked")

    monkeypatch.setattr(solve_mod, "_solve", ran)
    for argv in (
        ["solve", "mckp", "--instance", str(instance), "--out", target],
        ["solve", "mckp", "--generate", "--out", target],
    ):
        _refused(capsys, argv, target, "field 'out'", "not a directory")
    if out == "file":
        assert Path(target).read_text() == "keep me\n"


@pytest.mark.parametrize("seeds", ["²", "0,²", "٣", "0,,1"])
def test_seeds_are_ascii_digits(capsys: pytest.CaptureFixture[str], seeds: str) -> None:
    """``int('²')`` raises although ``'²'.isdigit()``: it was an internal error."""
    _refused(
        capsys,
        ["compare", "--scenario", "philly-default", "--policies", "fifo", "--seeds", seeds],
        "field 'seeds'",
    )


@pytest.mark.parametrize("policies", ["fifo,,srtf", "fifo,", ",fifo", "fifo, ,srtf"])
def test_an_empty_policy_entry_is_refused_not_dropped(
    capsys: pytest.CaptureFixture[str], policies: str
) -> None:
    _refused(
        capsys,
        ["compare", "--scenario", "philly-default", "--policies", policies],
        "field 'policies'",
        "empty entry",
    )


def test_an_empty_solver_entry_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    _refused(
        capsys,
        ["solve", "mckp", "--generate", "--solvers", "dp,,greedy"],
        "field 'solvers'",
        "empty entry",
    )


@pytest.mark.parametrize("seed", ["-1", str(2**64), str(2**32), "²"])
def test_solve_generate_seed_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: str
) -> None:
    target = tmp_path / "x.json"
    with pytest.raises(SystemExit) as exc:  # argparse's own one-line usage error
        cli.main(["solve", "mckp", "--generate", "--seed", seed, "--instance", str(target)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "--seed" in err[0], err
    assert not target.exists()


def test_solve_generate_seed_bounds_are_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for seed in ("0", str(2**32 - 1)):
        target = tmp_path / f"x{seed}.json"
        assert (
            cli.main(
                [
                    "solve",
                    "mckp",
                    "--generate",
                    "--size",
                    "3",
                    "--seed",
                    seed,
                    "--instance",
                    str(target),
                ]
            )
            == 0
        )
        assert json.loads(target.read_text())["groups"]


@pytest.mark.parametrize("problem", sorted(MAX_SIZES))
def test_generator_sizes_are_bounded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], problem: str
) -> None:
    """``--size 100000000`` grew memory without bound; now one line before generating."""
    target = tmp_path / "x.json"
    for size in ("100000000", str(MAX_SIZES[problem] + 1)):
        _refused(
            capsys,
            ["solve", problem, "--generate", "--size", size, "--instance", str(target)],
            "field 'size'",
            str(MAX_SIZES[problem]),
        )
    assert not target.exists()
    with pytest.raises(ValueError, match="size must be"):
        generate(problem, MAX_SIZES[problem] + 1)


@pytest.mark.parametrize(
    ("problem", "doc", "field"),
    [
        ("mckp", {**MCKP, "colour": 1}, "colour"),
        (
            "mckp",
            {
                "capacity": 4,
                "groups": [{"id": "g0", "items": [{"weight": 2, "value": 1}], "note": "x"}],
            },
            "groups[0].note",
        ),
        (
            "mckp",
            {
                "capacity": 4,
                "groups": [{"id": "g0", "items": [{"weight": 2, "value": 1, "wieght": 3}]}],
            },
            "groups[0].items[0].wieght",
        ),
        (
            "reclaim",
            {"servers": ["s0"], "jobs": [{"id": "j0", "gpus": {"s0": 1}, "prio": 2}], "demand": 1},
            "jobs[0].prio",
        ),
        (
            "placement",
            {"unit": 4, "nodes": {"n0": 4}, "jobs": [{"id": "j", "count": 1, "hold": {"n0": 1}}]},
            "jobs[0].hold",
        ),
        (
            "packing",
            {"unit": 4, "capacity": 4, "jobs": [{"id": "j", "share": 2, "alowed": [1]}]},
            "jobs[0].alowed",
        ),
    ],
)
def test_unknown_keys_in_instances_are_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    problem: str,
    doc: dict[str, Any],
    field: str,
) -> None:
    instance = _write(tmp_path / "i.json", doc)
    _refused(
        capsys,
        ["solve", problem, "--instance", str(instance)],
        str(instance),
        f"field '{field}'",
        "unknown field",
    )


def test_duplicate_yaml_keys_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PyYAML keeps the last value silently: ``seed: 1 ... seed: 2`` ran with seed 2."""
    text = yaml.safe_dump(SCENARIO, sort_keys=False)
    top = tmp_path / "top.yaml"
    top.write_text(text + "seed: 2\n")
    line = _refused(
        capsys,
        ["simulate", "--scenario", str(top), "--policy", "fifo"],
        str(top),
        "duplicate key 'seed'",
    )
    assert "first at line 2" in line
    nested = tmp_path / "nested.yaml"
    nested.write_text(text.replace("gpus_per_node: 4", "gpus_per_node: 4\n  nodes: 3"))
    _refused(
        capsys,
        ["simulate", "--scenario", str(nested), "--policy", "fifo"],
        str(nested),
        "duplicate key 'nodes'",
    )
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"scenarios: [{top}]\npolicies: [fifo]\npolicies: [srtf]\n")
    _refused(
        capsys,
        ["sweep", str(sweep), "--out", str(tmp_path / "o")],
        str(sweep),
        "duplicate key 'policies' at line 3",
    )


def test_a_yaml_merge_key_may_still_be_overridden() -> None:
    data = parse_structured("base: &b {x: 1, y: 2}\nover:\n  <<: *b\n  y: 3\n", "m.yaml")
    assert data["over"] == {"x": 1, "y": 3}


def test_duplicate_json_keys_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state.json"
    state.write_text(json.dumps(STATE)[:-1] + ', "now": 5}')
    _refused(
        capsys,
        ["plan", "--state", str(state), "--policy", "fifo"],
        str(state),
        "duplicate key 'now'",
    )
    instance = tmp_path / "i.json"
    instance.write_text('{"capacity": 4, "capacity": 400, "groups": []}')
    _refused(
        capsys,
        ["solve", "mckp", "--instance", str(instance)],
        str(instance),
        "duplicate key 'capacity'",
    )


def _closed_pipe_run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The CLI in a real process whose stdout is a pipe with no reader left (``| head`` that
    has already exited): every write fails with EPIPE, deterministically."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "gpuplan", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        os.close(write_end)


def test_plan_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    state = _write(tmp_path / "state.json", STATE)
    proc = _closed_pipe_run(["plan", "--state", str(state), "--policy", "fifo"])
    assert (proc.returncode, proc.stderr) == (cli.STATUS_CLOSED_PIPE, "")


@pytest.mark.parametrize("argv", [["scenarios"], ["solve", "--list"]])
def test_tables_into_a_closed_pipe_exit_quietly(argv: list[str]) -> None:
    """rich's own handler exited 1 here; the CLI's handling is the same for every command."""
    proc = _closed_pipe_run(argv)
    assert (proc.returncode, proc.stderr) == (cli.STATUS_CLOSED_PIPE, "")


def test_plan_into_head_through_a_shell(tmp_path: Path) -> None:
    """The issue's own command: ``gpuplan plan ... | head -c 1``; nothing on stderr."""
    state = _write(tmp_path / "state.json", STATE)
    cmd = (
        f"{sys.executable} -m gpuplan plan --state {state} --policy fifo | head -c 1; "
        'echo " ${PIPESTATUS[0]}"'
    )
    proc = subprocess.run(
        ["bash", "-c", cmd], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.stderr == "", proc.stderr
    first, status = proc.stdout.split(" ")
    assert first == "{" and status.strip() in ("0", str(cli.STATUS_CLOSED_PIPE))


# ----------------------------------------------------------------------- 3. --out and links
def test_solve_out_symlink_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    link = tmp_path / "out"
    link.symlink_to(victim)
    _refused(
        capsys,
        ["solve", "mckp", "--generate", "--size", "3", "--out", str(link)],
        str(link),
        "field 'out'",
        "symlink",
    )
    assert list(victim.iterdir()) == []


def test_solve_out_replaces_planted_links_never_follows_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    for name in ("solve.csv", "solve.png", "instance.json"):
        (out / name).symlink_to(victim / name)
    assert (
        cli.main(
            [
                "solve",
                "mckp",
                "--generate",
                "--size",
                "3",
                "--solvers",
                "dp,greedy",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert list(victim.iterdir()) == []
    for name in ("solve.csv", "solve.png", "instance.json"):
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0
    assert (out / "solve.csv").read_text().startswith("solver,status")
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("kind", ["symlink", "dangling", "/dev/null", "directory"])
def test_generate_instance_target_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    target = tmp_path / "x.json"
    if kind == "symlink":
        target.symlink_to(victim)
    elif kind == "dangling":
        target.symlink_to(tmp_path / "created-through-link.json")
    elif kind == "directory":
        target.mkdir()
    else:
        target = Path("/dev/null")
    _refused(
        capsys,
        ["solve", "mckp", "--generate", "--size", "3", "--instance", str(target)],
        str(target),
        "field 'instance'",
    )
    assert victim.read_text() == "{}"
    assert not (tmp_path / "created-through-link.json").exists()


def test_generate_instance_rewrites_a_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "x.json"
    target.write_text("old")
    assert cli.main(["solve", "mckp", "--generate", "--size", "3", "--instance", str(target)]) == 0
    assert json.loads(target.read_text())["groups"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]  # no temporary left


def _sweep_file(tmp_path: Path) -> Path:
    scenario = _write(tmp_path / "s.yaml", SCENARIO)
    return _write(
        tmp_path / "sweep.yaml", {"scenarios": [str(scenario)], "policies": ["fifo"], "seeds": [0]}
    )


@pytest.mark.parametrize("planted", ["out", "out/runs"])
def test_sweep_out_refuses_a_planted_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: str
) -> None:
    sweep = _sweep_file(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    if planted == "out/runs":
        out.mkdir()
    (tmp_path / planted).symlink_to(victim)
    _refused(
        capsys,
        ["sweep", str(sweep), "--out", str(out), "--workers", "1"],
        str(out),
        "field 'out'",
        "symlink",
    )
    assert list(victim.iterdir()) == []


def test_sweep_replaces_planted_files_in_its_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Links at results.csv / report.html are replaced, and a FIFO where a run file would be
    is not read (it would block): the run is computed and written in its place."""
    sweep = _sweep_file(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    for name in ("results.csv", "report.html"):
        (out / name).symlink_to(victim / name)
    os.mkfifo(out / "runs" / "hostile__fifo__seed0.json")
    with _alarm():
        assert cli.main(["sweep", str(sweep), "--out", str(out), "--workers", "1"]) == 0
    capsys.readouterr()
    assert list(victim.iterdir()) == []
    assert not (out / "results.csv").is_symlink()
    assert (out / "results.csv").read_text().startswith("scenario,policy,seed")
    run = out / "runs" / "hostile__fifo__seed0.json"
    assert run.is_file() and json.loads(run.read_text())["policy"] == "fifo"
