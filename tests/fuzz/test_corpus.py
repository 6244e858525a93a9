"""The checked-in corpus of hand-written hostile cases (tests/fuzz_corpus/cases.yaml): every
input finding of issue 23 by name, and more of the same families. Each entry states what must
happen (refused naming a field, clean, or quiet on a closed pipe); the test id is
``corpus-<kind>-<name>`` so ``pytest tests/fuzz -k corpus`` or ``-k qps`` selects them."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.scenarios.build import embedded_scenarios
from gpuplan.solver_core.problems.generate import generate

from .bases import SCENARIOS, SMALL, STATE, SWEEP, dump, write_secondary
from .harness import (
    HANG_S,
    Outcome,
    check,
    classify,
    run_in_process,
    run_subprocess,
    summary_oracle,
)

CORPUS = Path(__file__).resolve().parent.parent / "fuzz_corpus" / "cases.yaml"
CASES: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))
KINDS = {"scenario", "state", "solve", "sweep", "trace", "qps", "cli"}
AREAS = {"h-readers", "h-budget", "product"}


def _value(raw: Any, folder: Path) -> Any:
    """Expand the corpus's generated values and ``{dir}`` in strings."""
    if isinstance(raw, dict) and len(raw) == 1:
        ((key, arg),) = raw.items()
        if key == "repeat":
            return str(arg[0]) * int(arg[1])
        if key == "range":
            return list(range(1, int(arg) + 1))
        if key == "range_csv":
            return ",".join(str(i) for i in range(int(arg)))
        if key == "repeat_list":
            return [arg[0]] * int(arg[1])
    if isinstance(raw, dict):
        return {k: _value(v, folder) for k, v in raw.items()}
    if isinstance(raw, list):
        return [_value(v, folder) for v in raw]
    if isinstance(raw, str):
        return raw.replace("{dir}", str(folder))
    return raw


def _set(doc: Any, dotted: str, value: Any) -> None:
    """Set ``a.b.0.c`` in a document (list indexes are numbers), creating mappings."""
    keys = dotted.split(".")
    node = doc
    for key in keys[:-1]:
        step: Any = int(key) if isinstance(node, list) else key
        if isinstance(node, dict) and step not in node:
            node[step] = {}
        node = node[step]
    last: Any = int(keys[-1]) if isinstance(node, list) else keys[-1]
    node[last] = value


def _doc(base: Any, spec: dict[str, Any], folder: Path) -> Any:
    doc = copy.deepcopy(base)
    for dotted, value in (spec.get("set") or {}).items():
        _set(doc, dotted, _value(value, folder))
    return doc


def _scenario_base(spec: dict[str, Any]) -> dict[str, Any]:
    if "embedded" in spec:
        path = embedded_scenarios()[spec["embedded"]]
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if doc["workload"].get("path"):
            doc["workload"]["path"] = str(path.parent / doc["workload"]["path"])
        return doc
    return SCENARIOS[spec["base"]][0] if "base" in spec else SMALL


def _prepare(case: dict[str, Any], folder: Path) -> tuple[list[str], dict[str, str]]:
    """Write the case's files into ``folder``; its argv and the placeholders."""
    write_secondary(folder)
    slots = {"dir": str(folder)}
    if "scenario" in case:
        doc = _doc(_scenario_base(case["scenario"]), case["scenario"], folder)
        (folder / "scenario.yaml").write_bytes(dump(doc, "yaml"))
        slots["scenario"] = str(folder / "scenario.yaml")
    if "state" in case:
        (folder / "state.json").write_bytes(dump(_doc(STATE, case["state"], folder), "json"))
        slots["state"] = str(folder / "state.json")
    if "instance" in case:
        spec = case["instance"]
        base = generate(spec["problem"], 4, 1)
        path = folder / f"{spec['problem']}.json"
        path.write_bytes(dump(_doc(base, spec, folder), "json"))
        slots["instance"] = str(path)
    if "sweep" in case:
        (folder / "scenario.yaml").write_bytes(dump(SMALL, "yaml"))
        sweep = _doc(SWEEP, case["sweep"], folder)
        if "overrides" not in (case["sweep"].get("set") or {}):
            sweep["overrides"] = []
        (folder / "sweep.yaml").write_bytes(dump(sweep, "yaml"))
        slots["sweep"] = str(folder / "sweep.yaml")
    for name in case.get("mkdir", []):
        (folder / name).mkdir(parents=True, exist_ok=True)
    for name, text in (case.get("files") or {}).items():
        content = _value(text, folder)
        (folder / name).write_bytes(content.encode("utf-8"))
    for name in case.get("fifo", []):
        os.mkfifo(folder / name)
    for name, target in (case.get("symlink") or {}).items():
        (folder / name).symlink_to(folder / target)
    argv = case.get("argv") or {
        "sweep": ["sweep", "{sweep}", "--out", "{dir}/out", "--workers", "1"],
    }.get(
        case["kind"], ["simulate", "--scenario", "{scenario}", "--policy", _policy(case), "--json"]
    )
    expanded = [_value(a, folder) for a in argv]
    return [
        a.format(**slots) if "{" in a and "}" in a and len(a) < 300 else a for a in expanded
    ], slots


