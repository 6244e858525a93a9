"""Throughput profiles built from the public measurement tables in the shared traces folder.

Three sources, three different meanings of "an iteration", so each constructor states what its
numbers are:

* **Gavel** (``gavel/simulation_throughputs.json``, V100/P100/K80, 1/2/4/8 GPUs): whole-job
  training steps/s of 26 job types, isolated (``"null"``) and co-located in pairs, packed on one
  server and spread ("unconsolidated"). The only source with per-GPU-type measurements, so
  its profiles carry a per-type speed table (``ThroughputProfile.type_speed``).
* **Pollux** (``pollux/profiles/<model>/``, T4, 4 GPUs per node): seconds per step at a fixed
  *per-GPU* batch for each placement, i.e. weak scaling: the global batch grows with the GPUs.
* **ElasticFlow** (``elasticflow_profiles/throughputs_A100/*.csv``, A100, 1..64 GPUs):
  iterations/s at a fixed *global* batch (strong scaling, the AFS semantics).

Every malformed file raises :class:`~gpuplan.models.errors.InputError` naming the file, the row
(1-based line number, header = line 1) and the field, because these tables are user-replaceable
input and an operator must be able to fix them without reading a traceback.

Provenance: each profile's ``source`` names the table relative to the shared traces folder plus
the upstream repository and commit read from the ``SOURCES.md`` next to it, so a profile can be
traced back to the exact upstream file even after it has been copied into a scenario.
"""

from __future__ import annotations

import ast
import csv
import io
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuplan.models.errors import InputError
from gpuplan.models.throughput import Extrapolation, ThroughputProfile

from .input_files import MAX_TRACE_BYTES, parse_structured, read_text

__all__ = [
    "ColocationKey",
    "elasticflow_profile",
    "gavel_colocation",
    "gavel_profiles",
    "pollux_default_local_bsz",
    "pollux_profile",
    "source_label",
]

ColocationKey = tuple[str, str, str, int]
"""(worker_type, job_a, job_b, scale_factor) as used by :func:`gavel_colocation`."""

_UNCONSOLIDATED = "_unconsolidated"
_HEX40 = re.compile(r"\b[0-9a-f]{40}\b")
_BACKTICK = re.compile(r"`([^`]+)`")


# --------------------------------------------------------------------------- provenance
def source_label(path: Path | str) -> str:
    """``<table path relative to the traces folder> (<repo>@<commit>)`` for a shared table.

    The label is built from the nearest ``SOURCES.md`` at most three folders up, so it does not
    depend on where the traces folder is mounted: the AFS zoo embeds these labels and must be
    byte-identical whether it is rebuilt here or on another machine. Without a ``SOURCES.md`` the
    bare file name is used (a user's own table has no upstream to cite).
    """
    p = Path(path)
    start = p if p.is_dir() else p.parent
    for folder in (start, *list(start.parents)[:3]):
        sources = folder / "SOURCES.md"
        if sources.is_file():
            rel = p.resolve().relative_to(folder.resolve().parent).as_posix()
            repo, commit = _parse_sources(sources)
            origin = f"{repo}@{commit}" if repo and commit else (repo or commit)
            return f"{rel} ({origin})" if origin else rel
    return p.name


def _parse_sources(sources: Path) -> tuple[str, str]:
    """Upstream repository and commit from SOURCES.md rows ``| origin repo |`` / ``| commit |``."""
    repo = commit = ""
    try:
        text = read_text(sources, "SOURCES.md")
    except InputError:
        return repo, commit
    for line in text.splitlines():
        low = line.lower()
        if not repo and low.startswith("| origin repo"):
            m = _BACKTICK.search(line)
            repo = m.group(1) if m else ""
        elif not commit and low.startswith("| commit"):
            m = _HEX40.search(line)
            commit = m.group(0) if m else ""
    return repo, commit


