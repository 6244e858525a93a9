"""The shared solver pieces: one ladder builder (two plateau rules), one water-filling, and the
reclaim's coupled components of the server-job graph."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import Cluster, Elasticity, JobSpec, ThroughputProfile
from gpuplan.scenarios.zoo import load_afs_zoo
from gpuplan.solver_core.helpers.ladders import LadderCache, Ladders, build_ladder
from gpuplan.solver_core.helpers.water_fill import water_fill
from gpuplan.solver_core.policies.afs.afs import maxmin_shares
from gpuplan.solver_core.policies.afs.afs_job import AfsJob
from gpuplan.solver_core.policies.aryl.reclaim import ReclaimInstance, components
from gpuplan.solver_core.policies.baselines.maxmin import progressive_fill
from tests.policies.test_afs_baselines import make_view
from tests.policies.test_aryl_reclaim import FIG5, instances


def spec_of(
    profile: ThroughputProfile, max_gpus: int = 64, allowed: tuple[int, ...] = (), job_id: str = "j"
) -> JobSpec:
    return JobSpec(
        id=job_id,
        submit_time=0.0,
        requested_gpus=1,
        total_iterations=100.0,
        throughput=profile,
        elasticity=Elasticity(min_gpus=1, max_gpus=max_gpus, allowed=allowed),
    )


# --------------------------------------------------------------------------- ladders
def test_plateau_rules_differ_only_after_a_flat_stretch() -> None:
    plateau = spec_of(ThroughputProfile(points={1: 1.0, 2: 1.5, 3: 1.5, 4: 2.0}), max_gpus=8)
    assert build_ladder(plateau, 64, "stop") == ((1, 2), (1.0, 1.5))
    assert build_ladder(plateau, 64, "skip") == ((1, 2, 4), (1.0, 1.5, 2.0))
    # A learned belief (AFS §4.5): measured flat on 8..12 past the peak, linear beyond 12.
    belief = ThroughputProfile.linear().believed_from({1: 1.0, 8: 4.0, 12: 4.0})
    learned = spec_of(belief, max_gpus=16)
    assert build_ladder(learned, 64, "stop")[0] == tuple(range(1, 9))
    assert build_ladder(learned, 64, "skip")[0] == (*range(1, 9), 13, 14, 15, 16)
    assert build_ladder(learned, 12, "skip")[0] == tuple(range(1, 9))


def test_plateau_rules_agree_on_every_zoo_profile() -> None:
    checked = 0
    for model in load_afs_zoo().values():
        for allowed in ((), (1, 2, 4, 8, 16, 32, 64), (1, 2, 4, 8, 12, 16, 20, 24, 28, 32)):
            for max_gpus in (1, 8, 16, 64):
                spec = spec_of(model.profile, max_gpus, tuple(a for a in allowed if a <= max_gpus))
                for limit in (4, 8, 32, 256):
                    stop = build_ladder(spec, limit, "stop")
                    assert stop == build_ladder(spec, limit, "skip"), (model, spec, limit)
                    checked += 1
                    assert stop[0] and stop[0][-1] <= min(max_gpus, limit)
    assert checked == 9 * 3 * 4 * 4


def test_unmeasured_counts_end_the_ladder_under_both_rules() -> None:
    spec = spec_of(ThroughputProfile(points={1: 1.0, 2: 1.8}, extrapolation="none"), max_gpus=8)
    with pytest.raises(ValueError):
        spec.throughput.rate(3)
    assert build_ladder(spec, 8, "stop") == build_ladder(spec, 8, "skip") == ((1, 2), (1.0, 1.8))
    with pytest.raises(ValueError, match="plateau"):
        build_ladder(spec, 8, "flat")  # type: ignore[arg-type]


def test_ladder_cache_shares_equal_ladders_and_rebuilds_on_a_new_spec() -> None:
    zoo = load_afs_zoo()
    vgg, other = zoo["VGG16"].profile, zoo["Transformer"].profile
    a, b = spec_of(vgg, job_id="a"), spec_of(vgg, job_id="b")
    view = make_view(0.0, Cluster.uniform(4, 8), [(a, 0.0, 0), (b, 0.0, 0)])
    ja, jb = view.pending["a"], view.pending["b"]
    cache = LadderCache("stop")
    first = cache.ladder(ja, 32)
    assert cache.ladder(jb, 32) is first  # one built ladder per (profile, counts, limit)
    assert first[0] == tuple(range(1, 9)) and cache.max_useful(ja, 32) == 8
    assert cache(ja, 4) == (1, 2, 3, 4)  # the limit is part of the key
    ja.spec = a.model_copy(update={"throughput": other})  # what throughput learning does
    assert cache.ladder(ja, 32) == build_ladder(ja.spec, 32, "stop") != first
    assert Ladders().plateau == "skip" and cache.plateau == "stop"
    with pytest.raises(ValueError, match="plateau"):
        LadderCache("never")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- water-filling
def literal_water_fill(
    ladders: list[tuple[int, ...]],
    total: int,
    score: dict[tuple[int, int], float | None] | None = None,
) -> dict[int, int]:
    """Water-filling by its definition, with no heap: the served job with the lowest
    (score, position) takes its next step; one whose step does not fit stops for good."""
    filled: dict[int, int] = {}
    free = total
    for pos, ladder in enumerate(ladders):
        if free == 0:
            break
        if ladder and ladder[0] <= free:
            filled[pos] = ladder[0]
            free -= ladder[0]
    level = dict.fromkeys(filled, 0)
    growing = {p for p in filled if len(ladders[p]) > 1}

    def key(p: int) -> float | None:
        c, n = ladders[p][level[p]], ladders[p][level[p] + 1]
        return c if score is None else score[p, n]

    growing = {p for p in growing if key(p) is not None}
    while free > 0 and growing:
        p = min(growing, key=lambda q: (key(q), q))
        step = ladders[p][level[p] + 1] - ladders[p][level[p]]
        if step > free:
            growing.discard(p)
            continue
        level[p] += 1
        filled[p] = ladders[p][level[p]]
        free -= step
        if level[p] + 1 >= len(ladders[p]) or key(p) is None:
            growing.discard(p)
    return filled


def test_water_fill_worked_example() -> None:
    ladders = [(1, 2, 3, 4), (1, 2), (2, 4, 8), (), (6,)]
    # phase 1: 1, 1, 2 (the empty ladder and the 6 that no longer fits are skipped); then the
    # fewest-GPUs job grows, ties to the earlier one: 0->2, 1->2, 0->3, 2->4 (uses the last 2).
    filled = water_fill(ladders, 9)
    assert filled == {0: 3, 1: 2, 2: 4}
    assert list(filled) == [0, 1, 2]  # in first-served order
    assert maxmin_shares(
        [AfsJob(str(i), 0.0, c, tuple(map(float, c))) for i, c in enumerate(ladders)], 9
    ) == [3, 2, 4, 0, 0]
    # the walk draws no ladder once the GPUs are gone (a long queue costs only those served)
    drawn = []
    water_fill((drawn.append(i) or (1,) for i in range(100)), 3)
    assert drawn == [0, 1, 2]


@st.composite
def fill_cases(draw: st.DrawFn) -> tuple[list[tuple[int, ...]], int, dict | None]:
    ladders = []
    for _ in range(draw(st.integers(0, 8))):
        steps = draw(st.lists(st.integers(1, 3), max_size=5))
        ladders.append(tuple(itertools.accumulate(steps)))
    total = draw(st.integers(0, 20))
    score = None
    if draw(st.booleans()):
        score = {
            (p, n): draw(st.one_of(st.none(), st.sampled_from([-2.0, -1.0, 0.5, 3.0])))
            for p, lad in enumerate(ladders)
            for n in lad
        }
    return ladders, total, score


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=fill_cases())
def test_water_fill_equals_its_literal_definition(case) -> None:
    ladders, total, table = case
    fn = None if table is None else (lambda p, c, n: table[p, n])
    filled = water_fill(ladders, total, fn)
    assert filled == literal_water_fill(ladders, total, table)
    assert sum(filled.values()) <= total
    assert all(c in ladders[p] for p, c in filled.items())


def test_max_min_and_afs_s_share_one_water_filling() -> None:
    """Same ladders in the same order: the Max-Min stage's fill and AFS-S's agree."""
    profile = ThroughputProfile(points={1: 1.0, 4: 3.0}, extrapolation="flat")
    specs = [spec_of(profile, max_gpus=m, job_id=f"j{i}") for i, m in enumerate((8, 2, 4, 1, 8))]
    specs = [s.model_copy(update={"submit_time": float(i)}) for i, s in enumerate(specs)]
    view = make_view(10.0, Cluster.uniform(2, 5), [(s, 0.0, 0) for s in specs])
    jobs = [view.pending[s.id] for s in specs]
    ladders = Ladders()
    shares = progressive_fill(view, jobs, ladders)
    afs = maxmin_shares([AfsJob(j.spec.id, 0.0, *ladders.ladder(j, 10)) for j in jobs], 10)
    assert shares == {j.spec.id: c for j, c in zip(jobs, afs, strict=True) if c}
    assert shares == {"j0": 3, "j1": 2, "j2": 2, "j3": 1, "j4": 2}


# --------------------------------------------------------------------------- reclaim components
def linked_groups(inst: ReclaimInstance) -> list[list[str]]:
    """Components by repeated merging of overlapping server sets (no graph library)."""
    groups = [{s} for s in inst.servers]
    for job in inst.jobs:
        loan = {s for s in job.gpus if s in inst.servers}
        touching = [g for g in groups if g & loan]
        merged = set().union(*touching) if touching else set()
        groups = [g for g in groups if not g & loan] + ([merged] if merged else [])
    rank = {s: i for i, s in enumerate(inst.servers)}
    return sorted((sorted(g, key=rank.__getitem__) for g in groups), key=lambda g: rank[g[0]])


def test_components_of_fig5() -> None:
    inst = ReclaimInstance.from_server_jobs(FIG5)
    assert components(inst) == [["1", "2"], ["3"], ["4", "5", "6"]]


@settings(max_examples=200, deadline=None)
@given(inst=instances())
def test_components_equal_merged_server_sets(inst: ReclaimInstance) -> None:
    assert components(inst) == linked_groups(inst)
