"""gpuplan's shared model layer: every type that crosses a boundary (pydantic v2).

Imports no solver and no executor: it is the bottom of the dependency stack.
"""

from .cluster import Cluster, Node, Pool
from .errors import GpuplanError, InfeasibleError, InputError, PlanRefused
from .events import (
    CapacityChange,
    Event,
    JobArrival,
    JobCompletion,
    JobFailure,
    LoanOffer,
    NodeFailure,
    NodeRecovery,
    ReclaimRequest,
    ThroughputMeasured,
    Timer,
)
from .free_index import FreeIndex
from .gpu import KNOWN_GPU_TYPES, GpuType
from .job import Checkpointing, Elasticity, JobSpec, MemoryProfile, NodeShape
from .ojpp import OjppInstance, OjppJob, load_ojpp
from .plan import Action, ActionKind, AllocationPlan, JobAllocation, SolverStats, SolverStatus
from .records import JobRecord, ObjectiveBound, RunResult, Sample
from .scenario import (
    ClusterSpec,
    EngineSpec,
    LearningSpec,
    Overheads,
    ScenarioSpec,
    WorkloadSpec,
)
from .state import (
    SHARE_EPS,
    ActiveJob,
    ClusterState,
    ClusterView,
    JobSnapshot,
    occupy_gpu,
    placement_rate,
    vacate_gpu,
)
from .throughput import ThroughputProfile, allocatable_units

__all__ = [
    "Action",
    "ActionKind",
    "ActiveJob",
    "allocatable_units",
    "AllocationPlan",
    "CapacityChange",
    "Checkpointing",
    "Cluster",
    "ClusterSpec",
    "ClusterState",
    "ClusterView",
    "Elasticity",
    "FreeIndex",
    "EngineSpec",
    "Event",
    "GpuplanError",
    "GpuType",
    "InfeasibleError",
    "InputError",
    "JobAllocation",
    "JobArrival",
    "JobCompletion",
    "JobFailure",
    "JobRecord",
    "JobSnapshot",
    "JobSpec",
    "KNOWN_GPU_TYPES",
    "LearningSpec",
    "LoanOffer",
    "MemoryProfile",
    "Node",
    "NodeShape",
    "NodeFailure",
    "NodeRecovery",
    "ObjectiveBound",
    "OjppInstance",
    "OjppJob",
    "load_ojpp",
    "occupy_gpu",
    "PlanRefused",
    "Overheads",
    "placement_rate",
    "SHARE_EPS",
    "vacate_gpu",
    "Pool",
    "ReclaimRequest",
    "RunResult",
    "Sample",
    "ScenarioSpec",
    "SolverStats",
    "SolverStatus",
    "ThroughputMeasured",
    "ThroughputProfile",
    "Timer",
    "WorkloadSpec",
]
