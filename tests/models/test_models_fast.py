"""models/fast.py::construct builds exactly what ``model_construct`` builds, for every class the
engine builds with it, and refuses what ``model_construct`` would silently accept."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from pydantic import BaseModel, Field

from gpuplan.models import (
    Action,
    AllocationPlan,
    JobAllocation,
    JobArrival,
    JobCompletion,
    JobRecord,
    JobSpec,
    RunResult,
    Sample,
    SolverStats,
    ThroughputProfile,
    Timer,
)
from gpuplan.models.fast import construct

SPEC = JobSpec(
    id="j1",
    submit_time=5.0,
    requested_gpus=2,
    total_iterations=100.0,
    throughput=ThroughputProfile(points={1: 1.0, 2: 1.9}),
)
ALLOC = JobAllocation(job_id="j1", placement={"n0": (0, 1)})
RECORD: dict[str, Any] = dict(
    job_id="j1",
    user="u",
    model=None,
    requested_gpus=2,
    work=100.0,
    submit_time=5.0,
    first_start=6.0,
    finish_time=60.0,
    queueing_time=1.0,
    pending_time=1.0,
    jct=55.0,
    gpu_seconds=108.0,
    done_iterations=100.0,
    lost_iterations=0.0,
    preemptions=0,
    resizes=0,
    migrations=0,
)

# (class, values): every class the engine, the simulator and diff.py build with construct,
# each once with every field given and once leaving defaults (and default factories) out.
CASES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (JobAllocation, dict(job_id="j1", placement={"n0": (0, 1)}, share=1.0, efficiency=1.0)),
    (JobAllocation, dict(job_id="j1")),
    (JobAllocation, dict(job_id="j1", placement={"n1": (3,)}, share=0.5)),
    (Action, dict(kind="start", job_id="j1", before=None, after=ALLOC)),
    (Action, dict(kind="preempt", job_id="j1", before=ALLOC)),
    (
        AllocationPlan,
        dict(
            time=3.0,
            policy="fifo",
            allocations={"j1": ALLOC},
            actions=[Action(kind="start", job_id="j1", after=ALLOC)],
            stats=[SolverStats(stage="s", backend="heuristic", status="heuristic")],
            decision_ms=0.0,
        ),
    ),
    (AllocationPlan, dict(time=3.0, policy="fifo")),
    (JobCompletion, dict(time=2.0, kind="completion", job_id="j1")),
    (JobCompletion, dict(time=2.0, job_id="j1")),
    (JobArrival, dict(time=5.0, kind="arrival", job=SPEC)),
    (Timer, dict(time=7.0, kind="timer", name="round")),
    (Timer, dict(time=7.0)),
    (JobRecord, RECORD),
    (JobRecord, {**RECORD, "failed": True, "failure": "boom"}),
    (
        RunResult,
        dict(
            scenario="s",
            policy="fifo",
            seed=1,
            jobs=[JobRecord(**RECORD)],
            samples=[
                Sample(
                    time=0.0,
                    queue_length=0,
                    running=1,
                    cluster_efficiency=1.0,
                    blocking_index=0.0,
                    gpus_allocated=2,
                    capacity=8,
                )
            ],
            decision_ms=[0.1],
            rejected=[("j9", "duplicate job id")],
        ),
    ),
    (RunResult, dict(scenario="s", policy="fifo", jobs=[])),
]


def _ids() -> list[str]:
    return [f"{cls.__name__}-{i}" for i, (cls, _) in enumerate(CASES)]


@pytest.mark.parametrize(("cls", "values"), CASES, ids=_ids())
def test_construct_equals_model_construct(cls: type[BaseModel], values: dict[str, Any]) -> None:
    fast = construct(cls, **values)
    ref = cls.model_construct(**values)
    assert type(fast) is cls
    assert fast == ref and ref == fast
    assert fast.__dict__ == ref.__dict__
    assert list(fast.__dict__) == list(ref.__dict__)  # declaration order: repr, dumps
    assert repr(fast) == repr(ref)
    assert fast.model_fields_set == ref.model_fields_set == set(values)
    assert fast.__pydantic_extra__ is None and ref.__pydantic_extra__ is None
    assert fast.__pydantic_private__ is None and ref.__pydantic_private__ is None
    assert fast.model_dump() == ref.model_dump()
    assert fast.model_dump_json() == ref.model_dump_json()
    assert fast.model_dump(exclude_unset=True) == ref.model_dump(exclude_unset=True)
    # a validated instance from the same values is equal too (the values are valid)
    validated = cls.model_validate(ref.model_dump())
    assert fast == validated
    assert cls.model_validate_json(fast.model_dump_json()) == validated
    # copies, updates and pickling keep it equal to the reference's
    assert fast.model_copy() == ref.model_copy()
    assert copy.deepcopy(fast) == ref
    first = next(iter(values))
    update = {first: values[first]}
    assert fast.model_copy(update=update) == ref.model_copy(update=update)
    assert fast.model_copy(update=update).model_fields_set == ref.model_fields_set
    back = pickle.loads(pickle.dumps(fast))
    assert back == ref and back.model_fields_set == ref.model_fields_set
    # hashing follows the same rule (frozen models hash their fields, when those hash)
    assert _hash(fast) == _hash(ref)


def _hash(m: BaseModel) -> int | str:
    try:
        return hash(m)
    except TypeError as e:
        return str(e)


def test_factory_defaults_are_fresh_per_instance() -> None:
    a = construct(AllocationPlan, time=0.0, policy="p")
    b = construct(AllocationPlan, time=0.0, policy="p")
    assert a.actions == [] and a.actions is not b.actions
    assert a.allocations is not b.allocations and a.stats is not b.stats
    r = construct(RunResult, scenario="s", policy="p", jobs=[])
    assert (
        r.samples == []
        and r.samples is not construct(RunResult, scenario="s", policy="p", jobs=[]).samples
    )
    assert construct(JobAllocation, job_id="x").placement == {}


class _Odd(BaseModel):
    """Defaults model_construct copies per instance (a non-empty mutable default)."""

    xs: list[int] = [1, 2]
    tag: tuple[int, ...] = (1,)
    n: int = Field(default=3)


def test_mutable_defaults_are_copied_like_model_construct() -> None:
    a, b = construct(_Odd), construct(_Odd)
    assert a == _Odd.model_construct() and a.model_fields_set == set()
    assert a.xs == [1, 2] and a.xs is not b.xs
    a.xs.append(3)
    assert construct(_Odd).xs == [1, 2]


def test_refuses_unknown_and_missing_fields() -> None:
    with pytest.raises(TypeError, match=r"unknown field\(s\) \['nope'\]"):
        construct(JobCompletion, time=1.0, job_id="j", nope=1)
    with pytest.raises(TypeError, match=r"missing required field\(s\) \['job_id'\]"):
        construct(JobCompletion, time=1.0)
    with pytest.raises(TypeError, match="missing required"):
        construct(JobRecord, **{k: v for k, v in RECORD.items() if k != "jct"})
    # model_construct accepts both silently (the reason construct checks)
    assert "nope" not in JobCompletion.model_construct(time=1.0, job_id="j", nope=1).__dict__


def test_models_it_cannot_reproduce_go_through_model_construct() -> None:
    # ThroughputProfile has private attributes and a model_post_init
    fast = construct(ThroughputProfile, points={1: 1.0, 2: 1.5})
    ref = ThroughputProfile.model_construct(points={1: 1.0, 2: 1.5})
    assert fast == ref and fast.rate(2) == ref.rate(2) == 1.5

    class Aliased(BaseModel):
        x: int = Field(alias="y")

    assert construct(Aliased, y=4).x == 4  # the alias is honoured, as model_construct does
