"""Shared test helpers: small clusters, jobs, a simulation runner with invariant checks, and
the one way tests find the shared traces (:func:`need_traces`)."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import AllocationPlan, Cluster, ClusterView, JobSpec, Overheads
from gpuplan.solver_core.diff import check_plan
from gpuplan.solver_core.registry import make_policy

# Determinism: property tests draw the same examples on every machine and every run, so CI
# never depends on a local example database or luck.
settings.register_profile("gpuplan", derandomize=True, deadline=None, database=None)
settings.load_profile("gpuplan")

NO_OVERHEADS = Overheads(start_s=0, restart_s=0, sidecar_s=0, stop_free_s=0, migrate_s=0)


def rigid(job_id: str, submit: float, gpus: int, duration: float, **kw: object) -> JobSpec:
    return JobSpec(id=job_id, submit_time=submit, requested_gpus=gpus, duration=duration, **kw)


class CapacityChecker:
    """Plan hook: every plan respects capacity and GPU exclusivity at the instant it is made."""

    def __init__(self) -> None:
        self.plans = 0
        self.max_used = 0

    def __call__(self, view: ClusterView, plan: AllocationPlan) -> None:
        check_plan(view, plan)
        used = sum(a.gpus * a.share for a in plan.allocations.values())
        assert used <= view.capacity + 1e-6, f"{used} GPUs used > capacity {view.capacity}"
        per_node: dict[str, float] = defaultdict(float)
        for alloc in plan.allocations.values():
            for node, gpus in alloc.placement.items():
                per_node[node] += len(gpus) * alloc.share
        for node, n in per_node.items():
            assert n <= view.nodes[node].gpus + 1e-6
        self.plans += 1
        self.max_used = max(self.max_used, used)


@pytest.fixture
def run_sim():
    def _run(
        cluster: Cluster,
        jobs: list[JobSpec],
        policy: str,
        overheads: Overheads | None = None,
        **kw: object,
    ):
        checker = CapacityChecker()
        result, engine, executor = simulate(
            cluster,
            jobs,
            make_policy(policy),
            overheads=overheads or NO_OVERHEADS,
            on_plan=checker,
            record_segments=True,
            **kw,
        )
        assert checker.plans > 0
        return result, engine, executor

    return _run


@pytest.fixture(autouse=True)
def _check_delta_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs with the engine re-checking the plans it builds from deltas (off by
    default for speed; tests/engine/test_engine_delta_check.py covers both settings)."""
    from gpuplan.executors.engine import Engine

    monkeypatch.setattr(Engine, "check_delta_plans", True)


# --------------------------------------------------------------------------- shared traces
TRACES_ENV = "GPUPLAN_TRACES"
_TRUTHY = ("1", "true", "yes", "on")


def traces_expected() -> Path:
    """Where the shared traces must be: ``$GPUPLAN_TRACES``, else ``../shared/traces`` next
    to the repository (the project layout). No other place is searched: a test that finds its
    data somewhere else by luck would pass here and fail in CI."""
    env = os.environ.get(TRACES_ENV)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def traces_dir() -> Path | None:
    """The shared traces folder (resolved), or None when it is not where it must be."""
    path = traces_expected()
    return path.resolve() if path.is_dir() else None


def traces_required() -> bool:
    """Under CI (``CI`` true, or ``GPUPLAN_REQUIRE_TRACES``) missing traces fail the test:
    a CI machine without the data must not pass by skipping everything that reads it."""
    return (
        os.environ.get("CI", "").lower() in _TRUTHY
        or os.environ.get("GPUPLAN_REQUIRE_TRACES", "").lower() in _TRUTHY
    )


def need_traces(*parts: str) -> Path:
    """The shared traces folder, or ``parts`` below it, for a test that reads them. Missing:
    a skip with the reason outside CI, a failure (same reason) under CI."""
    root = traces_dir()
    target = root.joinpath(*parts) if root is not None else None
    if target is not None and target.exists():
        return target
    what = (
        f"{traces_expected()} is not a directory"
        if root is None
        else f"{'/'.join(parts)} is missing under {root}"
    )
    reason = (
        f"shared traces not found: {what} (set ${TRACES_ENV} or put shared/traces "
        "next to the repository)"
    )
    if traces_required():
        pytest.fail(f"shared traces required (CI) but not found: {what}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def traces() -> Path:
    """The shared traces folder (skip or, under CI, fail when it is missing)."""
    return need_traces()


@pytest.fixture(autouse=True, scope="session")
def _one_traces_folder() -> Iterator[None]:
    """Product code that resolves trace paths itself (scenario loaders) reads the folder the
    tests found: ``$GPUPLAN_TRACES`` is pinned to it for the session, so the loader's own
    search (a walk up from the working directory) never picks another copy."""
    found = traces_dir()
    if found is None or os.environ.get(TRACES_ENV):
        yield
        return
    os.environ[TRACES_ENV] = str(found)
    try:
        yield
    finally:
        os.environ.pop(TRACES_ENV, None)


@pytest.fixture(autouse=True, scope="session")
def _private_fit_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The fit cache (scenarios/fit_cache.py) of the session lives in a temporary folder, not
    in the user's ``~/.cache/gpuplan``: a test run neither reads entries left there nor leaves
    its own. Shared by the session's tests (and the subprocesses they start), so a Pollux
    model is fitted once per session; tests/scenarios/test_fit_cache.py points each test at
    its own."""
    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = previous
