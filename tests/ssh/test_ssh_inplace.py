"""EDL-style in-place resize: the stand-in switches GPU sets on SIGUSR2 without restarting, and
the SSH executor uses that against the real sshd lab (issue 11), beside stop/restart."""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from gpuplan.executors.base import ExecutorCapabilities
from gpuplan.executors.engine import Engine
from gpuplan.executors.ssh.executor import SshExecutor
from gpuplan.solver_core.registry import make_policy, policy_names
from tests.ssh.test_ssh import (  # noqa: F401  (ssh_lab, harness: fixtures)
    Harness,
    cluster_of,
    elastic,
    harness,
    rigid,
    segments,
    ssh_lab,
)


def poll(what: str, ready, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"never reached: {what} (within {timeout_s:g} s)")


# --------------------------------------------------------------------------- no lab


def test_resize_cost_degrades_to_restart_where_in_place_is_impossible() -> None:
    slurm_like = ExecutorCapabilities(
        resize="restart", pin_gpus=False, preempt_modes=("checkpoint",), restart_latency_s=42.0
    )
    edl = ExecutorCapabilities(
        resize="in_place",
        pin_gpus=True,
        preempt_modes=("checkpoint",),
        restart_latency_s=3.0,
        in_place_latency_s=0.05,
    )
    assert slurm_like.resize_cost() == ("restart", 42.0)
    assert edl.resize_cost() == ("in_place", 0.05)
    assert edl.resize_cost(in_place_possible=False) == ("restart", 3.0)


def test_standin_switches_gpus_in_place_on_sigusr2(tmp_path: Path) -> None:
    resize = tmp_path / "resize.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "GPUPLAN_RESIZE_FILE": str(resize)}
    work, rate = 60.0, 10.0
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuplan.executors.standin",
            "--job-id",
            "j",
            "--work",
            str(work),
            "--rate-per-gpu",
            str(rate),
            "--state-dir",
            str(tmp_path),
            "--progress-interval",
            "0.05",
        ],
        env=env,
    )
    progress = tmp_path / "j.progress"
    try:
        poll("first progress", lambda: json.loads(progress.read_text())["done"] > 0)
        # No request file yet: ignored. The stand-in acknowledges every request it looked at
        # (``requests`` in its progress), so the file is written only after this one was
        # handled: without that wait the signal could be handled after the write (a race
        # that once resized twice) and the "no file" case would go untested. That the job ran
        # on is proven below: one PID wrote every segment and it exited 0 (SIGUSR2's default
        # action would have killed it).
        proc.send_signal(signal.SIGUSR2)
        poll(
            "the first request looked at", lambda: json.loads(progress.read_text())["requests"] == 1
        )
        assert json.loads(progress.read_text())["gpus"] == 1
        resize.write_text(json.dumps({"gpus": [0, 1, 2]}))
        t_req = time.time()
        proc.send_signal(signal.SIGUSR2)
        poll("3 GPUs reported", lambda: json.loads(progress.read_text())["gpus"] == 3)
        assert json.loads(progress.read_text())["requests"] == 2
        pause = time.time() - t_req
        report = json.loads(progress.read_text())
        assert report["pid"] == proc.pid
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    segs = [json.loads(line) for line in (tmp_path / "j.log").read_text().splitlines()]
    assert [s["reason"] for s in segs] == ["resize", "complete"]
    assert [s["gpus"] for s in segs] == [1, 3]
    assert segs[0]["start"] == 0.0 and segs[1]["start"] == segs[0]["end"]
    assert segs[1]["end"] == work
    assert {s["pid"] for s in segs} == {proc.pid}
    # After the switch it runs at 3 x rate: the rest took about a third of 1-GPU time.
    rest = segs[1]["end"] - segs[1]["start"]
    assert segs[1]["t_end"] - segs[1]["t_start"] < 0.8 * rest / rate
    assert pause < 5.0