def _policy(case: dict[str, Any]) -> str:
    from .bases import policy_for

    return policy_for((case.get("scenario") or {}).get("base", "inline"))


def _into_closed_pipe(argv: list[str], folder: Path) -> tuple[int | None, str, str, str]:
    """``gpuplan ARGV | head -1``: stdout's reader goes away after one line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuplan", *argv],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    try:
        err = proc.stderr.read().decode("utf-8", "replace")
        code = proc.wait(timeout=HANG_S * 2)
    except subprocess.TimeoutExpired:
        proc.kill()
        return None, "", "", "did not exit after its reader went away"
    return code, "", err, ""


@pytest.mark.parametrize("case", CASES, ids=[f"corpus-{c['kind']}-{c['name']}" for c in CASES])
def test_corpus_case(case: dict[str, Any], tmp_path: Path) -> None:
    folder = tmp_path
    argv, _ = _prepare(case, folder)
    if case.get("stdout") == "head":
        code, out, err, why = _into_closed_pipe(argv, folder)
    elif case.get("process") == "sub":
        code, out, err, why = run_subprocess(argv, cwd=folder)
    else:
        code, out, err, why = run_in_process(argv, cwd=folder)
    names = case.get("names") or [str(folder)]
    oracle = summary_oracle if "--json" in argv and argv[0] in ("simulate", "compare") else None
    outcome = classify(code, out, err, why, names=names, oracle=oracle)
    expect = case["expect"]
    if expect == "quiet":
        # 141 (128 + SIGPIPE, what `cat` gives; docs/cli.md) with nothing on stderr is the
        # documented outcome; classify() calls any status but 0 and 2 internal, so the
        # closed-pipe statuses are judged here first
        if outcome.kind in ("hang", "traceback"):
            pass
        elif not err.strip() and code in (0, -signal.SIGPIPE, 128 + signal.SIGPIPE):
            outcome = Outcome("clean", code, out, err)
        elif outcome.kind != "internal":
            outcome = Outcome(
                "wrong-outcome", code, out, err, "output to a closed pipe must exit quietly"
            )
    elif expect == "refused" and outcome.kind == "clean":
        outcome = Outcome("accepted-nonsense", code, out, err, "must be refused")
    elif expect == "clean" and outcome.kind == "refused":
        outcome = Outcome("wrong-outcome", code, out, err, "valid input refused")
    elif (
        expect == "refused"
        and outcome.kind == "refused"
        and case.get("field")
        and case["field"] not in err
    ):
        outcome = Outcome("unnamed", code, out, err, f"the refusal does not name {case['field']!r}")
    victim = case.get("untouched")
    if victim and (folder / victim).read_text() != "keep me":
        outcome = Outcome("wrong-outcome", code, out, err, f"{victim} was written through")
    check(case["kind"], f"corpus {case['name']} [{case['area']}]", outcome)


def test_corpus_is_well_formed() -> None:
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "duplicate corpus case names"
    for case in CASES:
        assert case["kind"] in KINDS and case["area"] in AREAS, case["name"]
        assert case["expect"] in ("refused", "clean", "quiet", "any"), case["name"]
    why = [c for c in CASES if "why" in c]
    assert len(why) >= 45, "every input finding of issue 23 is a named case"