def _make_profile(where: str, **kwargs: Any) -> ThroughputProfile:
    """Build a profile, turning a pydantic rejection into an InputError for the table."""
    try:
        return ThroughputProfile(**kwargs)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(x) for x in first.get("loc", ())) or None
        raise InputError(first.get("msg", str(err)), source=where, field=field) from None


def _number(value: object, *, source: str, field: str, row: int | None = None) -> float:
    """A finite, non-negative float from a table cell (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"expected a number, got {value!r}", source=source, row=row, field=field)
    out = float(value)
    if not math.isfinite(out) or out < 0:
        raise InputError(
            f"expected a finite non-negative number, got {value!r}",
            source=source,
            row=row,
            field=field,
        )
    return out


# --------------------------------------------------------------------------- Gavel
def _load_gavel(path: Path | str) -> tuple[dict[str, dict[str, Any]], str]:
    p = Path(path)
    text = read_text(p, "throughput table", limit=MAX_TRACE_BYTES)
    data = parse_structured(text, str(p), json_only=True, line_as_row=True)
    if not isinstance(data, dict) or not data:
        raise InputError("expected an object {worker_type: {job key: entry}}", source=str(p))
    for worker, table in data.items():
        if not isinstance(table, dict):
            raise InputError("expected an object of job entries", source=str(p), field=worker)
        for key, entry in table.items():
            if not isinstance(entry, dict) or "null" not in entry:
                raise InputError(
                    "expected an object with an isolated 'null' throughput",
                    source=str(p),
                    field=f"{worker}/{key}",
                )
    return data, str(p)


def _gavel_key(key: str, *, source: str, worker: str) -> tuple[str, int]:
    """Parse Gavel's ``"('<job type>', <scale factor>)"`` key without evaluating code."""
    try:
        parsed = ast.literal_eval(key)
    except (ValueError, SyntaxError):
        parsed = None
    if (
        not isinstance(parsed, tuple)
        or len(parsed) != 2
        or not isinstance(parsed[0], str)
        or isinstance(parsed[1], bool)
        or not isinstance(parsed[1], int)
        or parsed[1] < 1
    ):
        raise InputError(
            "job key must look like \"('<job type>', <GPU count >= 1>)\"",
            source=source,
            field=f"{worker}/{key}",
        )
    return parsed[0], parsed[1]


def _gavel_isolated(
    data: dict[str, dict[str, Any]], source: str
) -> dict[str, dict[tuple[str, int], float]]:
    """worker_type -> (job_type, scale) -> isolated steps/s; 0.0 (does not fit) is dropped."""
    out: dict[str, dict[tuple[str, int], float]] = {}
    for worker, table in data.items():
        rates: dict[tuple[str, int], float] = {}
        for key, entry in table.items():
            job = _gavel_key(key, source=source, worker=worker)
            value = _number(entry["null"], source=source, field=f"{worker}/{key}/null")
            if value > 0:
                rates[job] = value
        out[worker] = rates
    return out


def _gavel_type_speeds(
    by_job: dict[tuple[str, str], dict[int, float]], job_type: str, worker: str
) -> dict[str, float]:
    """``{other worker type: its 1-GPU steps/s / worker's 1-GPU steps/s}`` for one job type.

    The 1-GPU ratio is the one every type has measured (all 26 job types run on one GPU of
    each type); empty when ``worker`` itself has no 1-GPU number.
    """
    base = by_job.get((job_type, worker), {}).get(1)
    if base is None:
        return {}
    return {
        other: rates[1] / base
        for (name, other), rates in sorted(by_job.items())
        if name == job_type and other != worker and 1 in rates
    }