def test_standin_carries_out_a_request_once_however_the_signals_interleave(tmp_path: Path) -> None:
    """The request file names a state: a request for the GPUs the job runs on is no change,
    and signals that pile up (or one handled after the file was rewritten for the next) give
    one resize per new GPU set. Both orders of handling the first signal give the same log."""
    resize = tmp_path / "resize.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "GPUPLAN_RESIZE_FILE": str(resize)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuplan.executors.standin",
            "--job-id",
            "j",
            "--work",
            "40",
            "--rate-per-gpu",
            "10",
            "--state-dir",
            str(tmp_path),
            "--progress-interval",
            "0.05",
        ],
        env=env,
    )
    progress = tmp_path / "j.progress"
    try:
        poll("first progress", lambda: json.loads(progress.read_text())["done"] > 0)
        resize.write_text(json.dumps({"gpus": [0]}))  # the GPU it already has
        proc.send_signal(signal.SIGUSR2)
        resize.write_text(json.dumps({"gpus": [0, 1]}))
        proc.send_signal(signal.SIGUSR2)
        proc.send_signal(signal.SIGUSR2)
        poll("2 GPUs reported", lambda: json.loads(progress.read_text())["gpus"] == 2)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    segs = [json.loads(line) for line in (tmp_path / "j.log").read_text().splitlines()]
    assert [(s["reason"], s["gpus"]) for s in segs] == [("resize", 1), ("complete", 2)]


# --------------------------------------------------------------------------- lab


def gpu_spans(run_root: Path) -> dict[tuple[str, int], list[tuple[float, float, str]]]:
    """(node, gpu) -> [(start, end, job)] from events.jsonl, in-place resizes included: a
    removed GPU is held until the process acknowledged, an added one from the request."""
    spans: dict[tuple[str, int], list[tuple[float, float, str]]] = defaultdict(list)
    for events in run_root.glob("*/events.jsonl"):
        spec = json.loads((events.parent / "spec.json").read_text())
        node, job = spec["node"], spec["job_id"]
        held: dict[int, float] = {}
        for ev in map(json.loads, events.read_text().splitlines()):
            if ev["event"] == "start":
                held = {g: ev["t"] for g in ev["gpus"]}
            elif ev["event"] == "resize" and ev["ok"]:
                for g in set(ev["before"]) - set(ev["after"]):
                    spans[(node, g)].append((held.pop(g), ev["t_ack"], job))
                for g in set(ev["after"]) - set(ev["before"]):
                    held[g] = ev["t_request"]
            elif ev["event"] == "exit":
                for g, t in held.items():
                    spans[(node, g)].append((t, ev["t"], job))
                held = {}
        for g, t in held.items():
            spans[(node, g)].append((t, float("inf"), job))
    return spans


def warm_up(lab: Harness) -> None:
    """Run the executor once with no jobs: its first start-up on a cold lab (sshd's first
    connections, the node agents' first Python start) takes seconds, and :func:`run_shrink_grow`'s
    trace, whose jobs arrive on the executor's clock, needs ``big`` started alone before
    ``small`` arrives at 5 s. Warm, start-up takes a fraction of that (the suite order ran
    this test after tests/ssh/test_ssh.py, which warmed the lab; run alone it failed)."""
    folder = lab.tmp / "warm-up"  # its own engine dir: the clock origin stays the test's
    folder.mkdir(mode=0o755)
    warm = Harness(lab.lab, folder)
    try:
        cluster = cluster_of(["node1"], 4)
        Engine(
            cluster, make_policy("fifo"), warm.executor(cluster, []), sample_interval_s=None
        ).run()
    finally:
        warm.close()


