"""Issue 25 item 1: decisions carry reasons (simulator side; the lab side is in
tests/slurm/test_controller_ops.py).

* the pending-reason computation on real cluster views (a single-node job on a fragmented
  cluster, a job behind others, a job too large for the free GPUs);
* reasons in the policy's own terms on small simulated runs: Tiresias-L's queue level is the
  job's attained-service bucket, AFS-L's share and rank, the restart gate's gain and cost of a
  change it skipped;
* recording reasons changes no decision;
* ``simulate --out`` writes ``decisions.jsonl`` and ``explain --run`` reads it back.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.executors.reason_explainers import Explainer, TiresiasExplainer
from gpuplan.executors.reasons import FreeSummary, capacity_reason, pending_reasons
from gpuplan.executors.restart_gate import RestartGate
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    Cluster,
    ClusterState,
    ClusterView,
    JobAllocation,
    JobSnapshot,
    JobSpec,
    NodeShape,
)
from gpuplan.models.reasons import DecisionRecord
from gpuplan.solver_core.registry import make_policy
from gpuplan.solver_core.restart_gate import GateConfig

from ..conftest import NO_OVERHEADS

SINGLE = NodeShape(max_nodes=1)


def _spec(
    job_id: str,
    gpus: int,
    shape: NodeShape | None = None,
    submit: float = 0.0,
    duration: float = 1000.0,
    **kw: object,
) -> JobSpec:
    return JobSpec(
        id=job_id,
        submit_time=submit,
        requested_gpus=gpus,
        duration=duration,
        node_shape=shape,
        **kw,
    )


def _fragmented(*pending: JobSpec) -> ClusterView:
    """Two 4-GPU nodes: x holds three GPUs of node000, y two of node001 (1 and 2 free)."""
    return ClusterState(
        now=0,
        cluster=Cluster.uniform(2, 4),
        jobs=[
            JobSnapshot(
                spec=_spec("x", 3),
                allocation=JobAllocation(job_id="x", placement={"node000": (0, 1, 2)}),
            ),
            JobSnapshot(
                spec=_spec("y", 2),
                allocation=JobAllocation(job_id="y", placement={"node001": (0, 1)}),
            ),
            *(JobSnapshot(spec=s) for s in pending),
        ],
    ).to_view()


def test_a_single_node_job_waits_for_a_node_with_room() -> None:
    view = _fragmented(_spec("big", 4, SINGLE))
    reasons = pending_reasons(view, Explainer(), 0.0, ["big"])
    r = reasons["big"]
    assert r.code == "no-node-fits"
    assert r.text == "needs 4 GPUs on one node, at most 2 free on any node"
    assert r.terms == {"needs": 4, "free": 3, "most_free_on_a_node": 2, "ahead": 0}
    # Spread over nodes it could run: three free in all are not enough for 4 either...
    spread = _fragmented(_spec("wide", 4))
    assert (
        pending_reasons(spread, Explainer(), 0.0, ["wide"])["wide"].text == "needs 4 GPUs, 3 free"
    )
    # ...but 3 are, so no capacity reason: the policy's order is why it waits.
    fits = _fragmented(_spec("three", 3))
    free = FreeSummary(fits.nodes, fits.free)
    assert capacity_reason(fits.pending["three"], free) is None
    assert pending_reasons(fits, Explainer(), 0.0, ["three"])["three"].code == "behind"


def test_a_job_behind_others_names_them() -> None:
    jobs = [_spec(j, 4, SINGLE, submit=i) for i, j in enumerate("abcde")]
    view = _fragmented(*jobs)
    reasons = pending_reasons(view, Explainer(), 0.0, list("abcde"))
    assert reasons["a"].terms["ahead"] == 0 and "behind" not in reasons["a"].text
    assert reasons["d"].text == (
        "needs 4 GPUs on one node, at most 2 free on any node; "
        "behind 3 jobs of higher priority: a, b, c"
    )
    assert reasons["e"].terms["ahead"] == 4 and reasons["e"].text.endswith(": a, b, c, ...")


def test_gpu_type_and_per_node_shapes() -> None:
    cluster = Cluster.uniform(2, 4)
    view = ClusterState(
        now=0,
        cluster=cluster,
        jobs=[
            JobSnapshot(
                spec=_spec("x", 1),
                allocation=JobAllocation(job_id="x", placement={"node000": (0,)}),
            ),
            JobSnapshot(spec=_spec("nxg", 8, NodeShape(gpus_per_node=4))),
        ],
    ).to_view()
    r = pending_reasons(view, Explainer(), 0.0, ["nxg"])["nxg"]
    assert r.code == "no-node-fits" and r.terms["gpus_per_node"] == 4
    assert r.text == "needs 8 GPUs as 2 nodes x 4, room for 1 such nodes"


def _run(
    policy: str, jobs: list[JobSpec], cluster: Cluster, **kw: object
) -> tuple[list[DecisionRecord], object]:
    records: list[DecisionRecord] = []
    result, engine, _ = simulate(
        cluster,
        jobs,
        make_policy(policy),
        overheads=NO_OVERHEADS,
        sample_interval_s=None,
        reasons=records.append,
        **kw,
    )
    return records, (result, engine)


def test_recording_reasons_changes_no_decision() -> None:
    jobs = [
        _spec(
            f"j{i}",
            1 + i % 4,
            SINGLE if i % 3 == 0 else None,
            submit=30.0 * i,
            duration=400.0 + 97 * i,
        )
        for i in range(30)
    ]
    for policy in ("fifo", "tiresias-l", "afs-l", "srtf"):
        plain, _, _ = simulate(
            Cluster.uniform(2, 4),
            jobs,
            make_policy(policy),
            overheads=NO_OVERHEADS,
            sample_interval_s=None,
        )
        records, (explained, _) = _run(policy, jobs, Cluster.uniform(2, 4))
        assert records, policy
        strip = {"wall_s", "decision_ms", "solver_ms"}
        assert explained.model_dump(exclude=strip) == plain.model_dump(exclude=strip), policy


def test_tiresias_queue_level_is_the_attained_service_bucket() -> None:
    # A (4 GPUs) runs alone, crosses 3600 GPU-s at 900 s and drops to Q1; B (Q0) preempts it.
    jobs = [_spec("A", 4, duration=3000.0), _spec("B", 4, submit=100.0, duration=500.0)]
    records, (_, engine) = _run("tiresias-l", jobs, Cluster.uniform(1, 4))
    stage = engine.policy.allocation
    seen = 0
    for rec in records:
        reasons = [a.reason for a in rec.actions] + list(rec.pending.values())
        for r in reasons:
            if "queue" not in r.terms or "attained_gpu_s" not in r.terms:
                continue
            bucket = min(
                bisect.bisect_right(stage.thresholds, r.terms["attained_gpu_s"] + 1e-3),
                len(stage.thresholds),
            )
            assert r.terms["queue"] == bucket, (rec.time, r)
            seen += 1
    assert seen >= 3
    preempt = [(rec.time, a) for rec in records for a in rec.actions if a.kind == "preempt"]
    assert [(t, a.job_id) for t, a in preempt] == [(900.0, "A")]
    terms = preempt[0][1].reason.terms
    assert terms["queue"] == 1 and terms["attained_gpu_s"] == pytest.approx(3600.0)
    assert "Q1" in preempt[0][1].reason.text
    start_b = [a for rec in records for a in rec.actions if a.kind == "start" and a.job_id == "B"]
    assert start_b[0].reason.terms["queue"] == 0
    # B waited from 100 s to 900 s with A's Q0 as the reason
    waits = [rec.pending["B"] for rec in records if "B" in rec.pending]
    assert waits and waits[0].code == "no-capacity" and waits[0].terms["queue"] == 0
    assert isinstance(TiresiasExplainer(stage).order(engine, 0.0), list)


def test_afs_l_reasons_give_share_and_rank() -> None:
    elastic = {"elasticity": {"min_gpus": 1, "max_gpus": 4}}
    jobs = [
        _spec("a", 2, submit=0.0, duration=2000.0, **elastic),
        _spec("b", 2, submit=10.0, duration=300.0, **elastic),
        _spec("c", 2, submit=20.0, duration=900.0, **elastic),
    ]
    records, _ = _run("afs-l", jobs, Cluster.uniform(1, 4))
    checked = 0
    submits = {j.id: j.submit_time for j in jobs}
    for rec in records:
        ranks = {}
        for a in rec.actions:
            if a.kind in ("start", "resize") and a.carried:
                assert a.reason.terms["share"] == a.gpus_after
                assert f"share {a.gpus_after} GPUs" in a.reason.text
                ranks[a.job_id] = a.reason.terms["rank"]
                checked += 1
        # ranks follow the scan order (submit time, id) and count only submitted jobs
        ordered = sorted(ranks, key=lambda j: (submits[j], j))
        assert [ranks[j] for j in ordered] == sorted(ranks.values())
        assert all(1 <= r <= sum(t <= rec.time for t in submits.values()) for r in ranks.values())
    assert checked >= 3
    first = records[0]
    assert [(a.job_id, a.reason.terms["rank"]) for a in first.actions if a.kind == "start"] == [
        ("a", 1)
    ]


def test_the_gate_says_why_it_skipped_a_change() -> None:
    # A preemption that costs far more than it gains: the gate keeps A running; B waits.
    gate = RestartGate(GateConfig(min_dwell_s=0.0, priors={"preempt": 1e6}))
    jobs = [_spec("A", 4, duration=3000.0), _spec("B", 4, submit=100.0, duration=500.0)]
    records, (_, engine) = _run("tiresias-l", jobs, Cluster.uniform(1, 4), restart_gate=gate)
    skipped = [(rec, a) for rec in records for a in rec.actions if not a.carried]
    assert skipped, "the gate skipped nothing"
    rec, a = next((r, x) for r, x in skipped if x.kind == "preempt")
    decision = next(d for d in gate.decisions if d.time == rec.time and "A" in d.changes)
    assert not decision.carried and decision.why == "too costly"
    assert a.reason.code == "gate-skip"
    assert a.reason.terms["gain_gpu_s"] == pytest.approx(decision.gain, abs=1e-3)
    assert a.reason.terms["cost_gpu_s"] == pytest.approx(decision.cost, abs=1e-3)
    assert a.reason.terms["cost_gpu_s"] > a.reason.terms["gain_gpu_s"]
    assert any(x.job_id == "B" and x.kind == "start" and not x.carried for _, x in skipped)
    assert "B" in engine.pending or any(r.job_id == "B" for r in engine.records)


def test_simulate_out_writes_decisions_and_explain_reads_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert (
        main(
            [
                "simulate",
                "--scenario",
                "itp-cluster10",
                "--policy",
                "tiresias-l",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    capsys.readouterr()
    lines = (out / "decisions.jsonl").read_text().splitlines()
    records = [DecisionRecord.model_validate_json(line) for line in lines]
    assert records and records[0].time == 0.0
    started = next(a for r in records for a in r.actions if a.kind == "start")
    waited = next(j for r in records for j in r.pending)
    assert main(["explain", started.job_id, "--run", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"job {started.job_id}" in text and "start" in text and "Q0" in text
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert main(["explain", waited, "--run", str(out)]) == 0
    assert "waiting: needs" in capsys.readouterr().out
    # an unknown job, a damaged file, a missing folder: one line each, exit 2
    assert main(["explain", "no-such-job", "--run", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not in this run" in err
    with open(out / "decisions.jsonl", "a") as fh:
        fh.write("{not json\n")
    assert main(["explain", started.job_id, "--run", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"row {len(lines) + 1}" in err
    assert main(["explain", "x", "--run", str(tmp_path / "nowhere")]) == 2
    assert "no decisions.jsonl" in capsys.readouterr().err


def test_decisions_file_is_not_written_through_a_planted_link(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    target = tmp_path / "victim"
    target.write_text("keep")
    (out / "decisions.jsonl").symlink_to(target)
    assert (
        main(
            [
                "simulate",
                "--scenario",
                "itp-cluster10",
                "--policy",
                "fifo",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    assert target.read_text() == "keep"
    assert not (out / "decisions.jsonl").is_symlink()
    assert json.loads((out / "decisions.jsonl").read_text().splitlines()[0])["time"] == 0.0


def _records_of(scenario: str, policy: str) -> list[DecisionRecord]:
    from gpuplan import api

    records: list[DecisionRecord] = []
    api.run(api.prepare(scenario), policy, reasons=records.append)
    return records


def test_sidecar_ojpp_and_aryl_reasons_speak_their_policys_terms() -> None:
    sidecar = [a for r in _records_of("sidecar-case-study", "sidecar") for a in r.actions]
    donated = [a for a in sidecar if a.kind == "start" and "donor" in a.reason.terms]
    assert donated, "no SideCar start took GPUs from a donor"
    for a in donated:
        donor = a.reason.terms["donor"]
        assert f"donor {donor}" in a.reason.text
        assert a.reason.terms["predicted_makespan_s"] > 0
        assert any(
            x.job_id == donor and x.kind == "resize" and x.gpus_after < x.gpus_before
            for x in sidecar
        )
    ojpp = [
        a
        for r in _records_of("h200-colocation", "fifo-ojpp")
        for a in r.actions
        if a.kind == "start"
    ]
    assert ojpp and all(
        {"gpus_chosen", "share", "predicted_collision"} <= set(a.reason.terms) for a in ojpp
    )
    assert all(0.0 <= float(a.reason.terms["predicted_collision"]) <= 1.0 for a in ojpp)
    assert any(a.reason.terms["colocated"] for a in ojpp)  # some shared a GPU
    aryl = _records_of("aryl-testbed", "aryl")
    reclaims = [a for r in aryl for a in r.actions if a.kind == "reclaim"]
    assert reclaims and all(
        a.reason.terms["reclaimer"] == "Reclaimer" and "method" in a.reason.terms for a in reclaims
    )
    starts = [a for r in aryl for a in r.actions if a.kind == "start"]
    assert {a.reason.terms["pool"] for a in starts} >= {"training", "inference"}