def gavel_profiles(
    path: Path | str, *, extrapolation: Extrapolation = "flat"
) -> dict[tuple[str, str], ThroughputProfile]:
    """Gavel's isolated throughputs as profiles keyed ``(job_type, worker_type)``.

    ``job_type`` is Gavel's name, e.g. ``"ResNet-50 (batch size 64)"``; ``worker_type`` is a
    packed type (``v100``, ``p100``, ``k80``). Points are the ``"null"`` (isolated) steps/s at the
    measured scale factors 1/2/4/8; a ``0.0`` entry means the job did not fit and is left out
    rather than modelled as zero throughput. ``spread_factor[k]`` = ``<type>_unconsolidated`` /
    ``<type>`` at ``k > 1`` GPUs, **clamped to 1**: the profile contract defines spreading as a
    penalty, and the ratios above 1 in the table (e.g. V100 ResNet-50 bs64 at 4 GPUs, 1.18) are
    measurement noise of the packed run, not a reason for a placer to prefer spreading.

    ``type_speed[other]`` = the job type's measured 1-GPU steps/s on ``other`` / on ``worker``
    (e.g. ResNet-18 bs16: K80 0.148 x and P100 1.109 x a V100), so a profile placed on another
    Gavel type runs at that model's measured speed there instead of the flat ratio of
    :data:`~gpuplan.models.gpu.KNOWN_GPU_TYPES` (0.25 for a K80). One ratio per type is a
    simplification: the table's multi-GPU ratios differ (the K80/V100 ratio of that job is
    0.087 at 2 GPUs); the 1-GPU ratio is the one measured for every job type.

    Note Gavel's multi-GPU numbers are steps/s of the whole job as Gavel ran it (its scale factor
    keeps the per-worker batch), so some speedups are super-linear; use the ElasticFlow tables
    when a fixed-global-batch curve is needed.
    """
    data, source = _load_gavel(path)
    label = source_label(source)
    isolated = _gavel_isolated(data, source)
    by_job: dict[tuple[str, str], dict[int, float]] = {}
    for worker, rates in isolated.items():
        if worker.endswith(_UNCONSOLIDATED):
            continue
        for (job_type, scale), value in rates.items():
            by_job.setdefault((job_type, worker), {})[scale] = value
    profiles: dict[tuple[str, str], ThroughputProfile] = {}
    for (job_type, worker), points in sorted(by_job.items()):
        speeds = _gavel_type_speeds(by_job, job_type, worker)
        spread_table = isolated.get(worker + _UNCONSOLIDATED, {})
        spread = {
            scale: min(1.0, spread_table[(job_type, scale)] / rate)
            for scale, rate in points.items()
            if scale > 1 and (job_type, scale) in spread_table
        }
        profiles[(job_type, worker)] = _make_profile(
            f"{source} ({worker}, {job_type})",
            points=points,
            reference_gpu=worker,
            extrapolation=extrapolation,
            spread_factor=spread,
            type_speed=speeds,
            source=f"{label} {worker} '{job_type}' isolated steps/s",
        )
    return profiles


def gavel_colocation(
    path: Path | str, *, include_unconsolidated: bool = False
) -> dict[ColocationKey, tuple[float, float]]:
    """Gavel's co-location (space-sharing) slowdowns: the GPU co-location model OJPP uses.

    ``{(worker_type, job_a, job_b, scale): (ratio_a, ratio_b)}`` where ``ratio_x`` = job x's
    throughput while sharing the same ``scale`` GPUs with the other job / its isolated throughput
    on that worker type. ``(0.0, 0.0)`` means the pair does not fit in memory (Gavel's ``0.0``).
    Gavel lists both orders, so ``(a, b)`` and ``(b, a)`` are both present. Pairs whose partner
    has no usable isolated measurement are skipped (no denominator). Spread ("unconsolidated")
    placements are excluded unless asked for, since co-location shares GPUs within one server.
    """
    data, source = _load_gavel(path)
    isolated = _gavel_isolated(data, source)
    out: dict[ColocationKey, tuple[float, float]] = {}
    for worker, table in data.items():
        if worker.endswith(_UNCONSOLIDATED) and not include_unconsolidated:
            continue
        rates = isolated[worker]
        for key, entry in table.items():
            job_a, scale = _gavel_key(key, source=source, worker=worker)
            null_a = rates.get((job_a, scale))
            for other, pair in entry.items():
                if other == "null":
                    continue
                field = f"{worker}/{key}/{other}"
                job_b, scale_b = _gavel_key(other, source=source, worker=worker)
                if not isinstance(pair, list) or len(pair) != 2:
                    raise InputError(
                        "expected a pair [this job's steps/s, other job's steps/s]",
                        source=source,
                        field=field,
                    )
                x_a = _number(pair[0], source=source, field=field)
                x_b = _number(pair[1], source=source, field=field)
                null_b = rates.get((job_b, scale_b))
                if null_a is None or null_b is None or scale_b != scale:
                    continue
                out[(worker, job_a, job_b, scale)] = (x_a / null_a, x_b / null_b)
    return out


