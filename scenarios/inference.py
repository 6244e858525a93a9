"""Capacity-loaning scenarios (Aryl §3-4): an inference load -> loan / reclaim events.

The inference side owns its servers and decides, from its own load, how many it needs; Aryl only
sees the consequences: "you may use N more servers" (:class:`~gpuplan.models.LoanOffer`) and
"give N back" (:class:`~gpuplan.models.ReclaimRequest`). This module models that side:

* :func:`load_qps` (in :mod:`.qps_series`) reads a request-rate series: the shared Alibaba
  GenAI QPS trace, or the 5-minute aggregate of it shipped in ``data/aryl_genai_qps_5min.csv``;
* :class:`InferenceLoad` rescales it to a chosen peak and period (one trace copy per
  ``period_s``, tiled) and turns it into servers needed,
  ``ceil(qps (1 + headroom) / per-server QPS)``, capped by the fleet: the rest is lendable;
* :func:`loan_events` samples that every ``step_s`` (the orchestrator interval, 5 min by
  default) and emits the loan / reclaim deltas, whole servers only;
* :func:`loaning_cluster` builds a training pool plus an inference pool. T4 inference GPUs are
  *normalised* against training GPUs (digest §2.3.1): by default an inference server of 8 T4
  is modelled as ``8 x 1/4 = 2`` V100-equivalent GPU slots (ratio from the clusters' GPU types,
  ``t4`` = 0.25 of ``v100``), so a worker runs at training speed on a loaned server and loaned
  capacity counts for a quarter, as in the paper's allocation; ``normalise=False`` keeps 8
  physical T4 GPUs at a quarter of the speed instead;
* :func:`aryl_jobs` maps trace rows to Aryl's job mix (about 5 % large elastic jobs, 21 %
  GPU-type-agnostic jobs that may use loaned servers, a checkpointing share);
* :func:`heterogeneous_jobs` flags the Advanced scenario's heterogeneous share.

What a loaning run measures (usage per pool, the metrics record) is in :mod:`.loaning_usage`.

Everything is seeded and deterministic.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuplan.models import (
    Checkpointing,
    Cluster,
    Elasticity,
    GpuType,
    InputError,
    JobSpec,
    LoanOffer,
    Node,
    ReclaimRequest,
)
from gpuplan.models.bounds import MAX_TIME_S

from .input_files import parse_structured, read_text
from .mapping import map_rigid
from .qps_series import QpsSeries, _data_file, load_qps
from .trace_job import TraceJob

__all__ = [
    "ArylScenario",
    "InferenceLoad",
    "QpsSeries",
    "aryl_jobs",
    "aryl_testbed",
    "aryl_testbed_rows",
    "heterogeneous_jobs",
    "load_qps",
    "loan_events",
    "loaning_cluster",
    "loaning_scenario",
]

LoanEvent = LoanOffer | ReclaimRequest


# --------------------------------------------------------------------------------------------
# Inference side
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InferenceLoad:
    """How many of its ``servers`` the inference side needs at time t.

    ``qps(t) = base_qps + raw(t') * peak_qps / max(raw)`` where ``t'`` maps ``period_s`` of
    simulated time onto one copy of the raw series (tiled; ``offset_s`` shifts the phase).
    ``needed(t) = min(servers, max(min_servers, ceil(qps(t) (1 + headroom) / per_server_qps)))``:
    the headroom keeps latency SLAs under bursts (the paper gives no value; 10 % here).
    """

    servers: int
    series: QpsSeries
    peak_qps: float
    per_server_qps: float = 1.0
    headroom: float = 0.1
    base_qps: float = 0.0
    period_s: float = 86400.0
    offset_s: float = 0.0
    min_servers: int = 0
    gpus_per_server: int = 8

    def __post_init__(self) -> None:
        if self.servers < 0 or self.per_server_qps <= 0 or self.period_s <= 0:
            raise InputError("servers >= 0, per_server_qps > 0 and period_s > 0 are required")
        if self.headroom < 0 or self.peak_qps < 0 or self.base_qps < 0:
            raise InputError("headroom, peak_qps and base_qps must be >= 0")

    @classmethod
    def for_fleet(
        cls,
        servers: int,
        *,
        series: QpsSeries | None = None,
        peak_busy: float = 0.95,
        base_busy: float = 0.3,
        headroom: float = 0.1,
        period_s: float = 86400.0,
        offset_s: float = 0.0,
        gpus_per_server: int = 8,
    ) -> InferenceLoad:
        """Scaled so that, headroom included, ``peak_busy`` of the fleet is needed at the
        series' peak and ``base_busy`` at zero traffic (1 QPS per server). The paper's
        inference cluster peaks near 95 % and averages ~65 % with a 2.2 peak-to-trough ratio;
        the GenAI trace is far spikier (near 0 at night), hence the base load."""
        if not 0 <= base_busy <= peak_busy <= 1:
            raise InputError("need 0 <= base_busy <= peak_busy <= 1")
        per = 1.0
        scale = servers * per / (1.0 + headroom)
        return cls(
            servers=servers,
            series=series or load_qps(),
            peak_qps=(peak_busy - base_busy) * scale,
            per_server_qps=per,
            headroom=headroom,
            base_qps=base_busy * scale,
            period_s=period_s,
            offset_s=offset_s,
            gpus_per_server=gpus_per_server,
        )

    def qps(self, t: float) -> float:
        s = self.series
        phase = ((t + self.offset_s) % self.period_s) / self.period_s
        k = min(int(phase * len(s.values)), len(s.values) - 1)
        peak = s.peak or 1.0
        return self.base_qps + float(s.values[k]) * self.peak_qps / peak

    def needed(self, t: float) -> int:
        """Servers the inference side keeps for itself at ``t``."""
        want = math.ceil(self.qps(t) * (1.0 + self.headroom) / self.per_server_qps - 1e-9)
        return min(self.servers, max(self.min_servers, want))

    def lendable(self, t: float) -> int:
        return self.servers - self.needed(t)

    def busy_gpus(self, t: float) -> float:
        """GPUs actually serving requests at ``t`` (no headroom), for overall usage."""
        return min(float(self.servers), self.qps(t) / self.per_server_qps) * self.gpus_per_server


def loan_events(
    load: InferenceLoad,
    start_s: float,
    end_s: float,
    step_s: float = 300.0,
    initial_loaned: int = 0,
) -> list[LoanEvent]:
    """Loan / reclaim deltas every ``step_s`` in ``[start_s, end_s)``: the inference side lends
    whatever it does not need and asks for ``N_R`` servers back when its need rises."""
    if step_s <= 0:
        raise InputError("step_s must be > 0", field="step_s")
    events: list[LoanEvent] = []
    loaned = initial_loaned
    steps = max(0, math.ceil((end_s - start_s) / step_s))
    for i in range(steps):
        t = start_s + i * step_s
        target = load.lendable(t)
        if target > loaned:
            events.append(LoanOffer(time=t, count=target - loaned))
        elif target < loaned:
            events.append(ReclaimRequest(time=t, count=loaned - target))
        loaned = target
    return events


# --------------------------------------------------------------------------------------------
# Cluster and jobs
# --------------------------------------------------------------------------------------------
def normalised_slots(gpus: int, ratio: float) -> tuple[int, float]:
    """(GPU slots, speed of one slot relative to a training GPU) for an inference server of
    ``gpus`` GPUs each worth ``ratio`` training GPUs; total compute is preserved exactly."""
    slots = max(1, round(gpus * ratio))
    return slots, gpus * ratio / slots


def loaning_cluster(
    training_servers: int,
    inference_servers: int,
    *,
    training_gpus: int = 8,
    inference_gpus: int = 8,
    training_type: str = "v100",
    inference_type: str = "t4",
    inference_ratio: float | None = None,
    normalise: bool = True,
) -> Cluster:
    """A training pool (``t000``...) and an inference pool (``i000``...).

    ``inference_ratio`` = compute of one inference GPU in training GPUs; default from the GPU
    types (``t4`` 0.25 / ``v100`` 1.0 = 1/4; the testbed remark in the paper suggests 1/3).
    Normalised (default): inference servers get ``round(gpus x ratio)`` slots of a declared type
    ``<type>-norm`` whose speed makes the server's total compute exact.
    """
    base = Cluster.uniform(1, 1)  # for the known GPU types
    train_speed = base.gpu_type(training_type).relative_speed
    inf = base.gpu_type(inference_type)
    ratio = inf.relative_speed / train_speed if inference_ratio is None else inference_ratio
    if ratio <= 0:
        raise InputError("inference_ratio must be > 0", field="inference_ratio")
    types: dict[str, GpuType] = {}
    if normalise:
        slots, speed = normalised_slots(inference_gpus, ratio)
        inf_name = f"{inference_type}-norm"
        types[inf_name] = GpuType(
            name=inf_name,
            relative_speed=speed * train_speed,
            memory_gb=inf.memory_gb * inference_gpus / slots,
        )
        inf_gpus = slots
    else:
        inf_name = inference_type
        inf_gpus = inference_gpus
        if inference_ratio is not None:
            types[inf_name] = GpuType(
                name=inf_name, relative_speed=ratio * train_speed, memory_gb=inf.memory_gb
            )
    nodes = [
        Node(
            name=f"t{i:03d}",
            gpus=training_gpus,
            gpu_type=training_type,
            pool="training",
            rack=f"train{i // 16}",
        )
        for i in range(training_servers)
    ]
    nodes += [
        Node(
            name=f"i{i:03d}",
            gpus=inf_gpus,
            gpu_type=inf_name,
            pool="inference",
            rack=f"inf{i // 16}",
        )
        for i in range(inference_servers)
    ]
    return Cluster(nodes=nodes, gpu_types=types)


def _weighted_sample(rng: np.random.Generator, weights: Sequence[float], k: int) -> list[int]:
    """k distinct indices, P proportional to weight (Efraimidis-Spirakis keys u^(1/w))."""
    if k <= 0 or not weights:
        return []
    w = np.asarray(weights, dtype=float)
    keys = rng.random(len(w)) ** (1.0 / np.maximum(w, 1e-12))
    return sorted(int(i) for i in np.argsort(-keys, kind="stable")[:k])


def aryl_jobs(
    rows: Sequence[TraceJob],
    *,
    seed: int = 0,
    elastic_fraction: float = 0.05,
    agnostic_fraction: float = 0.21,
    checkpoint_fraction: float = 0.5,
    min_fraction: float = 0.5,
    min_elastic_gpus: int = 2,
    training_type: str = "v100",
    max_factor: float = 1.0,
) -> list[JobSpec]:
    """Trace rows -> Aryl's Basic-scenario job mix (§7.1; digest §3.1, §7.2).

    * ``elastic_fraction`` of all jobs become elastic, drawn among jobs of at least
      ``min_elastic_gpus`` GPUs with probability proportional to GPU-time (the paper's elastic
      jobs are the large ones: 5 % of jobs, 36 % of GPU time). Range ``[ceil(g x min_fraction),
      g]`` with g the trace request, requested at g (so rigid policies run them as traced);
      they may run on any GPU type. ``max_factor`` > 1 raises the top of the range to
      ``floor(g x max_factor)``: the job still asks for (and a rigid policy still runs it at) g,
      but may scale *above* its traced size into GPUs nobody else wants.
    * ``agnostic_fraction`` of the other jobs accept any GPU type and may use loaned servers;
      the rest are pinned to ``training_type``.
    * ``checkpoint_fraction`` of all jobs checkpoint on preemption; the others restart from
      zero ("common in our environment for jobs to not have checkpointing").
    Work: linear scaling, so a job takes its trace duration at its trace size.
    """
    for name, v in (
        ("elastic_fraction", elastic_fraction),
        ("agnostic_fraction", agnostic_fraction),
        ("checkpoint_fraction", checkpoint_fraction),
        ("min_fraction", min_fraction),
    ):
        if not 0 <= v <= 1:
            raise InputError(f"{name} must be in [0, 1], got {v!r}", field=name)
    if not 1 <= max_factor <= 64:
        raise InputError(f"max_factor must be in [1, 64], got {max_factor!r}", field="max_factor")
    rng = np.random.default_rng(seed)
    rigid = map_rigid(rows)
    cands = [i for i, j in enumerate(rigid) if j.requested_gpus >= min_elastic_gpus]
    k = min(len(cands), round(elastic_fraction * len(rigid)))
    weights = [rigid[i].requested_gpus * (rows[i].duration or 1.0) for i in cands]
    elastic = {cands[i] for i in _weighted_sample(rng, weights, k)}
    agnostic = rng.random(len(rigid)) < agnostic_fraction
    ckpt = rng.random(len(rigid)) < checkpoint_fraction
    out = []
    for i, job in enumerate(rigid):
        update: dict[str, object] = {
            "checkpoint": Checkpointing(on_signal=bool(ckpt[i])),
        }
        if i in elastic:
            g = job.requested_gpus
            update["elasticity"] = Elasticity(
                min_gpus=max(1, math.ceil(g * min_fraction)),
                max_gpus=max(g, math.floor(g * max_factor)),
            )
        elif not agnostic[i]:
            update["gpu_type"] = training_type
        out.append(job.model_copy(update=update))
    return out


# --------------------------------------------------------------------------------------------
# Scenario bundles
# --------------------------------------------------------------------------------------------
@dataclass
class ArylScenario:
    """Everything one capacity-loaning run needs."""

    cluster: Cluster
    jobs: list[JobSpec]
    load: InferenceLoad
    events: list[LoanEvent]
    name: str = ""
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def end_s(self) -> float:
        return max((e.time for e in self.events), default=0.0)


def loaning_scenario(
    rows: Sequence[TraceJob],
    training_servers: int,
    inference_servers: int,
    *,
    seed: int = 0,
    name: str = "",
    period_s: float = 86400.0,
    step_s: float = 300.0,
    peak_busy: float = 0.95,
    base_busy: float = 0.3,
    headroom: float = 0.1,
    series: QpsSeries | None = None,
    horizon_s: float | None = None,
    cluster_kw: dict | None = None,
    jobs_kw: dict | None = None,
) -> ArylScenario:
    """Trace rows on a training pool plus a modelled inference pool with its loan events.

    Events run from t=0 to ``horizon_s`` (default: last submission + 2 x period) so loaned
    capacity keeps changing while jobs drain. The inference pool's GPUs in the load model are
    the cluster's (normalised) inference server size.
    """
    cluster = loaning_cluster(training_servers, inference_servers, **(cluster_kw or {}))
    inf_nodes = [n for n in cluster.nodes if n.pool == "inference"]
    gpus = inf_nodes[0].gpus if inf_nodes else 8
    load = InferenceLoad.for_fleet(
        inference_servers,
        series=series,
        peak_busy=peak_busy,
        base_busy=base_busy,
        headroom=headroom,
        period_s=period_s,
        gpus_per_server=gpus,
    )
    jobs = aryl_jobs(rows, seed=seed, **(jobs_kw or {}))
    last = max((j.submit_time for j in jobs), default=0.0)
    horizon = last + 2 * period_s if horizon_s is None else horizon_s
    return ArylScenario(cluster, jobs, load, loan_events(load, 0.0, horizon, step_s), name)


def _testbed_spec(path: str | Path | None) -> dict:
    where = Path(path or _data_file("aryl_testbed.json"))
    return parse_structured(
        read_text(where, "Aryl testbed description"), str(where), json_only=True
    )


def _testbed_number(
    jspec: dict, key: str, where: str, *, integer: bool = False, low: float = 0.0
) -> float:
    """``jobs.<key>`` of a testbed description: a finite number >= ``low`` (an integer when
    ``integer``), else one line naming the file and the field."""
    value = jspec.get(key)
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or not (math.isfinite(value) and value >= low):
        kind = "an integer" if integer else "a finite number"
        raise InputError(
            f"must be {kind} >= {low:g}, got {value!r}", source=where, field=f"jobs.{key}"
        )
    return value


def _testbed_jobs(spec: dict, where: str) -> dict:
    """The ``jobs`` block of a testbed description, its counts checked before anything is
    generated. Why: ``count`` 1.8e16 made numpy allocate until MemoryError, reported without
    the file; the count is checked against the work budget's ``jobs``."""
    from .work_budget import check_jobs

    jspec = spec.get("jobs") if isinstance(spec, dict) else None
    if not isinstance(jspec, dict):
        raise InputError("must be a mapping", source=where, field="jobs")
    n = _testbed_number(jspec, "count", where, integer=True, low=1)
    check_jobs(int(n), source=where, field="jobs.count")
    elastic = _testbed_number(jspec, "elastic", where, integer=True)
    if elastic > n:
        raise InputError(f"{elastic} elastic jobs of {n}", source=where, field="jobs.elastic")
    if _testbed_number(jspec, "submit_span_s", where) > MAX_TIME_S:
        raise InputError(
            f"must be at most {MAX_TIME_S:g} s", source=where, field="jobs.submit_span_s"
        )
    return jspec


def aryl_testbed_rows(seed: int = 0, path: str | Path | None = None) -> list[TraceJob]:
    """The testbed's training jobs as trace rows (``jobs`` of ``data/aryl_testbed.json``):
    uniform submissions over the span, sizes from the mix, log-uniform durations, all drawn
    from ``numpy.random.default_rng(seed)``. The rows :func:`aryl_testbed` maps."""
    jspec = _testbed_jobs(_testbed_spec(path), str(path or _data_file("aryl_testbed.json")))
    rng = np.random.default_rng(seed)
    n = int(jspec["count"])
    sizes = sorted((int(k), float(v)) for k, v in jspec["size_mix"].items())
    probs = np.asarray([p for _, p in sizes]) / sum(p for _, p in sizes)
    times = np.sort(rng.uniform(0.0, float(jspec["submit_span_s"]), size=n))
    picks = rng.choice(len(sizes), size=n, p=probs)
    lo, hi = (math.log(float(x)) for x in jspec["duration_range_s"])
    durations = np.exp(rng.uniform(lo, hi, size=n))
    width = len(str(n - 1))
    return [
        TraceJob(
            id=f"tb-{i:0{width}d}",
            submit_time=float(times[i]),
            gpus=sizes[int(picks[i])][0],
            duration=float(durations[i]),
            source=f"aryl_testbed(seed={seed}) row {i}",
        )
        for i in range(n)
    ]


def aryl_testbed(seed: int = 0, path: str | Path | None = None) -> ArylScenario:
    """The paper's 64-GPU testbed (§7.5), as described in ``data/aryl_testbed.json``: 4 V100 and
    4 T4 servers of 8 GPUs, 180 jobs (10 elastic, at most 16 GPUs) submitted over 8 hours,
    running 2 minutes to 2 hours, the inference trace scaled so at most 3 servers are lent.
    The embedded scenario ``aryl-testbed`` builds the same cluster, jobs and events."""
    spec = _testbed_spec(path)
    jspec = spec["jobs"]
    n = int(jspec["count"])
    rows = aryl_testbed_rows(seed, path)
    c = spec["cluster"]
    inf = spec["inference"]
    scen = loaning_scenario(
        rows,
        c["training_servers"],
        c["inference_servers"],
        seed=seed,
        name="aryl-testbed",
        period_s=float(inf["period_s"]),
        step_s=float(inf["step_s"]),
        peak_busy=float(inf["peak_busy"]),
        base_busy=float(inf["base_busy"]),
        headroom=float(inf["headroom"]),
        horizon_s=float(jspec["submit_span_s"]) + float(inf["drain_s"]),
        cluster_kw={
            "training_gpus": c["gpus_per_server"],
            "inference_gpus": c["gpus_per_server"],
            "normalise": bool(c.get("normalise", True)),
        },
        jobs_kw={
            "elastic_fraction": jspec["elastic"] / n,
            "agnostic_fraction": float(jspec["agnostic_fraction"]),
            "checkpoint_fraction": float(jspec["checkpoint_fraction"]),
        },
    )
    scen.notes = spec
    return scen


# --------------------------------------------------------------------------------------------
# Job mix
# --------------------------------------------------------------------------------------------
def heterogeneous_jobs(jobs: Sequence[JobSpec], share: float, seed: int = 0) -> list[JobSpec]:
    """The Advanced scenario's job mix (§7.1: "10 % of jobs can train on heterogeneous GPUs"):
    ``share`` of all jobs, drawn (seeded) among those not pinned to a GPU type -- the
    GPU-type-agnostic and elastic ones, since a job that can mix types can run on either --
    get ``heterogeneous=True``. The rest of the mix is untouched, so the Basic rows (which
    ignore the flag) are this scenario with heterogeneous training switched off."""
    if share <= 0:
        return list(jobs)
    free = [i for i, j in enumerate(jobs) if j.gpu_type is None]
    k = min(len(free), round(share * len(jobs)))
    pick = set(random.Random(seed).sample(free, k))
    return [
        j.model_copy(update={"heterogeneous": True}) if i in pick else j for i, j in enumerate(jobs)
    ]
