"""The Slurm lab benchmark's measured tables (docs/results/slurm.md) from recorded rows.

The lab harness (``python -m tests.bench.slurm_vs_native``, root, a real Slurm) appends one
JSON line per mode it ran; docs/results/data/slurm-runs.jsonl keeps the rows of the runs the doc
quotes, each with a ``run`` key (A, B, C, S). Measurements are not reproducible bit for bit, so
the recorded rows are the evidence and this module is the arithmetic from them to the doc:
:func:`load_rows` reads and validates a rows file (a bad line is one :class:`InputError` naming
the file, the line and the field), :func:`report_rows` gives each mode's numbers as flat objects
(``gpuplan slurm-lab-report FILE --run A --json``) and :func:`report` the Markdown table.
Standard library only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from gpuplan.models.errors import InputError
from gpuplan.scenarios.input_files import read_text
from gpuplan.slurm_lab import BASELINES, FAIR_BASELINES, REFERENCE, Item, drain_bound

GATE_KINDS = ("start", "grow", "shrink", "preempt", "migrate")
GATE_COUNTS = ("proposed", "done", "skipped")
TIMES = ("drain", "mean", "p95")

Fail = Callable[[str | None, str], NoReturn]
"""Raises the :class:`InputError` for one line: ``fail(field, what was expected)``."""


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_times(value: object, key: str, fail: Fail, *, optional: bool) -> None:
    """``lab`` / ``sim``: an object of positive seconds ``drain``, ``mean``, ``p95``."""
    if value is None and optional:
        return
    if not isinstance(value, dict):
        fail(key, "an object of drain/mean/p95 seconds" + (" or null" if optional else ""))
    for t in TIMES:
        if not _number(value.get(t)) or value[t] <= 0:
            fail(f"{key}.{t}", "a positive finite number of seconds")


def _check_row(row: object, fail: Fail) -> None:
    """The fields the report reads, each of the right type (``fail(field, what)`` raises)."""
    if not isinstance(row, dict):
        fail(None, "a JSON object per line")
    if not isinstance(row.get("mode"), str) or not row["mode"]:
        fail("mode", "a mode name")
    if "run" in row and not isinstance(row["run"], str):
        fail("run", "a run name")
    if not _count(row.get("jobs")) or row["jobs"] == 0:
        fail("jobs", "a positive whole number of jobs")
    _check_times(row.get("lab"), "lab", fail, optional=False)
    _check_times(row.get("sim"), "sim", fail, optional=True)
    for key in ("split", "resizes", "stopped_by_restart"):
        if not _count(row.get(key)):
            fail(key, "a whole number >= 0")
    for key in ("cpu_s", "load_mean"):
        if not _number(row.get(key)) or row[key] < 0:
            fail(key, "a finite number >= 0")
    if "busy_while_queued" in row and not (
        _number(row["busy_while_queued"]) and 0 <= row["busy_while_queued"] <= 1
    ):
        fail("busy_while_queued", "a share between 0 and 1")
    if not isinstance(row.get("failed", []), list):
        fail("failed", "a list of job names")
    _check_gate(row.get("gate"), fail)
    for key in ("turnover_gap_mean_s", "release_to_run_mean_s"):
        if row.get(key) is not None and not _number(row[key]):
            fail(key, "a finite number of seconds or null")


def _check_gate(gate: object, fail: Fail) -> None:
    """``gate``: the restart gate's counters per kind of change (empty for Slurm alone)."""
    if not isinstance(gate, dict):
        fail("gate", "an object of per-kind counters")
    for kind, counts in gate.items():
        if kind not in GATE_KINDS or not isinstance(counts, dict):
            fail(f"gate.{kind}", f"one of {', '.join(GATE_KINDS)} with its counters")
        for c in GATE_COUNTS:
            if not _count(counts.get(c)):
                fail(f"gate.{kind}.{c}", "a whole number >= 0")


def _fail(source: str, line: int, field: str | None, what: str) -> NoReturn:
    raise InputError(f"expected {what}", source=source, row=line, field=field)


def load_rows(files: list[Path], run: str | None = None) -> list[dict[str, Any]]:
    """Recorded rows (JSON lines) from ``files`` in file order; with ``run``, only that run's
    (the ``run`` key docs/results/data/slurm-runs.jsonl gives each row). A file that cannot be
    read, a line that is not a valid row, a run no file has, or rows of one selection recorded
    on workloads of different sizes: :class:`InputError` (row = the line number)."""
    rows: list[dict[str, Any]] = []
    runs: dict[str, None] = {}
    for path in files:
        # A regular file of bounded size only: a FIFO or /dev/zero is refused, not read.
        text = read_text(path, "the rows file")
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            fail: Fail = partial(_fail, str(path), number)
            try:
                row = json.loads(line)  # NaN / Infinity: refused by the checks, field named
            except json.JSONDecodeError as err:
                raise InputError(
                    f"not a JSON object ({err.msg})", source=str(path), row=number
                ) from None
            _check_row(row, fail)
            runs[str(row.get("run"))] = None
            if run is None or row.get("run") == run:
                rows.append({**row, "_where": (str(path), number)})
    if run is not None and not rows:
        known = ", ".join(r for r in runs if r != "None") or "none"
        raise InputError(
            f"no rows of run {run!r}; runs recorded: {known}",
            source=", ".join(str(f) for f in files),
            field="run",
        )
    sizes = {r["jobs"] for r in rows}
    if len(sizes) > 1:
        source, number = next(r["_where"] for r in rows if r["jobs"] != rows[0]["jobs"])
        raise InputError(
            f"{rows[0]['jobs']} jobs in the first row, {sorted(sizes)} in all: one table "
            "needs one workload (select a run with --run)",
            source=source,
            row=number,
            field="jobs",
        )
    return [{k: v for k, v in r.items() if k != "_where"} for r in rows]