# --------------------------------------------------------------------------- Pollux
def _read_csv(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) pairs of a headed CSV whose header holds ``required``."""
    try:
        text = read_text(path, "throughput table", limit=MAX_TRACE_BYTES, bom=True)
        with io.StringIO(text, newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise InputError(
                    f"header lacks column(s) {', '.join(missing)}",
                    source=str(path),
                    row=1,
                    field=missing[0],
                )
            rows = [(reader.line_num, row) for row in reader]
    except csv.Error as err:
        raise InputError(f"invalid CSV: {err}", source=str(path)) from None
    return rows


def _cell_float(row: dict[str, str], col: str, *, source: str, line: int) -> float:
    text = (row.get(col) or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise InputError(
            f"expected a number, got {text!r}", source=source, row=line, field=col
        ) from None
    if not math.isfinite(value) or value < 0:
        raise InputError(
            f"expected a finite non-negative number, got {text!r}",
            source=source,
            row=line,
            field=col,
        )
    return value


def _cell_int(row: dict[str, str], col: str, *, source: str, line: int) -> int:
    text = (row.get(col) or "").strip()
    if not (text.isascii() and text.isdigit()):
        raise InputError(
            f"expected a non-negative integer, got {text!r}", source=source, row=line, field=col
        )
    return int(text)


def _cell_placement(row: dict[str, str], *, source: str, line: int) -> str:
    """A ``placement`` cell: one digit 1-9 per node, the GPUs the job has on it."""
    text = (row.get("placement") or "").strip()
    if not (text.isascii() and text.isdigit()) or "0" in text:
        raise InputError(
            f"placement must be digits 1-9 (GPUs per node), got {text!r}",
            source=source,
            row=line,
            field="placement",
        )
    return text


_PLACEMENT_COLS = ("placement", "local_bsz", "step_time")
_SCALABILITY_COLS = ("num_nodes", "num_replicas", "local_bsz", "step_time")


def _pollux_tables(
    model_dir: Path,
) -> tuple[dict[tuple[str, int], float], dict[tuple[int, int], float]]:
    """placements: (placement, local_bsz) -> step_time; scalability: (replicas, bsz) -> step_time.

    Scalability rows repeating a (replicas, local_bsz) pair with a different node count keep
    the one on the fewest nodes (the packed one).
    """
    ppath = model_dir / "placements.csv"
    placements: dict[tuple[str, int], float] = {}
    for line, row in _read_csv(ppath, _PLACEMENT_COLS):
        placement = _cell_placement(row, source=str(ppath), line=line)
        bsz = _cell_int(row, "local_bsz", source=str(ppath), line=line)
        step = _cell_float(row, "step_time", source=str(ppath), line=line)
        if step <= 0:
            raise InputError(
                "step_time must be > 0", source=str(ppath), row=line, field="step_time"
            )
        placements[(placement, bsz)] = step
    spath = model_dir / "scalability.csv"
    scal: dict[tuple[int, int], tuple[int, float]] = {}
    if spath.exists():
        for line, row in _read_csv(spath, _SCALABILITY_COLS):
            nodes = _cell_int(row, "num_nodes", source=str(spath), line=line)
            replicas = _cell_int(row, "num_replicas", source=str(spath), line=line)
            bsz = _cell_int(row, "local_bsz", source=str(spath), line=line)
            step = _cell_float(row, "step_time", source=str(spath), line=line)
            for col, value in (
                ("num_nodes", nodes),
                ("num_replicas", replicas),
                ("step_time", step),
            ):
                if value <= 0:
                    raise InputError(f"{col} must be > 0", source=str(spath), row=line, field=col)
            key = (replicas, bsz)
            if key not in scal or nodes < scal[key][0]:
                scal[key] = (nodes, step)
    if not placements:
        raise InputError("no placement rows", source=str(ppath), field="placement")
    return placements, {k: v[1] for k, v in scal.items()}


def _packed_placement(gpus: int, node_size: int) -> str:
    """Fewest-nodes placement string in Pollux's ascending-digit form (6 on 4-GPU nodes: "24")."""
    full, rest = divmod(gpus, node_size)
    return (str(rest) if rest else "") + str(node_size) * full


