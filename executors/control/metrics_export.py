"""The controller's Prometheus metrics, exposed from its latest :class:`~.live_state.LiveSnapshot`.

Why a collector over the snapshot instead of ``Gauge``/``Counter`` objects updated by the loop:
the figures already exist as data (the journal's rows, the cycle-time ring, the restart gate's
counters; :mod:`.live_state` gathers them once per cycle), so the exposition is a pure function
of one snapshot: nothing in the control loop formats or locks anything for a scrape, and a
scrape can never see half a cycle. The registry is the controller's own
:class:`~prometheus_client.CollectorRegistry`, not the library's global one (which would also
export whatever else the process imported, and is shared by every test in one interpreter).

prometheus-client is the ``slurm`` extra's package: importing this module without it raises
:class:`~gpuplan.models.extras.MissingExtra` (``gpuplan slurm-controller --http`` then refuses
to start in one line). The names, types and units are listed in ``docs/controller.md`` § 2
(Metrics and the live page).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from gpuplan.models.extras import require_extra

require_extra("slurm", "gpuplan slurm-controller --http", "prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.core import (  # noqa: E402
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector  # noqa: E402

from .failopen import heartbeat_age  # noqa: E402
from .live_state import LiveSnapshot  # noqa: E402

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format's media type."""

HISTOGRAM_NAMES = {
    "poll_s": (
        "gpuplan_poll_seconds",
        "Wall time of a poll's Slurm reads and discovery, per cycle (cycle_times poll_s)",
    ),
    "decide_s": (
        "gpuplan_decision_seconds",
        "Wall time of a decision: events, policy, plan check (cycle_times decide_s)",
    ),
    "apply_s": (
        "gpuplan_apply_seconds",
        "Wall time of carrying a plan out, per plan with actions (cycle_times apply_s)",
    ),
}