def _ratio(value: float, base: float) -> float | None:
    return value / base if base else None


def report_rows(rows: list[dict[str, Any]], items: list[Item]) -> list[dict[str, Any]]:
    """Per recorded row, the table's numbers as a flat object: measured drain / mean / p95 JCT
    and their ratios to ``slurm-nodes1`` of the same rows (``_x``) and to the lower bound, the
    prediction beside them and its error, the gate's counters (preemptions and resizes:
    ``gate_skipped`` of ``gate_proposed``; per kind ``gate_<kind>_<count>``), controller CPU
    (seconds, and over the drain: the share of one core), jobs stopped by the restart, failed
    jobs, the GPUs' share training while jobs waited, the machine's load, and the per-start
    means the harness recorded. Fields that do not apply to Slurm alone (controller, gate,
    restart) are null there."""
    bound = drain_bound(items)
    base = {r["mode"]: r["lab"] for r in rows if r["mode"] in BASELINES}
    ref = base.get(REFERENCE, {"drain": 0.0, "mean": 0.0})
    out = []
    for r in rows:
        lab, sim, managed = r["lab"], r["sim"], r["mode"] not in BASELINES
        gate = {k: v for k, v in r["gate"].items() if k != "start"}
        flat: dict[str, Any] = {
            "mode": r["mode"],
            "drain_s": lab["drain"],
            "drain_x": _ratio(lab["drain"], ref["drain"]),
            "drain_x_bound": lab["drain"] / bound,
            "mean_jct_s": lab["mean"],
            "mean_jct_x": _ratio(lab["mean"], ref["mean"]),
            "p95_jct_s": lab["p95"],
            "sim_drain_s": sim["drain"] if sim else None,
            "sim_drain_err": sim["drain"] / lab["drain"] - 1 if sim else None,
            "sim_mean_jct_s": sim["mean"] if sim else None,
            "sim_mean_jct_err": sim["mean"] / lab["mean"] - 1 if sim else None,
            "split": r["split"],
            "resizes": r["resizes"],
            "gate_skipped": sum(v["skipped"] for v in gate.values()) if managed else None,
            "gate_proposed": sum(v["proposed"] for v in gate.values()) if managed else None,
            "controller_cpu_s": r["cpu_s"] if managed else None,
            "controller_cpu_share": r["cpu_s"] / lab["drain"] if managed else None,
            "stopped_by_restart": r["stopped_by_restart"] if managed else None,
            "failed": len(r.get("failed", [])),
            "busy_while_queued": r.get("busy_while_queued"),
            "load": r["load_mean"],
            "turnover_gap_mean_s": r.get("turnover_gap_mean_s"),
            "release_to_run_mean_s": r.get("release_to_run_mean_s"),
            "bound_s": bound,
        }
        for kind in GATE_KINDS:
            for c in GATE_COUNTS:
                counts = r["gate"].get(kind)
                flat[f"gate_{kind}_{c}"] = counts[c] if managed and counts else None
        out.append(flat)
    return out


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def report(rows: list[dict[str, Any]], items: list[Item]) -> str:
    """The Markdown table of docs/results/slurm.md from measured rows (:func:`report_rows`)."""
    bound = drain_bound(items)
    base = {r["mode"]: r["lab"] for r in rows if r["mode"] in BASELINES}
    fair = [base[m] for m in FAIR_BASELINES if m in base]
    best_drain = min((b["drain"] for b in fair), default=0.0)
    best_mean = min((b["mean"] for b in fair), default=0.0)
    lines = [
        f"Lower bound on the drain (GPU-seconds / GPUs): {bound:.1f} s.",
        "",
        "| mode | drain s | x nodes1 | x bound | mean JCT s | x nodes1 | p95 JCT s | "
        "sim drain | sim mean | split | resizes | preempt/resize skipped by gate | "
        "controller CPU s | stopped by restart | failed | busy while queued | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in report_rows(rows, items):
        managed = f["mode"] not in BASELINES
        label = f["mode"] + (" (extra row: may split)" if f["mode"] == "slurm-gpus" else "")
        sim = (
            f"{f['sim_drain_s']:.1f} ({f['sim_drain_err']:+.0%}) | "
            f"{f['sim_mean_jct_s']:.1f} ({f['sim_mean_jct_err']:+.0%}) | "
            if f["sim_drain_s"] is not None
            else "- | - | "
        )
        lines.append(
            f"| {label} | {f['drain_s']:.1f} | {_x(f['drain_x'])} | "
            f"{f['drain_x_bound']:.3f} | {f['mean_jct_s']:.1f} | {_x(f['mean_jct_x'])} | "
            f"{f['p95_jct_s']:.1f} | "
            + sim
            + f"{f['split']} | {f['resizes']} | "
            + (f"{f['gate_skipped']} of {f['gate_proposed']}" if managed else "-")
            + f" | {f['controller_cpu_s'] if managed else '-'} | "
            + (f"{f['stopped_by_restart']}" if managed else "-")
            + f" | {f['failed']} | "
            + (f"{f['busy_while_queued']:.1%}" if f["busy_while_queued"] is not None else "-")
            + f" | {f['load']} |"
        )
    lines += ["", f"Better fair baseline: drain {best_drain:.1f} s, mean JCT {best_mean:.1f} s."]
    return "\n".join(lines)
