"""The engine's GPU ledger against a brute-force model, and inside a running engine.

The state machine drives random occupy / vacate / add-node / remove-node / loan / reclaim
sequences through :class:`GpuLedger` and a model that only keeps the list of holders (each
allocation held now): the model answers "does this fit" by summing loads GPU by GPU, and after
every step the ledger's books must be exactly the holders' (``GpuLedger.check`` with them) and
its views must be the model's. A refused occupy or removal must leave the books unchanged.
The engine test runs random loans, reclaims, failures and recoveries through whole simulated
runs and checks the books against the running jobs' allocations after every batch.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from gpuplan.executors.engine import Engine
from gpuplan.executors.ledger import GpuLedger
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.models import (
    Cluster,
    Elasticity,
    JobAllocation,
    LoanOffer,
    Node,
    NodeFailure,
    ReclaimRequest,
)
from gpuplan.models.state import SHARE_EPS
from gpuplan.solver_core.registry import make_policy
from tests.conftest import NO_OVERHEADS, rigid

NODES = [
    Node(name="t0", gpus=4),
    Node(name="t1", gpus=2),
    Node(name="t2", gpus=3),
    Node(name="i0", gpus=2, pool="inference"),
    Node(name="i1", gpus=4, pool="inference"),
]
TRAINING = [n for n in NODES if n.pool == "training"]
SERVERS = [n for n in NODES if n.pool == "inference"]
SHARES = st.sampled_from([1.0, 1.0, 0.5, 0.25, 0.3, 0.7])


def _books(ledger: GpuLedger) -> tuple:
    """Everything the ledger holds, compared before and after a refused change."""
    return (
        dict(ledger.usable),
        copy.deepcopy(ledger.free),
        copy.deepcopy(ledger.shared),
        ledger.capacity,
        ledger.allocated,
        list(ledger.on_loan),
        ledger.index.total,
        ledger.shared_view(),
    )


class LedgerMachine(RuleBasedStateMachine):
    """Random sequences of ledger operations checked against the holders they stem from."""

    held = Bundle("held")

    def __init__(self) -> None:
        super().__init__()
        self.ledger = GpuLedger()
        self.holders: dict[str, JobAllocation] = {}
        self.serial = 0

    # ------------------------------------------------------------------ the model
    def _loads(self) -> dict[tuple[str, int], tuple[float, bool]]:
        """(node, GPU) -> (summed share, whether a whole-GPU holder has it)."""
        out: dict[tuple[str, int], tuple[float, bool]] = {}
        for alloc in self.holders.values():
            for node, gpus in alloc.placement.items():
                for g in gpus:
                    load, whole = out.get((node, g), (0.0, False))
                    out[(node, g)] = (load + alloc.share, whole or alloc.share >= 1.0)
        return out

    def _fits(self, alloc: JobAllocation) -> bool:
        loads = self._loads()
        for node, gpus in alloc.placement.items():
            if node not in self.ledger.usable:
                return False
            for g in gpus:
                load, whole = loads.get((node, g), (0.0, False))
                if alloc.share >= 1.0 and load > 0.0:
                    return False
                if whole or load + alloc.share > 1.0 + SHARE_EPS:
                    return False
        return True

    def _on(self, name: str) -> list[str]:
        return [j for j, a in self.holders.items() if name in a.placement]

    # ------------------------------------------------------------------ rules
    @rule(i=st.integers(0, len(TRAINING) - 1))
    def add_node(self, i: int) -> None:
        node = TRAINING[i]
        was = node.name in self.ledger.usable
        before = _books(self.ledger)
        self.ledger.add_node(node)
        if was:  # adding a usable node changes nothing
            assert _books(self.ledger) == before

    @rule(i=st.integers(0, len(NODES) - 1))
    def remove_node(self, i: int) -> None:
        name = NODES[i].name
        if self._on(name):
            before = _books(self.ledger)
            with pytest.raises(RuntimeError, match="leaves while jobs hold"):
                self.ledger.remove_node(name)
            assert _books(self.ledger) == before
        else:
            self.ledger.remove_node(name)
            assert name not in self.ledger.usable

    @rule(i=st.integers(0, len(SERVERS) - 1))
    def loan(self, i: int) -> None:
        node = SERVERS[i]
        if node.name not in self.ledger.usable and node.name not in self.ledger.on_loan:
            self.ledger.lend(node)
            assert self.ledger.on_loan[-1] == node.name

    @precondition(lambda self: self.ledger.on_loan)
    @rule(data=st.data())
    def reclaim(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(self.ledger.on_loan))
        for job in self._on(name):  # the engine evicts (or moves) them first
            alloc = self.holders.pop(job)
            self.ledger.vacate(alloc, alloc.gpus)
        self.ledger.give_back(name)
        self.ledger.remove_node(name)
        assert name not in self.ledger.on_loan and name not in self.ledger.usable

    @rule(target=held, data=st.data(), share=SHARES)
    def occupy(self, data: st.DataObject, share: float) -> str:
        names = sorted(self.ledger.usable) or [NODES[0].name]
        chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
        placement = {}
        for name in chosen:
            size = self.ledger.usable[name].gpus if name in self.ledger.usable else 4
            placement[name] = tuple(
                sorted(data.draw(st.sets(st.integers(0, size - 1), min_size=1, max_size=size)))
            )
        self.serial += 1
        job = f"j{self.serial}"
        alloc = JobAllocation.fast(job, placement, share)
        if self._fits(alloc):
            self.ledger.occupy(job, alloc, alloc.gpus)
            self.holders[job] = alloc
        else:
            before = _books(self.ledger)
            with pytest.raises(RuntimeError, match=job):
                self.ledger.occupy(job, alloc, alloc.gpus)
            assert _books(self.ledger) == before
        return job

    @rule(job=consumes(held))
    def vacate(self, job: str) -> None:
        alloc = self.holders.pop(job, None)
        if alloc is not None:
            self.ledger.vacate(alloc, alloc.gpus)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def books_are_the_holders(self) -> None:
        ledger = self.ledger
        ledger.check([(a, a.gpus) for a in self.holders.values()])
        loads = self._loads()
        for name, node in ledger.usable.items():
            unheld = [g for g in range(node.gpus) if (name, g) not in loads]
            assert ledger.free_view()[name] == unheld
            assert ledger.live_free()[name] == unheld
        fractional = {
            name: {g: load for (n, g), (load, whole) in loads.items() if n == name and not whole}
            for name in ledger.usable
        }
        view = ledger.shared_view()
        assert list(view) == sorted(n for n, loads_ in fractional.items() if loads_)
        for name, loads_ in view.items():
            assert loads_.keys() == fractional[name].keys()
            assert all(abs(v - fractional[name][g]) < 1e-9 for g, v in loads_.items())
        assert ledger.capacity == sum(n.gpus for n in ledger.usable.values())


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_check_catches_books_that_drift_from_the_holders() -> None:
    ledger = GpuLedger()
    ledger.add_node(NODES[0])
    alloc = JobAllocation.fast("a", {"t0": (0, 1)})
    ledger.occupy("a", alloc, 2)
    ledger.check([(alloc, 2)])
    ledger.free["t0"].add(1)  # a GPU held whole booked as free as well
    with pytest.raises(AssertionError):
        ledger.check([(alloc, 2)])
    ledger.free["t0"].discard(1)
    with pytest.raises(AssertionError, match="unheld"):
        ledger.check([])  # the books hold GPUs nobody has


def test_a_refused_occupy_names_the_gpu_and_changes_nothing() -> None:
    ledger = GpuLedger()
    ledger.add_node(NODES[0])
    ledger.add_node(NODES[1])
    ledger.occupy("a", JobAllocation.fast("a", {"t1": (1,)}), 1)
    before = _books(ledger)
    with pytest.raises(RuntimeError, match=r"GPU t1:1 to b but it is taken"):
        ledger.occupy("b", JobAllocation.fast("b", {"t0": (0, 1), "t1": (0, 1)}), 4)
    with pytest.raises(RuntimeError, match=r"GPU t1:1 to c but it is taken"):
        ledger.occupy("c", JobAllocation.fast("c", {"t0": (0,), "t1": (1,)}, 0.5), 2)
    assert _books(ledger) == before


# --------------------------------------------------------------------------- in the engine
LOANING = Cluster(
    nodes=[
        Node(name="t0", gpus=4),
        Node(name="t1", gpus=4),
        Node(name="i0", gpus=2, pool="inference"),
        Node(name="i1", gpus=4, pool="inference"),
    ]
)

_event = st.one_of(
    st.builds(LoanOffer, time=st.integers(1, 400), count=st.integers(1, 2)),
    st.builds(ReclaimRequest, time=st.integers(1, 400), count=st.integers(1, 2)),
    st.builds(
        NodeFailure,
        time=st.integers(1, 400),
        node=st.sampled_from(["t0", "t1", "i1"]),
        recover_after=st.one_of(st.none(), st.integers(10, 200)),
    ),
)
_job = st.tuples(
    st.integers(0, 300), st.sampled_from([1, 2, 4]), st.integers(5, 200), st.booleans()
)


@pytest.mark.parametrize("policy", ["fifo-backfill", "srtf", "afs-l"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=st.lists(_job, min_size=1, max_size=12), events=st.lists(_event, max_size=6))
def test_engine_books_equal_the_running_jobs_after_every_batch(
    policy: str, jobs: list[tuple[int, int, int, bool]], events: list
) -> None:
    specs = [
        rigid(f"j{i}", t, g, d, elasticity=Elasticity(min_gpus=1, max_gpus=4) if elastic else None)
        for i, (t, g, d, elastic) in enumerate(jobs)
    ]
    executor = SimulatedCluster(LOANING, specs, events=events, overheads=NO_OVERHEADS)
    engine = Engine(LOANING, make_policy(policy), executor)
    while (batch := executor.next_events()) is not None:
        engine.handle(*batch)
        engine.ledger.check(
            [(j.allocation, j.gpus) for j in engine.running.values() if j.allocation is not None]
        )
        assert set(engine.ledger.on_loan) <= {"i0", "i1"}
        assert not engine.ledger.down & set(engine.ledger.usable)
    finished = [r for r in engine.recorder.records if r.finish_time is not None]
    assert len(finished) + len(engine.running) + len(engine.pending) == len(specs)
