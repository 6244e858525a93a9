"""gpuplan's shared model layer: every type that crosses a boundary (pydantic v2).

Imports no solver and no executor: it is the bottom of the dependency stack.

Names load lazily (PEP 562): ``from gpuplan.models import InputError`` imports
``models/errors.py`` alone, not the ~50 pydantic classes of the other modules (about half of a
cold ``gpuplan`` start, issue 28). :data:`_EXPORTS` says which module defines each name; a
name is imported on first use and then kept in this module's namespace.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, tuple[str, ...]] = {
    "cluster": ("Cluster", "Node", "Pool"),
    "errors": ("GpuplanError", "InfeasibleError", "InputError", "PlanRefused"),
    "events": (
        "CapacityChange",
        "Event",
        "JobArrival",
        "JobCompletion",
        "JobFailure",
        "LoanOffer",
        "NodeFailure",
        "NodeRecovery",
        "ReclaimRequest",
        "ThroughputMeasured",
        "Timer",
    ),
    "free_index": ("FreeIndex",),
    "gpu": ("KNOWN_GPU_TYPES", "GpuType"),
    "job": ("Checkpointing", "Elasticity", "JobSpec", "MemoryProfile", "NodeShape"),
    "ojpp": ("OjppInstance", "OjppJob", "load_ojpp"),
    "plan": (
        "Action",
        "ActionKind",
        "AllocationPlan",
        "JobAllocation",
        "SolverStats",
        "SolverStatus",
    ),
    "records": ("JobRecord", "ObjectiveBound", "RunResult", "Sample"),
    "scenario": (
        "ClusterSpec",
        "EngineSpec",
        "LearningSpec",
        "Overheads",
        "ScenarioSpec",
        "WorkloadSpec",
    ),
    "state": (
        "SHARE_EPS",
        "ActiveJob",
        "ClusterState",
        "ClusterView",
        "JobSnapshot",
        "occupy_gpu",
        "placement_rate",
        "vacate_gpu",
    ),
    "throughput": ("ThroughputProfile", "allocatable_units"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