class SnapshotCollector(Collector):
    """Yields every metric from ``source()`` (the latest snapshot; only ``gpuplan_up`` 0
    before the first one). ``clock``/``monotonic`` are injectable for tests."""

    def __init__(
        self,
        source: Callable[[], LiveSnapshot | None],
        heartbeat: Callable[[Path], float] = heartbeat_age,
        clock: Callable[[], float] | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        import time

        self.source = source
        self.heartbeat = heartbeat
        self.clock = clock or time.time
        self.monotonic = monotonic or time.monotonic

    def collect(self) -> Iterator[Metric]:
        snap = self.source()
        yield GaugeMetricFamily(
            "gpuplan_up",
            "1 once the controller completed a cycle and published its state",
            value=0 if snap is None else 1,
        )
        if snap is None:
            return
        yield _labelled(
            GaugeMetricFamily,
            "gpuplan_controller_info",
            "The running controller: release, policy and journal run id",
            ["version", "policy", "run"],
            [(snap.version, snap.policy, str(snap.run_id), 1)],
        )
        yield GaugeMetricFamily(
            "gpuplan_snapshot_timestamp_seconds",
            "Unix time of the state these metrics show (published after a cycle)",
            value=snap.time,
        )
        yield GaugeMetricFamily(
            "gpuplan_queue_jobs", "Managed jobs waiting (journal state pending)", value=snap.queue
        )
        yield GaugeMetricFamily(
            "gpuplan_running_jobs",
            "Managed jobs running (journal state running)",
            value=snap.running,
        )
        yield GaugeMetricFamily(
            "gpuplan_refused_held_jobs",
            "Jobs kept held because the controller cannot read them (marker refused)",
            value=snap.held_refused,
        )
        yield GaugeMetricFamily(
            "gpuplan_gpus", "GPUs of the managed partitions' nodes", value=snap.gpus_total
        )
        yield GaugeMetricFamily(
            "gpuplan_gpus_allocated",
            "GPUs held by running managed jobs (journal placement)",
            value=snap.gpus_allocated,
        )
        yield GaugeMetricFamily(
            "gpuplan_gpus_idle",
            "GPUs of the managed nodes not held by a managed job",
            value=max(0, snap.gpus_total - snap.gpus_allocated),
        )
        yield CounterMetricFamily(
            "gpuplan_decisions",
            "Decisions made (cycles that ran the policy) by this run",
            value=snap.decisions,
        )
        yield CounterMetricFamily(
            "gpuplan_plans", "Plans with actions journaled by this run", value=snap.plans
        )
        yield _labelled(
            CounterMetricFamily,
            "gpuplan_actions",
            "Journaled actions settled during this run, by kind and outcome",
            ["kind", "status"],
            snap.actions,
        )
        yield GaugeMetricFamily(
            "gpuplan_actions_open",
            "Journaled intents without an outcome yet",
            value=snap.actions_open,
        )
        for key, hist in snap.histograms:
            name, doc = HISTOGRAM_NAMES[key]
            family = HistogramMetricFamily(name, doc, unit="")
            buckets = [(_le(bound), count) for bound, count in hist.buckets]
            buckets.append(("+Inf", hist.count))
            family.add_metric([], buckets, sum_value=hist.total)
            yield family
        yield _labelled(
            CounterMetricFamily,
            "gpuplan_solver_calls",
            "Solver calls of the policy's decisions, by backend and status",
            ["backend", "status"],
            snap.solver_calls,
        )
        yield CounterMetricFamily(
            "gpuplan_solver_fallbacks",
            "Solver calls where the exact solver failed and the heuristic answered",
            value=snap.solver_fallbacks,
        )
        yield _labelled(
            CounterMetricFamily,
            "gpuplan_restart_gate_changes",
            "Changes of running jobs the policy proposed, the restart gate carried out or "
            "skipped, by kind",
            ["kind", "outcome"],
            snap.gate_changes,
        )
        yield _labelled(
            GaugeMetricFamily,
            "gpuplan_change_cost_seconds",
            "Measured cost of a change (journal intent to Slurm RUNNING again): median of the "
            "recent samples, by kind",
            ["kind"],
            [(kind, median) for kind, _, median in snap.change_costs],
        )
        yield _labelled(
            CounterMetricFamily,
            "gpuplan_change_cost_samples",
            "Change costs measured, by kind",
            ["kind"],
            [(kind, count) for kind, count, _ in snap.change_costs],
        )
        yield GaugeMetricFamily(
            "gpuplan_journal_bytes",
            "Size of the journal file and its WAL",
            value=snap.journal_bytes,
        )
        age = self.heartbeat(snap.heartbeat)
        yield GaugeMetricFamily(
            "gpuplan_heartbeat_age_seconds",
            "Age of the heartbeat file as "
            "the fail-open watchdog reads it (+Inf: missing or unusable)",
            value=age,
        )
        stall = math.inf if snap.loop_tick is None else max(0.0, self.monotonic() - snap.loop_tick)
        yield GaugeMetricFamily(
            "gpuplan_loop_stall_seconds",
            "Time since the control loop last completed a cycle (as of the snapshot)",
            value=stall,
        )
        yield GaugeMetricFamily(
            "gpuplan_heartbeat_withheld",
            "1 when the loop is stalled past "
            "--max-stall: the heartbeat stops and the watchdog will fail "
            "open",
            value=int(stall >= snap.max_stall_s),
        )
        yield GaugeMetricFamily(
            "gpuplan_failopen_jobs",
            "Managed jobs the fail-open watchdog "
            "released to Slurm's own scheduler, as of the last poll",
            value=snap.failopen_jobs,
        )


def _labelled(
    family: type[GaugeMetricFamily | CounterMetricFamily],
    name: str,
    doc: str,
    labels: list[str],
    rows: Iterable[Sequence[Any]],
) -> Metric:
    """A family with one sample per row: a row's leading items are the sample's values of
    ``labels``, its last item the sample's value."""
    metric = family(name, doc, labels=labels)
    for *values, value in rows:
        metric.add_metric(values, value)
    return metric


def _le(bound: float) -> str:
    return f"{bound:g}" if bound != math.inf else "+Inf"


def make_registry(source: Callable[[], LiveSnapshot | None], **kwargs: object) -> CollectorRegistry:
    """The controller's own registry with its :class:`SnapshotCollector`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(source, **kwargs))  # type: ignore[arg-type]
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in the Prometheus text format (what ``/metrics`` serves)."""
    return generate_latest(registry)