def run_shrink_grow(lab: Harness, in_place: bool, tag: str) -> tuple[Engine, SshExecutor]:
    """One node of 4 GPUs: elastic ``big`` (1-4 GPUs) runs alone, rigid ``small`` (2 GPUs)
    arrives and makes AFS-P shrink it, and when ``small`` ends ``big`` grows back.

    ``small`` arrives on the executor's clock, so ``big`` must be running by then: 5 s leaves
    room for the first poll and start-up on a loaded machine (they took 2.1-2.4 s at load
    average 5-7, which made an arrival at 1.5 s find ``big`` not yet started)."""
    jobs = [elastic(f"big{tag}", 0.0, 4, 1, 4, 12.0), rigid(f"small{tag}", 5.0, 2, 1.5)]
    cluster = cluster_of(["node1"], 4)
    ex = lab.executor(cluster, jobs, in_place_resize=in_place, run_root=lab.tmp / f"runs{tag}")
    policy = "afs-p" if "afs-p" in policy_names() else "srtf"
    engine = Engine(
        cluster, make_policy(policy), ex, sample_interval_s=None, restart_gate=None
    )  # every planned change, carried out
    engine.run()
    records = {r.job_id: r for r in engine.result().jobs}
    for spec in jobs:
        assert records[spec.id].finish_time is not None, spec.id
        assert records[spec.id].done_iterations == pytest.approx(spec.work)
        segs = [s for rank in segments(ex.launcher, spec.id).values() for s in rank]
        assert segs and segs[0]["start"] == 0.0
        for prev, seg in itertools.pairwise(segs):
            assert seg["start"] == pytest.approx(prev["end"], abs=1e-9)
        assert sum(s["end"] - s["start"] for s in segs) == pytest.approx(spec.work, rel=1e-9)
    for (node, gpu), spans in gpu_spans(lab.tmp / f"runs{tag}").items():
        spans.sort()
        for (_s1, e1, j1), (s2, _e2, j2) in itertools.pairwise(spans):
            assert s2 >= e1, f"GPU {node}:{gpu} ran {j1} and {j2} at once"
    return engine, ex


def test_ssh_in_place_resize_keeps_the_process_and_beats_restart(harness: Harness) -> None:  # noqa: F811
    warm_up(harness)
    _, ex = run_shrink_grow(harness, True, "i")
    assert ex.capabilities.resize == "in_place"
    resizes = [r for r in ex.resize_log if r["job"] == "bigi"]
    assert len(resizes) >= 2 and all(r["mode"] == "in_place" for r in resizes), ex.action_log
    kinds = {
        ("grow" if a["after"] > a["before"] else "shrink")
        for a in ex.action_log
        if a["kind"] == "resize" and a["job"] == "bigi"
    }
    assert kinds == {"grow", "shrink"}, ex.action_log
    # One process did all of it: a single start, and every committed segment has its PID.
    events = Path(ex.job_dir("bigi", "node1"), "events.jsonl").read_text().splitlines()
    starts = [e for e in map(json.loads, events) if e["event"] == "start"]
    assert len(starts) == 1
    segs = segments(ex.launcher, "bigi")[0]
    assert {s["pid"] for s in segs} == {starts[0]["pid"]}
    assert sorted({s["gpus"] for s in segs}) == [2, 4]
    assert ex.capabilities.in_place_latency_s == statistics.median(ex.in_place_pauses)

    _, rx = run_shrink_grow(harness, False, "r")
    assert rx.capabilities.resize == "restart" and not rx.resize_log
    restart = [a for a in rx.action_log if a["kind"] == "resize"]
    assert restart and rx.restart_latencies
    pauses, latencies = ex.in_place_pauses, rx.restart_latencies
    print(
        f"\nin-place pauses {[round(p, 3) for p in pauses]} (median "
        f"{statistics.median(pauses):.3f} s); restart latencies "
        f"{[round(p, 3) for p in latencies]} (median {statistics.median(latencies):.3f} s)"
    )
    assert statistics.median(pauses) < statistics.median(latencies)


def test_a_resize_across_nodes_degrades_to_a_logged_restart(harness: Harness) -> None:  # noqa: F811
    """Two nodes of 2 GPUs: ``wide`` (1-4 GPUs) spans both; when ``pin`` (2 GPUs) arrives the
    shrink leaves one node — not possible in place, so it restarts, and says so."""
    jobs = [elastic("wide", 0.0, 4, 1, 4, 5.0), rigid("pin", 1.0, 2, 1.0)]
    cluster = cluster_of(["node1", "node2"], 2)
    ex = harness.executor(cluster, jobs, in_place_resize=True)
    policy = "afs-p" if "afs-p" in policy_names() else "srtf"
    engine = Engine(
        cluster, make_policy(policy), ex, sample_interval_s=None, restart_gate=None
    )  # every planned change, carried out
    engine.run()
    assert all(r.finish_time is not None for r in engine.result().jobs)
    moved = [r for r in ex.resize_log if r["job"] == "wide" and r["mode"] == "restart"]
    assert moved and all(r["why"] for r in moved), (ex.resize_log, ex.action_log)