def pollux_default_local_bsz(model_dir: Path | str) -> int:
    """The per-GPU batch with the most measurements (placements + scalability rows).

    Ties (usual: every batch is measured at every placement) go to the **largest** tied batch:
    equal coverage, and the largest batch is the least communication-bound, i.e. the way the
    job would actually be run.
    """
    placements, scal = _pollux_tables(Path(model_dir))
    counts = Counter(b for _, b in placements) + Counter(b for _, b in scal)
    return max(counts, key=lambda b: (counts[b], b))


def pollux_profile(
    model_dir: Path | str,
    local_bsz: int | None = None,
    *,
    per_step: bool = False,
    extrapolation: Extrapolation = "flat",
) -> ThroughputProfile:
    """A Pollux model's scaling curve on T4 GPUs at one fixed **per-GPU** batch ``local_bsz``.

    Points: packed placements of placements.csv (fewest 4-GPU nodes: ``1``..``4``, ``14``,
    ``24``, ``34``, ``44``, ``144``, ..., ``4444``, i.e. every count 1..16), extended with
    scalability.csv rows for larger replica counts (up to 64).

    Global-batch semantics: Pollux measures weak scaling, the global batch is
    ``k x local_bsz`` on ``k`` GPUs, so one step at 8 GPUs does 8x the work of a step at 1 GPU.
    By default (``per_step=False``) an *iteration* is therefore normalised to one local batch of
    samples, ``rate(k) = k / step_time(k)`` (= samples/s / local_bsz), which keeps "iterations"
    a fixed amount of work across GPU counts as :class:`JobSpec` requires. ``per_step=True``
    gives the literal ``1 / step_time(k)`` (steps/s of a growing global batch), which falls
    with k and is only meaningful to code that itself rescales the batch.

    ``spread_factor[k]`` (2 <= k <= node size) = rate of the fully spread placement ``"1"*k`` /
    packed rate, clamped to 1 (see :func:`gavel_profiles`). Larger counts are multi-node even
    when packed, so their measured packed rate already includes the network.
    """
    mdir = Path(model_dir)
    where = str(mdir)
    placements, scal = _pollux_tables(mdir)
    available = sorted({b for _, b in placements} | {b for _, b in scal})
    if local_bsz is None:
        local_bsz = pollux_default_local_bsz(mdir)
    elif local_bsz not in available:
        raise InputError(
            f"local_bsz {local_bsz} is not measured; measured: {available}",
            source=where,
            field="local_bsz",
        )
    node_size = max(int(d) for p, _ in placements for d in p)
    largest = 0
    step_times: dict[int, float] = {}
    for (placement, bsz), step in placements.items():
        gpus = sum(int(d) for d in placement)
        if bsz == local_bsz and placement == _packed_placement(gpus, node_size):
            step_times[gpus] = step
            largest = max(largest, gpus)
    for (replicas, bsz), step in scal.items():
        if bsz == local_bsz and replicas > largest:
            step_times[replicas] = step
    if not step_times:
        raise InputError(
            f"no packed placement measured at local_bsz {local_bsz}",
            source=where,
            field="local_bsz",
        )

    def rate(gpus: int, step: float) -> float:
        return 1.0 / step if per_step else gpus / step

    points = {g: rate(g, s) for g, s in sorted(step_times.items())}
    spread: dict[int, float] = {}
    for gpus in range(2, node_size + 1):
        spread_step = placements.get(("1" * gpus, local_bsz))
        if spread_step is not None and gpus in points:
            spread[gpus] = min(1.0, rate(gpus, spread_step) / points[gpus])
    unit = "steps/s" if per_step else "local batches/s (k/step_time)"
    return _make_profile(
        where,
        points=points,
        reference_gpu="t4",
        extrapolation=extrapolation,
        spread_factor=spread,
        source=f"{source_label(mdir)} local_bsz={local_bsz} packed placements, {unit}",
    )


