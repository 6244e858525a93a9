"""Every documented ``gpuplan`` command in docs/results/*.md prints the numbers the doc gives
(issue 29, acceptance: "a test runs every documented gpuplan command ... and compares its
output with the number printed in the doc").

A doc marks a checked command as one statement::

    `gpuplan compare --scenario S --policies a,b --json` prints `avg_jct_s` 851, 819.765;
    `makespan_s` 1249, 1023.529.

that is, the command in backticks (it must end in ``--json``), the word ``prints``, then one or
more ``` `FIELD` ``` followed by one number per row of the JSON output (policies x seeds, in
order; with ``--seeds`` a row is a policy's mean; for ``gpuplan reproduce NAME --json``, the
experiment's rows), numbers without thousands separators,
groups separated by ``;``. Each number is
compared at the precision written (``1249`` is the value rounded to a whole number,
``1023.529`` to three decimals); a field that is null in a row is written ``-``. A
``gpuplan compare|simulate --scenario ...`` command in backticks (or a ``gpuplan reproduce
NAME ...`` or a ``gpuplan slurm-lab-report ...``) that does not end in ``--json`` or is
followed by no ``prints`` is a failure: a documented command either is checked or is not
written as one. The one exception: ``gpuplan slurm-lab-report
docs/results/data/slurm-runs.jsonl --run R`` without ``--json`` prints slurm.md's table of run
R, which ``tests/docs/test_slurm_bench_doc.py`` compares with the doc (it must have the run's
table markers). slurm.md's statements quote the recorded lab rows (``slurm-lab-report``,
relative paths from the repository root, where the commands run) and the simulator's
prediction (``reproduce slurm-*``). ``gpu.md`` (hardware) is not read. The Tiresias rows of
fidelity.md are a table of their own, checked by ``tests/policies/test_tiresias_upstream.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuplan.cli import main

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
SKIPPED_DOCS = {"gpu.md"}
COMMANDS = "compare|simulate|reproduce|slurm-lab-report"
COMMAND = re.compile(rf"`(gpuplan (?:{COMMANDS}) [^`]*?--json)`")
ANY_COMMAND = re.compile(rf"`(gpuplan (?:{COMMANDS}) [^`]*)`")
"""Any compare / simulate / reproduce / slurm-lab-report command in backticks, ``--json`` or not
(see :func:`test_every_documented_json_command_is_checked`)."""
VALUE = r"(?:-?\d+(?:\.\d+)?|-(?!\d))"
"""One row's number, or ``-`` where the row's field is null (Slurm alone has no controller)."""
GROUP = re.compile(rf"\s*`(\w+)`((?:\s*{VALUE}\s*,)*\s*{VALUE})\s*;?")
NUMBER = re.compile(VALUE)
TABLE_COMMAND = re.compile(
    r"gpuplan slurm-lab-report docs/results/data/slurm-runs\.jsonl --run (\w+)"
)
"""The one command written without ``--json``: its output is a table of slurm.md, compared
whole by tests/docs/test_slurm_bench_doc.py (the run's ``<!-- runR:begin -->`` markers)."""
SLOW = ("sidecar-wl", "philly-11cb48", "philly-2869ce --policies srtf", "aryl-philly", "aryl-itp")
"""Commands taking tens of seconds on a loaded 2-core machine (philly-11cb48: 16,091 jobs, about
a minute; the Aryl windows, 3,600-5,500 jobs with loan events, 30-60 s a policy; 2869ce's three
policies x three seeds, about 30 s): marked slow (still in make test)."""


@dataclass(frozen=True)
class Check:
    doc: str
    line: int
    command: str
    expected: tuple[tuple[str, tuple[str, ...]], ...]


def _docs() -> list[Path]:
    return sorted(p for p in RESULTS.glob("*.md") if p.name not in SKIPPED_DOCS)


def _checks(path: Path) -> list[Check]:
    text = path.read_text(encoding="utf-8")
    out: list[Check] = []
    for match in COMMAND.finditer(text):
        rest = text[match.end() :]
        head = re.match(r"\s+prints\s", rest)
        if head is None:
            continue
        pos, groups = head.end(), []
        while (g := GROUP.match(rest, pos)) is not None:
            groups.append((g.group(1), tuple(NUMBER.findall(g.group(2)))))
            pos = g.end()
        if groups:
            line = text.count("\n", 0, match.start()) + 1
            out.append(Check(path.name, line, match.group(1), tuple(groups)))
    return out


CHECKS = [c for p in _docs() for c in _checks(p)]


def _reads_traces(command: str) -> bool:
    """Whether the command's scenario reads a file of the shared traces folder (a file
    shipped beside the scenario, philly-default's CSV, is not one), or its reproduction
    says it does."""
    from gpuplan.scenarios.build import resolve_scenario

    argv = shlex.split(command)
    if argv[1] == "slurm-lab-report":
        return False  # recorded rows in docs/results/data
    if argv[1] == "reproduce":
        from gpuplan.reproductions import reproduction

        return reproduction(argv[2]).traces
    spec, folder = resolve_scenario(argv[argv.index("--scenario") + 1])
    path = spec.workload.path
    return path is not None and not (folder / path).is_file()


def _param(c: Check) -> object:
    marks = [pytest.mark.slow] if any(s in c.command for s in SLOW) else []
    if _reads_traces(c.command):
        marks.append(pytest.mark.traces)
    return pytest.param(c, id=f"{c.doc}:{c.line}", marks=marks)


def test_the_marked_commands_are_found() -> None:
    """The docs this issue touched carry marked commands (guards the parser itself)."""
    docs = {c.doc for c in CHECKS}
    assert {
        "sidecar.md",
        "fidelity.md",
        "edl.md",
        "optimality.md",
        "aryl.md",
        "afs.md",
        "interference.md",
        "ojpp.md",
        "slurm.md",
    } <= docs, docs


def test_every_documented_json_command_is_checked() -> None:
    """A full ``gpuplan compare|simulate --scenario ...`` command in a results doc ends in
    ``--json`` and is followed by ``prints`` and its numbers (this test's format or the
    Tiresias table's; ``prints`` then words is not a statement the parser reads): a command
    written without ``--json`` would name numbers (a table beside it) that nothing compares,
    as interference.md's did before it was rewritten."""
    unchecked = []
    for path in _docs():
        text = path.read_text(encoding="utf-8")
        for match in ANY_COMMAND.finditer(text):
            command = match.group(1)
            if "--scenario" not in command and not command.startswith(
                ("gpuplan reproduce ", "gpuplan slurm-lab-report ")
            ):
                continue
            where = f"{path.name}:{text.count(chr(10), 0, match.start()) + 1}"
            after = text[match.end() : match.end() + 400]
            table = TABLE_COMMAND.fullmatch(command.strip())
            if table and f"<!-- run{table.group(1)}:begin -->" in text:
                continue  # a table test_slurm_bench_doc.py compares whole
            if not command.rstrip().endswith("--json"):
                unchecked.append(f"{where} (not --json)")
            elif not re.match(r"\s*(\|\s*)?prints\s+(`\w+`|-?\d)", after):
                unchecked.append(where)
    assert not unchecked, f"documented commands without their numbers: {unchecked}"


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


@pytest.mark.parametrize("check", [_param(c) for c in CHECKS])
def test_documented_command_prints_the_documented_numbers(
    check: Check, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a documented path (slurm.md's and optimality.md's recordings) is relative to the
    # repository root, where the doc's reader runs the command
    monkeypatch.chdir(ROOT)
    if _reads_traces(check.command):
        request.getfixturevalue("traces")  # skip (or fail under CI) without the shared traces
    argv = shlex.split(check.command)[1:]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    assert code == 0, check.command
    bad = _mismatches(check, json.loads(out.getvalue()))
    assert not bad, f"{check.doc}:{check.line} ({check.command}): {bad}"


def _mismatches(check: Check, rows: list[dict]) -> list[str]:
    """Each field whose printed values, rounded as the doc writes them, differ from the doc."""
    bad = []
    for field, numbers in check.expected:
        if len(numbers) != len(rows):
            bad.append(f"{field}: {len(numbers)} numbers for {len(rows)} rows")
            continue
        got = [
            None if r[field] is None else round(float(r[field]), _decimals(n))
            for r, n in zip(rows, numbers, strict=True)
        ]
        if got != [None if n == "-" else float(n) for n in numbers]:
            bad.append(f"{field}: printed {got}, doc {list(numbers)}")
    return bad


def test_the_parser_reads_a_statement_and_the_comparison_can_fail(tmp_path: Path) -> None:
    """A marked statement over two lines, its groups and precision; a wrong number, a
    missing row and a rounding difference are each reported."""
    doc = tmp_path / "x.md"
    doc.write_text(
        "Text.\n`gpuplan compare --scenario s --policies a,b --json` prints `avg_jct_s` 851,\n"
        "819.8; `resizes` 0, 37. Next sentence 12, 13.\n"
    )
    (check,) = _checks(doc)
    assert check.expected == (("avg_jct_s", ("851", "819.8")), ("resizes", ("0", "37")))
    good = [{"avg_jct_s": 850.6, "resizes": 0}, {"avg_jct_s": 819.76, "resizes": 37}]
    assert _mismatches(check, good) == []
    assert _mismatches(check, [good[0], {**good[1], "resizes": 36}]) != []
    assert _mismatches(check, [good[0], {**good[1], "avg_jct_s": 819.74}]) != []
    assert _mismatches(check, good[:1]) != []


def test_a_null_field_is_written_as_a_dash(tmp_path: Path) -> None:
    """``-`` stands for a row whose field is null (Slurm alone's controller CPU), and only
    there: a dash against a number, or a number against a null, is a mismatch."""
    doc = tmp_path / "x.md"
    doc.write_text(
        "`gpuplan slurm-lab-report rows.jsonl --run A --json` prints `controller_cpu_s` -,\n"
        "108.0, -; `split` 0, 0, 0. A dash - here is prose.\n"
    )
    (check,) = _checks(doc)
    assert check.expected == (("controller_cpu_s", ("-", "108.0", "-")), ("split", ("0",) * 3))
    rows = [{"controller_cpu_s": None, "split": 0}, {"controller_cpu_s": 107.96, "split": 0}]
    assert _mismatches(check, [*rows, rows[0]]) == []
    assert _mismatches(check, [*rows, rows[1]]) != []
    assert _mismatches(check, [rows[1], rows[1], rows[0]]) != []


def test_the_optimality_scenarios_are_the_benchs_instances() -> None:
    """optimality.md's checked commands run embedded scenarios that write out instances of
    :mod:`gpuplan.scenarios.optimality_instances` (``gpuplan reproduce optimality-*``): the same
    cluster, jobs and (no) overheads, so the doc's per-instance rows are the tables' rows."""
    from gpuplan.scenarios.build import build, resolve_scenario
    from gpuplan.scenarios.optimality_instances import NO_OVERHEADS, small_instance

    instances = (("optimality-rigid-5", 5, False), ("optimality-elastic-1", 1, True))
    for name, seed, elastic in instances:
        spec, folder = resolve_scenario(name)
        built = build(spec, folder)
        cluster, jobs = small_instance(seed, elastic)
        assert built.jobs == jobs, name
        assert [(n.gpus, n.gpu_type) for n in built.cluster.nodes] == [
            (n.gpus, n.gpu_type) for n in cluster.nodes
        ], name
        assert spec.overheads == NO_OVERHEADS, name
        assert spec.seed == seed, name


def test_the_afs_sweep_file_declares_the_benchs_264_runs() -> None:
    """afs.md names ``docs/results/data/afs-reproduction.sweep.yaml`` as the way to rerun the
    whole reproduction: the 11 Table 3 VCs (in order) x the bench's 8 policies x seeds 0-2."""
    from gpuplan.sweep_plan import expand_runs, load_sweep
    from tests.bench.afs_vcs import AWARE, TRACES, UNAWARE

    path = RESULTS / "data" / "afs-reproduction.sweep.yaml"
    assert "afs-reproduction.sweep.yaml" in (RESULTS / "afs.md").read_text(encoding="utf-8")
    sweep = load_sweep(path)
    assert sweep.scenarios == [f"philly-{TRACES[k]}" for k in sorted(TRACES)]
    assert sweep.policies == AWARE + UNAWARE
    assert sweep.seeds == [0, 1, 2]
    runs = expand_runs(sweep, path)
    assert len(runs) == 264
    assert len({r.key for r in runs}) == 264


@pytest.mark.traces
@pytest.mark.parametrize(
    ("name", "trace"),
    [
        ("aryl-philly-6c71a0", "Philly VC 6c71a0, days 18-32"),
        ("aryl-itp-cluster07", "ITP cluster07, days 14-21"),
    ],
)
def test_the_aryl_scenarios_are_the_benchs_replays(traces: Path, name: str, trace: str) -> None:
    """aryl.md's checked commands run embedded scenarios that rebuild ``tests/bench/aryl.py``'s
    replays: the same cluster, jobs and loan events (``loaning_scenario`` on the bench's
    window); the ``-training`` twin has the same jobs and cluster without loan events."""
    from gpuplan import api
    from gpuplan.scenarios.inference import loaning_scenario
    from tests.bench.aryl import result_traces

    spec = result_traces()[trace]
    rows = spec["rows"]()
    origin = min(r.submit_time for r in rows)
    rows = [r.model_copy(update={"submit_time": r.submit_time - origin}) for r in rows]
    ref = loaning_scenario(rows, spec["training"], spec["inference"], seed=0, name=trace)
    prepared = api.prepare(name)
    assert prepared.cluster == ref.cluster
    assert prepared.jobs == ref.jobs
    assert list(prepared.events) == list(ref.events)
    alone = api.prepare(f"{name}-training")
    # the bench's cluster with its inference pool, which never lends (loaning.lend: false)
    assert alone.jobs == ref.jobs and not alone.events
    assert alone.cluster == ref.cluster
