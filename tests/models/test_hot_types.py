"""Issue 27 item 4: the engine's per-event types are slotted dataclasses, pydantic stays at the
file and JSON boundaries, no module reaches into pydantic's internals, and one function holds
the remaining-work formula that every policy loop uses."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from gpuplan.models import (
    Action,
    ActiveJob,
    AllocationPlan,
    CapacityChange,
    ClusterState,
    Event,
    JobAllocation,
    JobArrival,
    JobCompletion,
    JobSpec,
    LoanOffer,
    NodeFailure,
    ReclaimRequest,
    ThroughputProfile,
    Timer,
)
from gpuplan.models.state import remaining_time, remaining_work
from gpuplan.solver_core.policies.afs.afs_job import remaining_all
from gpuplan.solver_core.policies.baselines.shortest_first import RunningKeys
from gpuplan.solver_core.policies.baselines.shortest_first import remaining_time as srtf_time

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gpuplan", "models", "solver_core", "executors", "scenarios", "tests")

SPEC = JobSpec(
    id="j1",
    submit_time=5.0,
    requested_gpus=2,
    total_iterations=100.0,
    throughput=ThroughputProfile(points={1: 1.0, 2: 1.9}),
)


# --------------------------------------------------------------------------- no internals
def test_no_module_uses_pydantic_internals() -> None:
    """Neither the package nor its tests import pydantic's private modules (``_internal``),
    nor write a model's ``__dict__`` directly."""
    internal = re.compile(r"pydantic\s*\.\s*_internal|from\s+pydantic\s+import\s+_internal")
    dict_write = re.compile(r"\.__dict__\s*\[[^\]]*\]\s*=")
    offenders = []
    scanned = 0
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue
            scanned += 1
            text = path.read_text(encoding="utf-8")
            for n, line in enumerate(text.splitlines(), 1):
                if internal.search(line) or dict_write.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert scanned > 100  # the walk found the tree
    assert not offenders, "\n".join(offenders)


def test_the_scan_finds_what_it_forbids() -> None:
    """The patterns above match the forms they are meant to catch (else the scan proves
    nothing)."""
    internal = re.compile(r"pydantic\s*\.\s*_internal|from\s+pydantic\s+import\s+_internal")
    dict_write = re.compile(r"\.__dict__\s*\[[^\]]*\]\s*=")
    assert internal.search("from pydantic._internal._utils import smart_deepcopy")
    assert internal.search("import pydantic._internal")
    assert dict_write.search('plan.__dict__["decision_ms"] = ms')
    assert not dict_write.search("return self.__dict__ == other.__dict__")


# --------------------------------------------------------------------------- hot types
def test_hot_types_are_slotted() -> None:
    made = [
        JobAllocation(job_id="j"),
        Action(kind="keep", job_id="j"),
        JobArrival(time=0.0, job=SPEC),
        JobCompletion(time=0.0, job_id="j"),
        Timer(time=0.0),
        CapacityChange(time=0.0, change="add", nodes=("n",)),
    ]
    for obj in made:
        assert type(obj).__slots__ and not hasattr(obj, "__dict__"), type(obj)
    alloc = JobAllocation.fast("j", {"n0": (0, 1)})
    with pytest.raises(AttributeError):
        alloc.__dict__  # noqa: B018
    with pytest.raises(AttributeError):
        alloc.share = 0.5  # type: ignore[misc]


