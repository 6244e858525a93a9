"""Model layer: validation, throughput rules, JSON round trips."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from gpuplan.models import (
    Action,
    AllocationPlan,
    CapacityChange,
    Cluster,
    Elasticity,
    Event,
    JobAllocation,
    JobArrival,
    JobSpec,
    MemoryProfile,
    Node,
    ScenarioSpec,
    SolverStats,
    ThroughputProfile,
    placement_rate,
)


def test_throughput_interpolation_envelope_and_extrapolation() -> None:
    p = ThroughputProfile(points={1: 1.0, 2: 1.8, 4: 3.0, 8: 2.5})
    assert p.rate(0) == 0.0
    assert p.rate(3) == pytest.approx(2.4)  # linear between 2 and 4
    assert p.rate(6) == pytest.approx(3.0)  # envelope: the raw 2.75 is lifted to 3.0
    assert p.rate(16) == 3.0  # flat
    assert p.raw_rate(6) == pytest.approx(2.75)
    assert p.peak_gpus == 4
    lin = ThroughputProfile(points={2: 2.0, 4: 3.0}, extrapolation="linear")
    assert lin.rate(1) == pytest.approx(1.0)  # proportional below the first point
    assert lin.rate(8) == pytest.approx(6.0)
    none = ThroughputProfile(points={1: 1.0}, extrapolation="none")
    with pytest.raises(ValueError, match="beyond the largest measured"):
        none.rate(2)
    with pytest.raises(ValidationError, match="must be > 0"):
        ThroughputProfile(points={1: 0.0})


def test_job_work_from_duration_and_elasticity_checks() -> None:
    p = ThroughputProfile(points={1: 2.0, 4: 6.0})
    job = JobSpec(id="j", submit_time=0, requested_gpus=4, duration=100, throughput=p)
    assert job.work == 600.0
    with pytest.raises(ValidationError, match="total_iterations or duration"):
        JobSpec(id="j", submit_time=0, requested_gpus=1)
    with pytest.raises(ValidationError, match="outside the elasticity range"):
        JobSpec(
            id="j",
            submit_time=0,
            requested_gpus=8,
            duration=1,
            elasticity=Elasticity(min_gpus=1, max_gpus=4),
        )
    with pytest.raises(ValidationError, match="max_gpus"):
        Elasticity(min_gpus=4, max_gpus=2)
    assert Elasticity(min_gpus=1, max_gpus=8, allowed=(8, 2, 4, 1)).counts() == (1, 2, 4, 8)
    with pytest.raises(ValidationError, match="exceeds one GPU"):
        MemoryProfile(gamma=0.7, delta=0.5, p=0.1)


def test_cluster_validation_and_topology() -> None:
    with pytest.raises(ValidationError, match="duplicate node name"):
        Cluster(nodes=[Node(name="a", gpus=1), Node(name="a", gpus=1)])
    with pytest.raises(ValidationError, match="unknown GPU type"):
        Cluster(nodes=[Node(name="a", gpus=1, gpu_type="tpu")])
    c = Cluster.uniform(4, 2, nodes_per_rack=2)
    g = c.topology()
    assert g.number_of_nodes() == 2 + 2 + 4 + 8  # switches, racks, nodes, GPUs
    assert c.total_gpus == 8 and c.gpus_per_node == 2


def test_placement_rate_uses_type_speed_and_spread() -> None:
    cluster = Cluster(
        nodes=[Node(name="a", gpus=2, gpu_type="v100"), Node(name="b", gpus=2, gpu_type="t4")]
    )
    p = ThroughputProfile(points={1: 1.0, 2: 2.0, 4: 4.0}, default_spread_factor=0.5)
    job = JobSpec(id="j", submit_time=0, requested_gpus=4, duration=1, throughput=p)
    packed = JobAllocation(job_id="j", placement={"a": (0, 1)})
    spread = JobAllocation(job_id="j", placement={"a": (0, 1), "b": (0, 1)})
    assert placement_rate(job, cluster, packed) == 2.0
    # 4 GPUs, slowest is a T4 (0.25 of a V100), spread factor 0.5
    assert placement_rate(job, cluster, spread) == pytest.approx(4.0 * 0.25 * 0.5)


def test_json_round_trips() -> None:
    job = JobSpec(
        id="j",
        submit_time=1,
        requested_gpus=2,
        duration=5,
        memory=MemoryProfile(gamma=0.3, delta=0.2, p=0.1),
    )
    assert JobSpec.model_validate_json(job.model_dump_json()) == job
    alloc = JobAllocation(job_id="j", placement={"n": (0, 1)}, share=0.5)
    plan = AllocationPlan(
        time=3,
        policy="p",
        allocations={"j": alloc},
        actions=[Action(kind="start", job_id="j", after=alloc)],
        stats=[
            SolverStats(
                stage="placement",
                backend="cp-sat",
                status="optimal",
                objective=1,
                bound=1,
                gap=0,
                wall_ms=2.5,
            )
        ],
    )
    assert AllocationPlan.model_validate_json(plan.model_dump_json()) == plan
    adapter = TypeAdapter(list[Event])
    events = [JobArrival(time=1, job=job), CapacityChange(time=2, change="loan", nodes=("n",))]
    assert adapter.validate_json(adapter.dump_json(events)) == events
    spec = ScenarioSpec.model_validate({"name": "s", "workload": {"source": "synthetic"}})
    assert ScenarioSpec.model_validate_json(spec.model_dump_json()) == spec


def test_allocation_rejects_bad_gpu_lists() -> None:
    # a slotted dataclass: its own checks raise ValueError (pydantic wraps the same message
    # in a ValidationError at a JSON boundary: tests/models/test_hot_types.py)
    with pytest.raises(ValueError, match="repeated GPU index"):
        JobAllocation(job_id="j", placement={"n": (0, 0)})
    with pytest.raises(ValueError, match="empty GPU list"):
        JobAllocation(job_id="j", placement={"n": ()})


def test_the_lazy_export_table_agrees_with_each_module() -> None:
    """``gpuplan.models`` names its exports without importing their modules (PEP 562), so the
    table repeats names the modules declare; every name must be the module's own object and, in
    a module with ``__all__`` (``events.py`` lists the same names), one of its public names."""
    import importlib

    import gpuplan.models as models

    for module_name, names in models._EXPORTS.items():
        module = importlib.import_module(f"gpuplan.models.{module_name}")
        public = getattr(module, "__all__", names)
        for name in names:
            assert name in public, (module_name, name)
            assert getattr(models, name) is getattr(module, name), (module_name, name)
