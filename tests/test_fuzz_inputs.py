"""Fuzzing the CLI's file inputs: every scenario or state file either runs or is refused in one
line with exit 2 — never a traceback, never a hang.

Generated files start from a valid scenario (or state snapshot) and get one to three mutations
at random places: wrong types, missing keys, huge and non-finite numbers, unicode, long strings,
deep nesting, or the whole file replaced by random bytes. The CLI runs in-process (fast), under
an alarm that turns a hang into a failure; a handful of cases also run as real subprocesses.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan import cli

HANG_S = 30
"""An in-process run taking longer than this is a hang (a real run here takes < 1 s)."""

BASE_SCENARIO: dict[str, Any] = {
    "name": "fuzz",
    "seed": 1,
    "cluster": {"nodes": 2, "gpus_per_node": 4},
    "workload": {"source": "inline", "inline_jobs": [
        {"id": "a", "submit_time": 0, "requested_gpus": 2, "duration": 100},
        {"id": "b", "submit_time": 5, "requested_gpus": 4, "duration": 50,
         "elasticity": {"min_gpus": 1, "max_gpus": 8}},
    ]},
    "overheads": {"start_s": 1, "restart_s": 10},
}

BASE_STATE: dict[str, Any] = {
    "now": 100.0,
    "cluster": {"nodes": [{"name": "n1", "gpus": 4}, {"name": "n2", "gpus": 4}]},
    "jobs": [
        {"spec": {"id": "a", "submit_time": 0, "requested_gpus": 2, "duration": 100},
         "done_iterations": 10.0, "allocation": {"job_id": "a", "placement": {"n1": [0, 1]}}},
        {"spec": {"id": "b", "submit_time": 50, "requested_gpus": 4, "duration": 300}},
    ],
}

JUNK = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -1e308, 2**63, 10**4000, -1, 0]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40), st.text(min_size=5000, max_size=6000, alphabet="ab€\u202e\x00"),
    st.lists(st.integers(), max_size=5), st.dictionaries(st.text(max_size=5), st.integers(),
                                                          max_size=3),
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in ``doc`` a mutation can hit (keys of mappings, indexes of lists)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield (*prefix, i)
            yield from _paths(value, (*prefix, i))


def _nest(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    doc = copy.deepcopy(base)
    places = list(_paths(doc))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(places))
        parent = doc
        for step in path[:-1]:
            if not isinstance(parent, (dict, list)):
                break
            try:
                parent = parent[step]
            except (KeyError, IndexError, TypeError):
                break
        else:
            if not isinstance(parent, (dict, list)):
                continue
            how = draw(st.sampled_from(["junk", "delete", "nest", "extra"]))
            with contextlib.suppress(KeyError, IndexError, TypeError):
                if how == "delete":
                    del parent[path[-1]]
                elif how == "nest":
                    parent[path[-1]] = _nest(draw(st.sampled_from([50, 500])))
                elif how == "extra" and isinstance(parent, dict):
                    parent[draw(st.text(min_size=1, max_size=8))] = draw(JUNK)
                else:
                    parent[path[-1]] = draw(JUNK)
    return doc


def _dump(doc: Any, fmt: str) -> bytes:
    if fmt == "json":
        return json.dumps(doc, allow_nan=True).encode()
    return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")


@contextlib.contextmanager
def _hang_guard() -> Iterator[None]:
    def fire(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"the CLI ran longer than {HANG_S} s: a hang")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with _hang_guard():
        try:
            code = cli.main(argv)
        except SystemExit as exit_:  # argparse usage errors
            code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _assert_ran_or_refused(code: int, err: str, where: str) -> None:
    assert "Traceback" not in err, f"{where}: traceback\n{err}"
    assert code in (0, 2), f"{where}: exit {code}\n{err}"
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "error" in lines[0], f"{where}: not one line\n{err}"


FUZZ = settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                        HealthCheck.too_slow])


@FUZZ
@given(doc=mutated(BASE_SCENARIO), fmt=st.sampled_from(["yaml", "json"]))
def test_fuzzed_scenario_files_run_or_are_refused_in_one_line(
        doc: Any, fmt: str, tmp_path_factory: pytest.TempPathFactory,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / f"scenario.{fmt}"
    path.write_bytes(_dump(doc, fmt))
    code, _, err = _run_cli(["simulate", "--scenario", str(path), "--policy", "srtf"], capsys)
    _assert_ran_or_refused(code, err, path.read_text("utf-8", "replace")[:400])


@FUZZ
@given(doc=mutated(BASE_STATE))
def test_fuzzed_state_files_plan_or_are_refused_in_one_line(
        doc: Any, tmp_path_factory: pytest.TempPathFactory,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "state.json"
    path.write_bytes(_dump(doc, "json"))
    code, out, err = _run_cli(["plan", "--state", str(path), "--policy", "srsf"], capsys)
    _assert_ran_or_refused(code, err, path.read_text("utf-8", "replace")[:400])
    if code == 0:
        plan = json.loads(out)
        ids = {j["spec"]["id"] for j in doc["jobs"]}
        assert set(plan["allocations"]) <= ids


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=0, max_size=2000))
def test_random_bytes_are_refused_in_one_line(data: bytes,
                                              tmp_path_factory: pytest.TempPathFactory,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path_factory.mktemp("bytes")
    for name, argv in (("s.yaml", ["simulate", "--scenario"]), ("st.json", ["plan", "--state"])):
        path = folder / name
        path.write_bytes(data)
        code, _, err = _run_cli([*argv, str(path), "--policy", "fifo"], capsys)
        _assert_ran_or_refused(code, err, repr(data[:80]))


def _scenario_with(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(("name", "mutate", "field"), [
    ("inf-duration", lambda d: d["workload"]["inline_jobs"][0].update(duration=math.inf),
     "duration"),
    ("inf-submit", lambda d: d["workload"]["inline_jobs"][0].update(submit_time=math.inf),
     "submit_time"),
    ("huge-duration", lambda d: d["workload"]["inline_jobs"][0].update(duration=1e15),
     "duration"),
    ("max-gpus", lambda d: d["workload"]["inline_jobs"][1]["elasticity"].update(
        max_gpus=2**63), "max_gpus"),
    ("negative-seed", lambda d: d.update(seed=-1), "seed"),
    ("server-size", lambda d: d.update(loaning={"servers": 2, "gpus_per_server": 300}),
     "gpus_per_server"),
])
def test_known_bad_scenarios_name_their_field(name: str, mutate: Any, field: str,
                                              tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    doc = copy.deepcopy(BASE_SCENARIO)
    mutate(doc)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = _run_cli(["simulate", "--scenario", str(path), "--policy", "fifo"], capsys)
    assert code == 2 and field in err and len(err.strip().splitlines()) == 1, err


def test_state_files_are_cross_checked(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
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
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(BASE_SCENARIO))
    existing = tmp_path / "file"
    existing.write_text("keep me")
    code, _, err = _run_cli(["simulate", "--scenario", str(scenario), "--policy", "fifo",
                             "--out", str(existing)], capsys)
    assert code == 2 and "not a directory" in err and existing.read_text() == "keep me"
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    code, _, err = _run_cli(["simulate", "--scenario", str(scenario), "--policy", "fifo",
                             "--out", str(link)], capsys)
    assert code == 2 and "symlink" in err and not (tmp_path / "elsewhere").exists()
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    (out / "summary.json").symlink_to(victim)
    code, _, err = _run_cli(["simulate", "--scenario", str(scenario), "--policy", "fifo",
                             "--out", str(out)], capsys)
    assert code == 0, err
    assert not victim.exists() and not (out / "summary.json").is_symlink()
    assert json.loads((out / "summary.json").read_text())[0]["policy"] == "fifo"
    assert not list(out.glob(".gpuplan-*")), "the staging directory was left behind"


@pytest.mark.parametrize("argv", [["--seed", "-1"], ["--seed", "1e3"]])
def test_negative_or_malformed_seeds_are_refused(argv: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run_cli(["simulate", "--scenario", "philly-default", "--policy", "fifo",
                             *argv], capsys)
    assert code == 2 and "--seed" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("name", "content"), [
    ("deep.yaml", "a: " + "[" * 100_000 + "]" * 100_000 + "\n"),
    ("digits.yaml", "name: x\nseed: " + "9" * 5000 + "\nworkload: {source: inline}\n"),
    ("bad-utf8.yaml", b"name: \xff\xfe\n"),
    ("state.json", '{"now": Infinity, "cluster": {"nodes": []}}'),
])
def test_hostile_files_in_a_real_process(name: str, content: str | bytes,
                                         tmp_path: Path) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    argv = (["plan", "--state", str(path)] if name.endswith(".json")
            else ["simulate", "--scenario", str(path)])
    proc = subprocess.run([sys.executable, "-m", "gpuplan", *argv, "--policy", "fifo"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_device_is_refused_not_read() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpuplan", "simulate", "--scenario",
                           "/dev/zero", "--policy", "fifo"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr
