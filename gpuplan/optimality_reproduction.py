"""How far each online policy is from ``offline-optimal`` on the small seeded instances of
:mod:`gpuplan.scenarios.optimality_instances`, as the rows ``gpuplan reproduce
optimality-rigid`` / ``optimality-elastic`` (the policies' table), ``-offline`` (the offline
solves' summary line) and ``-open`` (the instances where the search did not close) print.

Per instance (:func:`instance_row`): every policy of the kind is simulated without overheads,
``offline-optimal`` solves the instance (the exact continuous branch and bound with its default
LP limit, deterministic; on a rigid instance where it does not close, also the slotted CP-SAT
fallback with a deterministic budget), and the row keeps each average JCT, the proven lower
bound and the solve's figures. A full run (100 instances of a kind) is minutes of CPU, too long
for the test suite, so a run can append its rows to a JSON-lines log (``--log``) and every
table can be computed from such a recording (``--from-log``): docs/results/data holds the
recording the doc quotes, and a test recomputes a few of its rows. Timings in a row
(``offline_wall_s``, ``offline_cpu_s``) are measurements, not results. This module sits beside
the public API (it runs the simulator), not in ``scenarios``.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from statistics import mean
from typing import Any

from gpuplan.models.errors import InputError
from gpuplan.out_paths import check_file_target
from gpuplan.scenarios.input_files import read_text
from gpuplan.scenarios.optimality_instances import (
    NO_OVERHEADS,
    SLOT_S,
    policies_of,
    small_instance,
)

Row = dict[str, Any]
KINDS = ("rigid", "elastic")
INSTANCES = 100
"""Instances of each kind in the doc's tables (seeds 0-99)."""
MAX_INSTANCES = 10_000
"""The most instances one run takes (a run of the doc's 100 elastic ones is about 18 CPU-min)."""
MAX_SEED = 2**31 - 1
WORK_S = 1.0
"""CP-SAT's deterministic seconds for the rigid fallback."""
NOISE = 1e-5
"""Relative JCT difference below which a policy counts as equal to the offline schedule (the
elastic schedule does 1e-6 more work per job than the LP optimum, see offline_elastic)."""
TIMINGS = ("offline_wall_s", "offline_cpu_s")
"""Fields of a row that are measurements (differ between runs of the same instance)."""
SOLVE_FIELDS = ("offline", "lower", "optimal", "slotted", "lps")


def avg_jct(cluster: Any, jobs: list[Any], policy: object) -> float:
    """The average JCT of ``policy`` on the instance without overheads (inf if a job never
    finishes, so a stuck policy shows in the table instead of aborting the run)."""
    from gpuplan.executors.simulator.run import simulate

    result, _, _ = simulate(cluster, jobs, policy, overheads=NO_OVERHEADS)  # type: ignore[arg-type]
    jcts = [r.jct for r in result.jobs]
    if any(j is None for j in jcts):
        return float("inf")
    return mean(jcts)  # type: ignore[arg-type]


def instance_row(seed: int, kind: str, work_s: float = WORK_S) -> Row:
    """Every policy's average JCT on one instance, the offline schedule's, its proven lower
    bound and its solve's figures (closed or not, slotted fallback kept or not, LPs)."""
    from gpuplan.solver_core.policies.baselines.offline_optimal import (
        OfflineOptimal,
        OfflineParams,
    )
    from gpuplan.solver_core.registry import make_policy

    cluster, jobs = small_instance(seed, kind == "elastic")
    offline = OfflineOptimal(OfflineParams(slot_s=SLOT_S, work_s=work_s), seed)
    t0, c0 = time.perf_counter(), time.process_time()
    row: Row = {"kind": kind, "seed": seed, "offline": avg_jct(cluster, jobs, offline)}
    row["offline_wall_s"] = time.perf_counter() - t0
    row["offline_cpu_s"] = time.process_time() - c0
    assert offline.schedule is not None and offline.bound is not None
    row["lower"] = offline.schedule.lower_bound_s
    row["optimal"] = float(offline.bound.status == "optimal")
    row["slotted"] = float(offline.bound.method == "slotted")
    row["lps"] = float(getattr(offline.schedule, "nodes", 0))
    for p in policies_of(kind):
        row[p] = avg_jct(cluster, jobs, make_policy(p, seed=seed))
    return row


def run_rows(
    kind: str, instances: int = INSTANCES, first: int = 0, log: Path | None = None
) -> list[Row]:
    """Rows of seeds ``first`` .. ``first + instances - 1``, one process; with ``log``, each
    row is appended there as it completes (a long run can be read, or split, before it ends)."""
    rows = []
    for seed in range(first, first + instances):
        row = instance_row(seed, kind)
        rows.append(row)
        if log is not None:
            _append_line(log, json.dumps(row))
    return rows


def _append_line(path: Path, line: str) -> None:
    """Append one line to the log, refusing a link planted at its name since the run began
    (``O_NOFOLLOW``); a split run's processes each append whole lines (``O_APPEND``)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as err:
        raise InputError(f"cannot append to the log: {err.strerror}", source=str(path)) from None
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def read_log(path: Path, kind: str) -> list[Row]:
    """The rows of ``kind`` in a log (rows of the other kind are skipped; a seed recorded
    twice, as split runs may, keeps its first row), in seed order. A missing file, a line that
    is not a row or a row missing a number is an :class:`InputError` naming the line."""
    # A regular file of bounded size only: a FIFO or /dev/zero is refused, not read.
    lines = read_text(path, "the log").splitlines()
    by_seed: dict[int, Row] = {}
    for n, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
        except ValueError:
            raise InputError("not a JSON object", source=str(path), row=n) from None
        if not isinstance(row, dict):
            raise InputError("not a JSON object", source=str(path), row=n)
        if row.get("kind") not in KINDS:
            raise InputError("must be rigid or elastic", source=str(path), row=n, field="kind")
        seed = row.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise InputError("must be an integer >= 0", source=str(path), row=n, field="seed")
        if row["kind"] != kind:
            continue
        for field in (*SOLVE_FIELDS, *policies_of(kind)):
            value = row.get(field)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
                raise InputError("must be a number", source=str(path), row=n, field=field)
            # A policy's average JCT may be +inf (it left a job unfinished: avg_jct); no other
            # value may be infinite.
            if math.isinf(value) and (field in SOLVE_FIELDS or value < 0):
                raise InputError("must be finite", source=str(path), row=n, field=field)
        for field in ("offline", "lower"):
            if not 0 < row[field] < math.inf:
                raise InputError("must be positive", source=str(path), row=n, field=field)
        by_seed.setdefault(seed, row)
    if not by_seed:
        raise InputError(f"no {kind} rows", source=str(path))
    return [by_seed[s] for s in sorted(by_seed)]


def rows_for(
    kind: str,
    from_log: Path | None = None,
    log: Path | None = None,
    first: int | None = None,
    instances: int | None = None,
) -> list[Row]:
    """The instance rows a table is computed from: a recording, or a run (seeds 0-99 unless
    ``first`` / ``instances`` say otherwise)."""
    if from_log is not None:
        if log is not None or first is not None or instances is not None:
            raise InputError(
                "--from-log tabulates a recording; --log, --first and --instances are for a run",
                field="from-log",
            )
        return read_log(from_log, kind)
    if first is not None and not 0 <= first <= MAX_SEED:
        raise InputError(f"must be a seed in 0..{MAX_SEED}", field="first")
    if instances is not None and not 1 <= instances <= MAX_INSTANCES:
        raise InputError(
            f"must be 1..{MAX_INSTANCES} (each instance is seconds of CPU)", field="instances"
        )
    if log is not None:
        # Checked before any instance runs: a symlink, a folder or a device is refused now,
        # not after minutes of solving; rows are then appended without following a link.
        check_file_target(str(log), "log")
    return run_rows(kind, INSTANCES if instances is None else instances, first or 0, log)


def _pct(x: float) -> float:
    return 100 * x


def policy_table(kind: str, rows: list[Row]) -> list[Row]:
    """One row per policy (``offline-optimal`` first): its mean and worst gap to the offline
    schedule U, instances where it beats U (by more than :data:`NOISE`) or equals it (within),
    its mean gap to the best average JCT known on each instance and to the proven lower bound
    L (an over-estimate of the true gap), and its least ratio to U."""
    names = ["offline", *policies_of(kind)]
    out = []
    for p in names:
        gaps = [(r[p] - r["offline"]) / r["offline"] for r in rows]
        known = [(r[p] - min(r[q] for q in names)) / min(r[q] for q in names) for r in rows]
        lower = [(r[p] - r["lower"]) / r["lower"] for r in rows]
        out.append(
            {
                "policy": "offline-optimal" if p == "offline" else p,
                "gap_mean_pct": _pct(mean(gaps)),
                "gap_max_pct": _pct(max(gaps)),
                "better": sum(1 for g in gaps if g < -NOISE),
                "equal": sum(1 for g in gaps if abs(g) <= NOISE),
                "gap_best_known_pct": _pct(mean(known)),
                "gap_lower_pct": _pct(mean(lower)),
                "ratio_min": min(r[p] / r["offline"] for r in rows),
            }
        )
    return out


def offline_summary(kind: str, rows: list[Row]) -> list[Row]:
    """One row: how the offline solves went (instances, closed by the search, LPs per instance
    median (the upper one) and max, proven gap (U - L) / L mean and max, and its max over the
    closed instances (the replay's margin), slotted fallback kept)
    and, as measurements, the solve + replay time per instance (median, max, total)."""
    n = len(rows)
    proven = [(r["offline"] - r["lower"]) / r["lower"] for r in rows]
    lps = sorted(r["lps"] for r in rows)
    row: Row = {
        "kind": kind,
        "instances": n,
        "closed": int(sum(r["optimal"] for r in rows)),
        "lps_median": lps[n // 2],
        "lps_max": lps[-1],
        "proven_gap_mean_pct": _pct(mean(proven)),
        "proven_gap_max_pct": _pct(max(proven)),
        "proven_gap_closed_max_pct": _pct(
            max((g for g, r in zip(proven, rows, strict=True) if r["optimal"]), default=0.0)
        ),
        "slotted": int(sum(r["slotted"] for r in rows)),
    }
    for t in TIMINGS:
        if all(t in r for r in rows):
            times = sorted(r[t] for r in rows)
            row[f"{t}_median"] = times[n // 2]
            row[f"{t}_max"] = times[-1]
            row[f"{t}_total"] = sum(times)
    return [row]


def open_instances(kind: str, rows: list[Row]) -> list[Row]:
    """One row per instance the search did not close: its seed, LPs, the schedule's average
    JCT U, the proven lower bound L, the proven gap, and whether the slotted fallback's
    schedule was kept."""
    return [
        {
            "seed": r["seed"],
            "lps": r["lps"],
            "offline_s": r["offline"],
            "lower_s": r["lower"],
            "proven_gap_pct": _pct((r["offline"] - r["lower"]) / r["lower"]),
            "slotted": int(r["slotted"]),
        }
        for r in rows
        if not r["optimal"]
    ]


def rigid_table(**options: Any) -> list[Row]:
    """``gpuplan reproduce optimality-rigid``."""
    return policy_table("rigid", rows_for("rigid", **options))


def elastic_table(**options: Any) -> list[Row]:
    """``gpuplan reproduce optimality-elastic``."""
    return policy_table("elastic", rows_for("elastic", **options))


def rigid_offline(**options: Any) -> list[Row]:
    """``gpuplan reproduce optimality-rigid-offline``."""
    return offline_summary("rigid", rows_for("rigid", **options))


def elastic_offline(**options: Any) -> list[Row]:
    """``gpuplan reproduce optimality-elastic-offline``."""
    return offline_summary("elastic", rows_for("elastic", **options))


def rigid_open(**options: Any) -> list[Row]:
    """``gpuplan reproduce optimality-rigid-open``."""
    return open_instances("rigid", rows_for("rigid", **options))


def elastic_open(**options: Any) -> list[Row]:
    """``gpuplan reproduce optimality-elastic-open``."""
    return open_instances("elastic", rows_for("elastic", **options))