def test_fast_allocation_equals_checked_one() -> None:
    fast = JobAllocation.fast("j", {"n0": (0, 1), "n1": (3,)}, 0.5, 1.25)
    checked = JobAllocation(
        job_id="j", placement={"n0": [0, 1], "n1": [3]}, share=0.5, efficiency=1.25
    )
    assert fast == checked and repr(fast) == repr(checked)
    assert checked.placement == {"n0": (0, 1), "n1": (3,)}  # lists become tuples
    assert (fast.gpus, fast.nodes) == (3, 2)
    assert fast.gpu_set() == {("n0", 0), ("n0", 1), ("n1", 3)}
    assert (
        JobAllocation(job_id="j", share=1).share == 1.0
        and type(JobAllocation(job_id="j", share=1).share) is float
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(placement={"n": (0, 0)}), "repeated GPU index"),
        (dict(placement={"n": ()}), "empty GPU list"),
        (dict(placement={"n": (-1,)}), "negative GPU index"),
        (dict(placement={"n": (0.5,)}), "integers"),
        (dict(share=0.0), "share: must be > 0"),
        (dict(share=1.5), "share: must be > 0 and <= 1"),
        (dict(efficiency=0.0), "efficiency"),
        (dict(efficiency=1e9), "efficiency"),
        (dict(share="x"), "share: a number"),
    ],
)
def test_allocation_checks(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        JobAllocation(job_id="j", **kwargs)  # type: ignore[arg-type]


def test_action_kind_is_checked() -> None:
    with pytest.raises(ValueError, match=r"Action\.kind"):
        Action(kind="explode", job_id="j")  # type: ignore[arg-type]
    a = Action(kind="start", job_id="j", after=JobAllocation.fast("j", {"n": (0,)}))
    assert (a.gpus_before, a.gpus_after) == (0, 1)


def test_plan_json_boundary_round_trips_and_checks() -> None:
    """An AllocationPlan (pydantic) holding the dataclasses: JSON out and back is equal, and
    a bad allocation in a file is a ValidationError naming the field."""
    a = JobAllocation.fast("j", {"n0": (0, 1)}, 0.5)
    plan = AllocationPlan(
        time=3.0,
        policy="fifo",
        allocations={"j": a},
        actions=[Action(kind="start", job_id="j", after=a)],
    )
    text = plan.model_dump_json()
    assert '"placement":{"n0":[0,1]}' in text and '"kind":"start"' in text
    back = AllocationPlan.model_validate_json(text)
    assert back == plan and isinstance(back.allocations["j"], JobAllocation)
    assert isinstance(back.actions[0], Action) and back.actions[0].after == a
    assert plan.model_copy(update={"actions": []}).allocations == plan.allocations
    bad = text.replace('"n0":[0,1]', '"n0":[1,1]')
    with pytest.raises(ValidationError, match="repeated GPU index"):
        AllocationPlan.model_validate_json(bad)
    with pytest.raises(ValidationError, match="share"):
        AllocationPlan.model_validate_json(text.replace('"share":0.5', '"share":2.0'))
    with pytest.raises(ValidationError, match="bogus"):
        AllocationPlan.model_validate_json(text.replace('"share":0.5', '"share":0.5,"bogus":1'))
    with pytest.raises(ValidationError, match="kind"):
        AllocationPlan.model_validate_json(text.replace('"kind":"start"', '"kind":"boom"'))


def test_cluster_state_reads_an_allocation() -> None:
    state = ClusterState.model_validate(
        {
            "now": 10,
            "cluster": {"nodes": [{"name": "n0", "gpus": 4}]},
            "jobs": [
                {
                    "spec": SPEC.model_dump(mode="json"),
                    "allocation": {"job_id": "j1", "placement": {"n0": [0, 1]}},
                }
            ],
        }
    )
    alloc = state.jobs[0].allocation
    assert isinstance(alloc, JobAllocation) and alloc.placement == {"n0": (0, 1)}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: JobCompletion(time=-1.0, job_id="j"), "time: must be >= 0"),
        (lambda: Timer(time=math.nan), "time: must be >= 0"),
        (lambda: Timer(time="soon"), "time: a number"),  # type: ignore[arg-type]
        (lambda: LoanOffer(time=1.0, count=0), "count"),
        (lambda: ReclaimRequest(time=1.0, count=True), "count"),
        (lambda: NodeFailure(time=1.0, node="n", recover_after=0.0), "recover_after"),
        (lambda: CapacityChange(time=1.0, change="steal", nodes=("n",)), "change"),
        (lambda: LoanOffer(time=1.0, count=1, pool="gpu"), "pool"),
    ],
)
def test_events_check_what_the_models_checked(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_events_normalise_and_round_trip() -> None:
    arrival = JobArrival(time=1, job=SPEC)
    assert type(arrival.time) is float and arrival.kind == "arrival"
    change = CapacityChange(time=2.0, change="loan", nodes=["a", "b"])  # type: ignore[arg-type]
    assert change.nodes == ("a", "b")
    events = [arrival, change, JobCompletion(time=3.0, job_id="j1"), Timer(time=4.0)]
    adapter = TypeAdapter(list[Event])
    back = adapter.validate_json(adapter.dump_json(events))
    assert back == events and [type(e) for e in back] == [type(e) for e in events]
    with pytest.raises(AttributeError):
        events[2].time = 5.0  # type: ignore[misc]


# --------------------------------------------------------------------------- remaining work
def _job(rng: random.Random) -> ActiveJob:
    work = rng.choice([100.0, 1e6, 3.3333, 7.0])
    job = ActiveJob(spec=SPEC.model_copy(update={"total_iterations": work}))
    job.done = rng.uniform(0.0, work * 1.2)  # past the work too (clamped)
    job.anchor_time = rng.uniform(0.0, 50.0)
    job.resume_time = rng.choice([0.0, job.anchor_time, rng.uniform(0.0, 80.0)])
    job.rate = rng.choice([0.0, rng.uniform(0.01, 5.0), 1e-9])
    return job


def _by_hand(job: ActiveJob, now: float) -> float:
    """The formula as the model states it: max(0, work - min(work, done + rate x run))."""
    start = max(job.anchor_time, job.resume_time)
    done = (
        job.done
        if now <= start or job.rate <= 0
        else min(job.spec.work, job.done + job.rate * (now - start))
    )
    return max(0.0, job.spec.work - done)


def test_one_remaining_formula_everywhere() -> None:
    """ActiveJob.remaining, remaining_all (AFS-L), SRTF's key and RunningKeys, Themis' rho
    inputs and ClusterView.remaining_time all give the same floats as the formula."""
    rng = random.Random(27)
    jobs = [_job(rng) for _ in range(400)]
    for now in (0.0, 10.0, 49.9, 60.0, 1e5):
        expect = [_by_hand(j, now) for j in jobs]
        assert [remaining_work(j, now) for j in jobs] == expect
        assert [j.remaining(now) for j in jobs] == expect
        assert remaining_all(jobs, now) == expect
        per_s = SPEC.throughput.rate(SPEC.requested_gpus)
        assert [srtf_time(j, now) for j in jobs] == [e / per_s for e in expect]
        assert [remaining_time(j, now, 2) for j in jobs] == [e / per_s for e in expect]
        assert remaining_time(jobs[0], now, 0) == math.inf
        running = {f"j{i}": j for i, j in enumerate(jobs)}
        keys = RunningKeys(service=True)(running, now)
        assert sorted(k for k, _, _ in keys) == sorted(e / per_s * 2 for e in expect)