# --------------------------------------------------------------------------- ElasticFlow
def elasticflow_profile(  # noqa: C901 (a named exception to the complexity gate)
    csv_path: Path | str,
    global_batch: int,
    *,
    reference_gpu: str = "a100",
    extrapolation: Extrapolation = "flat",
) -> ThroughputProfile:
    """An ElasticFlow A100 row: iterations/s at fixed ``global_batch`` on 1..64 GPUs.

    Header ``global_batch_size,1,2,4,...,64``. Values are kept raw, including the decline past
    the peak (e.g. bert bs64 peaks at 8 GPUs): the profile's monotone envelope is what makes
    extra GPUs harmless, and ``peak_gpus`` still reports the true peak. Empty or ``0`` cells are
    unmeasured counts (ElasticFlow writes 0 where a run was not made) and are left out.
    """
    p = Path(csv_path)
    where = str(p)
    try:
        text = read_text(p, "throughput table", limit=MAX_TRACE_BYTES, bom=True)
        with io.StringIO(text, newline="") as fh:
            lines = list(csv.reader(fh))
    except csv.Error as err:
        raise InputError(f"invalid CSV: {err}", source=where) from None
    if not lines or not lines[0] or lines[0][0].strip() != "global_batch_size":
        raise InputError(
            "header must start with 'global_batch_size'",
            source=where,
            row=1,
            field="global_batch_size",
        )
    counts: list[int] = []
    for name in lines[0][1:]:
        text = name.strip()
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            raise InputError(
                f"GPU-count column must be an integer >= 1, got {text!r}",
                source=where,
                row=1,
                field=text or "<empty>",
            )
        counts.append(int(text))
    row_cells: list[str] | None = None
    row_line = 0
    for line_no, cells in enumerate(lines[1:], start=2):
        if not cells or not any(c.strip() for c in cells):
            continue
        text = cells[0].strip()
        if not (text.isascii() and text.isdigit()):
            raise InputError(
                f"expected an integer batch size, got {text!r}",
                source=where,
                row=line_no,
                field="global_batch_size",
            )
        if int(text) == global_batch:
            row_cells, row_line = cells, line_no
            break
    if row_cells is None:
        raise InputError(
            f"no row for global batch {global_batch}", source=where, field="global_batch_size"
        )
    if len(row_cells) - 1 > len(counts):
        raise InputError("more cells than header columns", source=where, row=row_line)
    points: dict[int, float] = {}
    for gpus, cell in zip(counts, row_cells[1:], strict=False):
        text = cell.strip()
        if not text:
            continue
        try:
            value = float(text)
        except ValueError:
            raise InputError(
                f"expected a number, got {text!r}", source=where, row=row_line, field=str(gpus)
            ) from None
        if not math.isfinite(value) or value < 0:
            raise InputError(
                f"expected a finite non-negative number, got {text!r}",
                source=where,
                row=row_line,
                field=str(gpus),
            )
        if value > 0:
            points[gpus] = value
    if not points:
        raise InputError("no positive throughput in the row", source=where, row=row_line)
    return _make_profile(
        where,
        points=points,
        reference_gpu=reference_gpu,
        extrapolation=extrapolation,
        source=f"{source_label(p)} global_batch={global_batch} iterations/s",
    )
