"""Issue 25 items 3-4, unit level: the controller's metrics, ``/state.json`` and live page.

* :class:`LivePublisher` over a real journal: the snapshot's figures are the journal's rows
  (live jobs, plans and actions of this run, refused held jobs), counted incrementally, plus
  the cycle-time ring's latencies, solver statistics and restart-gate counters.
* The Prometheus exposition of a snapshot, parsed back with ``prometheus_client.parser``.
* The HTTP endpoint on a real socket: the three paths, GET only, 404, the ``Host`` check, the
  security headers, bounded answers; the page opened in headless Chromium renders a hostile
  job name as text, never as an element.

The lab test (a real controller, real Slurm jobs) is in ``tests/slurm/test_controller_ops.py``.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.executors.control import command, live_page
from gpuplan.executors.control.controller import ControllerSettings, SlurmController
from gpuplan.executors.control.cycle_times import CycleTimes
from gpuplan.executors.control.http_server import LiveHttpServer, host_allowed
from gpuplan.executors.control.journal import ActionIntent, JobUpdate, Journal
from gpuplan.executors.control.live_state import (
    LATENCY_BUCKETS,
    MAX_TEXT,
    LivePublisher,
    LiveSnapshot,
)
from gpuplan.executors.control.metrics_export import exposition, make_registry
from gpuplan.models import Cluster, GpuplanError, Node, SolverStats

XSS = "<img src=x onerror=alert(1)>"
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _sj(
    job_id: int, name: str, state: str = "RUNNING", admin: str = "gpuplan:held;gpus=2"
) -> SimpleNamespace:
    """The fields of a Slurm record the publisher reads."""
    return SimpleNamespace(
        job_id=job_id, name=name, state=state, admin_comment=admin, finished=False
    )


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    with Journal(state / "ctl.db") as j:
        yield j


def _engine(cluster: Cluster, books: dict[str, dict[str, list[int]]]) -> SimpleNamespace:
    running = {
        eid: SimpleNamespace(allocation=SimpleNamespace(placement=p)) for eid, p in books.items()
    }
    return SimpleNamespace(cluster=cluster, running=running)


def _fill(journal: Journal, run: int) -> list[int]:
    """Run ``run``'s journal: two running jobs, one queued, one refused; one plan with two
    actions, one of them settled."""
    for sid, state in ((1, "pending"), (2, "pending"), (3, "pending"), (4, "rejected")):
        journal.add_job(
            f"slurm-{sid}",
            sid,
            f"fp{sid}",
            10.0 + sid,
            {"id": f"slurm-{sid}", "user": "alice", "requested_gpus": sid},
            state,
            reason="refused, kept held: comment: bad key 'x'" if state == "rejected" else "",
        )
    journal.update_jobs(
        [
            JobUpdate("slurm-1", "running", 1.0, 1, {"n0": 1}),
            JobUpdate("slurm-2", "running", 1.0, 3, {"n0": 1, "n1": 2}),
            JobUpdate("slurm-3", "pending", 0.0, reason="needs 3 GPUs, 2 free"),
        ]
    )
    _, ids = journal.record_plan(
        run,
        1.0,
        "fifo",
        "{}",
        [
            ActionIntent("slurm-1", 1, "start", {}, {"n0": 1}, 0),
            ActionIntent("slurm-2", 2, "start", {}, {"n0": 1, "n1": 2}, 0),
        ],
    )
    journal.settle(ids[:1], "applied")
    return ids


def _publisher(journal: Journal, run: int) -> LivePublisher:
    return LivePublisher(
        journal.db, run, "fifo", journal.path, journal.path.with_name("ctl.db.heartbeat"), 600.0
    )


def _publish(pub: LivePublisher, times: CycleTimes, gate: dict | None = None) -> LiveSnapshot:
    cluster = Cluster(nodes=[Node(name="n0", gpus=4), Node(name="n1", gpus=4)])
    engine = _engine(cluster, {"slurm-1": {"n0": [3]}, "slurm-2": {"n0": [0], "n1": [1, 2]}})
    slurm = {
        1: _sj(1, "a"),
        2: _sj(2, XSS),
        3: _sj(3, "q", "PENDING"),
        4: _sj(4, "bad", "PENDING", "gpuplan:refused;gpus=4;why=bad"),
    }
    pub.take_cycles(times)
    return pub.publish(engine=engine, slurm_jobs=slurm, failopen_jobs=0, tick=None, gate=gate)


def test_the_snapshot_holds_the_journals_figures(journal: Journal) -> None:
    # the earlier run's open intent exists before the publisher starts: it is followed
    run0 = journal.begin_run("fifo")
    journal.intend(run0, [ActionIntent("slurm-9", 9, "resize", {"n0": 2}, {"n0": 1}, 0)])
    (open_old,) = [a.id for a in journal.open_actions()]
    run = journal.begin_run("fifo")
    pub = LivePublisher(journal.db, run, "fifo", journal.path, journal.path, 600.0)
    ids = _fill(journal, run)
    times = CycleTimes()
    times.add(0.02, None, None, None, 3)  # a quiet poll
    times.add(0.03, 0.2, 1.5, 0.01, 3)  # a decision with a plan carried out
    times.add(None, 0.004, None, 0.01, 3)  # a timer's decision, no action
    pub.saw_plan(
        SimpleNamespace(
            stats=[
                SolverStats(stage="shares", backend="cp-sat", status="optimal"),
                SolverStats(
                    stage="placement", backend="heuristic", status="feasible", fell_back=True
                ),
            ]
        )
    )
    gate = {
        "changes": {"resize": {"proposed": 3, "done": 1, "skipped": 2}},
        "costs": {"resize": {"samples": 4, "median_s": 7.5}},
    }
    snap = _publish(pub, times, gate)
    jobs = {j.engine_id: j for j in snap.jobs}
    assert (snap.running, snap.queue, snap.held_refused) == (2, 1, 1)
    assert snap.gpus_total == 8 and snap.gpus_allocated == 4
    assert [j.engine_id for j in snap.jobs] == ["slurm-1", "slurm-2", "slurm-3", "slurm-4"]
    # placement: the journal's node counts with the engine's GPU indices
    assert dict(jobs["slurm-2"].placement) == {"n0": (0,), "n1": (1, 2)}
    assert dict(jobs["slurm-1"].placement) == {"n0": (3,)}
    assert jobs["slurm-2"].name == XSS and jobs["slurm-2"].user == "alice"
    assert jobs["slurm-3"].reason == "needs 3 GPUs, 2 free"
    assert jobs["slurm-4"].state == "held" and jobs["slurm-4"].reason.startswith("refused")
    assert snap.plans == 1 and snap.decisions == 2
    assert dict(((k, s), n) for k, s, n in snap.actions) == {("start", "applied"): 1}
    assert snap.actions_open == 2  # this run's second start + the earlier run's resize
    assert [a.id for a in snap.recent] == ids
    assert dict(((b, s), n) for b, s, n in snap.solver_calls) == {
        ("cp-sat", "optimal"): 1,
        ("heuristic", "feasible"): 1,
    }
    assert snap.solver_fallbacks == 1
    assert ("resize", "skipped", 2) in snap.gate_changes
    assert snap.change_costs == (("resize", 4, 7.5),)
    hist = dict(snap.histograms)
    assert (hist["poll_s"].count, hist["decide_s"].count, hist["apply_s"].count) == (2, 2, 1)
    assert hist["decide_s"].total == pytest.approx(0.204)
    assert dict(hist["decide_s"].buckets)[0.005] == 1 and dict(hist["decide_s"].buckets)[0.25] == 2
    assert snap.journal_bytes > 0
    # later: outcomes of open intents and new rows are counted once each
    journal.settle([ids[1]], "failed", "scontrol said no")
    journal.settle([open_old], "reconciled", "requeued since")
    times.add(0.01, None, None, None, 3)
    snap2 = _publish(pub, times, gate)
    assert dict(((k, s), n) for k, s, n in snap2.actions) == {
        ("start", "applied"): 1,
        ("start", "failed"): 1,
        ("resize", "reconciled"): 1,
    }
    assert snap2.actions_open == 0 and snap2.decisions == 2
    assert [a.status for a in snap2.recent] == ["applied", "failed"]
    assert dict(snap2.histograms)["poll_s"].count == 3
    # the first snapshot is untouched (immutable: readers may hold it)
    assert snap.actions_open == 2 and pub.latest() is snap2


def test_free_text_is_bounded_and_printable(journal: Journal) -> None:
    run = journal.begin_run("fifo")
    journal.add_job(
        "slurm-5", 5, "fp", 1.0, {"user": "u\x1b[31m"}, "pending", reason="x" * 5000 + "\n"
    )
    pub = _publisher(journal, run)
    pub.take_cycles(CycleTimes())
    snap = pub.publish(
        engine=None,
        slurm_jobs={5: _sj(5, "n\r\n" * 400, "PENDING")},
        failopen_jobs=0,
        tick=None,
        gate=None,
    )
    (job,) = snap.jobs
    assert len(job.reason) == MAX_TEXT and len(job.name) == MAX_TEXT
    assert job.name.isprintable() and job.user == "u [31m"


def _families(
    snap: LiveSnapshot | None, age: float = 1.5, stall_now: float = 100.0
) -> dict[str, object]:
    registry = make_registry(lambda: snap, heartbeat=lambda _p: age, monotonic=lambda: stall_now)
    text = exposition(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict, name: str, sample: str | None = None, **labels: str) -> float:
    family = families[name]
    found = [
        s.value
        for s in family.samples  # type: ignore[attr-defined]
        if s.name == (sample or name) and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, sample, labels, family.samples)  # type: ignore[attr-defined]
    return found[0]


def test_the_exposition_parses_with_types_and_values(journal: Journal) -> None:
    run = journal.begin_run("fifo")
    pub = _publisher(journal, run)
    _fill(journal, run)
    times = CycleTimes()
    times.add(0.02, 0.3, 2.0, 0.01, 3)
    pub.saw_plan(
        SimpleNamespace(stats=[SolverStats(stage="s", backend="cp-sat", status="optimal")])
    )
    snap = _publish(
        pub,
        times,
        {
            "changes": {"migrate": {"proposed": 1, "done": 1, "skipped": 0}},
            "costs": {"migrate": {"samples": 2, "median_s": 3.25}},
        },
    )
    snap = LiveSnapshot(
        **{**{k: getattr(snap, k) for k in snap.__dataclass_fields__}, "loop_tick": 90.0}
    )
    fam = _families(snap)
    types = {name: f.type for name, f in fam.items()}  # type: ignore[attr-defined]
    assert types["gpuplan_queue_jobs"] == "gauge" and types["gpuplan_decisions"] == "counter"
    assert types["gpuplan_decision_seconds"] == "histogram"
    assert types["gpuplan_actions"] == "counter"
    assert _value(fam, "gpuplan_up") == 1
    assert _value(fam, "gpuplan_running_jobs") == 2 and _value(fam, "gpuplan_queue_jobs") == 1
    assert _value(fam, "gpuplan_refused_held_jobs") == 1
    assert (
        _value(fam, "gpuplan_gpus"),
        _value(fam, "gpuplan_gpus_allocated"),
        _value(fam, "gpuplan_gpus_idle"),
    ) == (8, 4, 4)
    assert _value(fam, "gpuplan_decisions", "gpuplan_decisions_total") == 1
    assert _value(fam, "gpuplan_plans", "gpuplan_plans_total") == 1
    assert (
        _value(fam, "gpuplan_actions", "gpuplan_actions_total", kind="start", status="applied") == 1
    )
    assert _value(fam, "gpuplan_actions_open") == 1
    assert _value(fam, "gpuplan_decision_seconds", "gpuplan_decision_seconds_count") == 1
    assert _value(fam, "gpuplan_decision_seconds", "gpuplan_decision_seconds_sum") == 0.3
    assert (
        _value(fam, "gpuplan_decision_seconds", "gpuplan_decision_seconds_bucket", le="0.25") == 0
    )
    assert _value(fam, "gpuplan_decision_seconds", "gpuplan_decision_seconds_bucket", le="0.5") == 1
    assert _value(fam, "gpuplan_apply_seconds", "gpuplan_apply_seconds_bucket", le="+Inf") == 1
    assert len(fam["gpuplan_poll_seconds"].samples) == len(LATENCY_BUCKETS) + 3  # type: ignore
    assert (
        _value(
            fam,
            "gpuplan_solver_calls",
            "gpuplan_solver_calls_total",
            backend="cp-sat",
            status="optimal",
        )
        == 1
    )
    assert _value(fam, "gpuplan_solver_fallbacks", "gpuplan_solver_fallbacks_total") == 0
    assert (
        _value(
            fam,
            "gpuplan_restart_gate_changes",
            "gpuplan_restart_gate_changes_total",
            kind="migrate",
            outcome="carried_out",
        )
        == 1
    )
    assert _value(fam, "gpuplan_change_cost_seconds", kind="migrate") == 3.25
    assert (
        _value(
            fam, "gpuplan_change_cost_samples", "gpuplan_change_cost_samples_total", kind="migrate"
        )
        == 2
    )
    assert _value(fam, "gpuplan_journal_bytes") == snap.journal_bytes > 0
    assert _value(fam, "gpuplan_heartbeat_age_seconds") == 1.5
    assert _value(fam, "gpuplan_loop_stall_seconds") == 10.0
    assert _value(fam, "gpuplan_heartbeat_withheld") == 0
    assert _value(fam, "gpuplan_controller_info", policy="fifo", run=str(run)) == 1
    # stalled past --max-stall: the heartbeat is withheld (fail-open ahead)
    assert _value(_families(snap, stall_now=90.0 + 600.0), "gpuplan_heartbeat_withheld") == 1
    # before the first cycle: only gpuplan_up 0
    assert set(_families(None)) == {"gpuplan_up"} and _value(_families(None), "gpuplan_up") == 0


def test_hosts_the_endpoint_answers() -> None:
    names = frozenset({"localhost", "ctl.example.org"})
    for ok in (
        "127.0.0.1",
        "127.0.0.1:9464",
        "[::1]:9464",
        "[::1]",
        "localhost:80",
        "CTL.example.org.",
        "10.1.2.3",
    ):
        assert host_allowed(ok, names), ok
    for bad in (
        None,
        "",
        "evil.example.com",
        "evil.example.com:9464",
        "127.0.0.1:x",
        "[::1",
        "[zz]",
        "[::1]x",
        "localhost.evil.example.com",
    ):
        assert not host_allowed(bad, names), bad


@pytest.fixture
def served(journal: Journal) -> Iterator[tuple[LiveHttpServer, LiveSnapshot]]:
    run = journal.begin_run("fifo")
    pub = _publisher(journal, run)
    _fill(journal, run)
    snap = _publish(pub, CycleTimes())
    server = LiveHttpServer("127.0.0.1", 0, pub.latest, heartbeat=lambda _p: 0.5)
    server.start()
    try:
        yield server, snap
    finally:
        server.stop()


def _get(
    server: LiveHttpServer, path: str, method: str = "GET", host: str = "127.0.0.1"
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.putrequest(method, path, skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_the_endpoint_serves_three_paths_get_only(served) -> None:
    server, snap = served
    code, head, body = _get(server, "/metrics")
    assert code == 200 and head["content-type"].startswith("text/plain; version=0.0.4")
    fam = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert _value(fam, "gpuplan_running_jobs") == 2
    code, head, body = _get(server, "/state.json")
    assert code == 200 and head["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc["run"] == snap.run_id and doc["summary"]["gpus_allocated"] == 4
    assert {j["name"] for j in doc["jobs"]} >= {XSS}
    assert b"<" not in body and b">" not in body  # escaped as \u003c: never read as markup
    code, head, page = _get(server, "/")
    assert code == 200 and head["content-type"] == "text/html; charset=utf-8"
    assert head["content-security-policy"] == live_page.CSP
    assert "default-src 'none'" in live_page.CSP and "unsafe-inline" not in live_page.CSP
    assert page == live_page.PAGE and XSS.encode() not in page
    # self-contained: no outside URL, no external script, style or image
    assert not re.search(rb"""(src|href)\s*=|https?:|//[a-z]|url\(|@import""", page, re.I)
    for path in ("/", "/metrics", "/state.json", "/nope"):
        _, head, _ = _get(server, path)
        assert head["x-content-type-options"] == "nosniff"
        assert head["cache-control"] == "no-store"
        assert "frame-ancestors 'none'" in head["content-security-policy"]
    assert _get(server, "/nope")[0] == 404
    assert _get(server, "/metrics?x=1")[0] == 200
    for method in ("POST", "PUT", "DELETE", "HEAD", "OPTIONS", "BREW"):
        code, head, _ = _get(server, "/metrics", method)
        assert (code, head.get("allow")) == (405, "GET"), method
    assert _get(server, "/state.json", host="attacker.example.com")[0] == 421
    assert server.state_json() is server.state_json()  # encoded once per snapshot


def test_a_port_in_use_is_one_line(served) -> None:
    server, _ = served
    with pytest.raises(
        GpuplanError,
        match=rf"^--http: cannot listen on 127.0.0.1:"
        rf"{server.port}: ",
    ):
        LiveHttpServer("127.0.0.1", server.port, lambda: None)


def test_chromium_renders_the_page_and_escapes_job_names(served, tmp_path: Path) -> None:
    assert CHROMIUM.exists(), "Debian's chromium is missing: `make test` installs it"
    server, _ = served
    done = subprocess.run(
        [
            str(CHROMIUM),
            *FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            f"http://127.0.0.1:{server.port}/",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    dom = done.stdout
    assert 'data-job="slurm-2"' in dom  # the GPU map and the running table were rendered
    assert dom.count('class="gpu job"') == 4 and dom.count('class="gpu free"') == 4
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom
    assert "<img" not in dom  # never an element
    assert "needs 3 GPUs, 2 free" in dom and "refused, kept held" in dom
    assert "loading" not in dom


def test_a_busy_port_refuses_the_start_before_anything_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port in use is found at start-up, before the journal exists (one line, exit 2)."""
    state = tmp_path / "state"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        settings = ControllerSettings(policy="fifo", state_db=state / "j.db", http_port=port)
        controller = SlurmController(settings)
        controller.preflight = lambda: None  # type: ignore[method-assign] # no Slurm here
        with pytest.raises(GpuplanError, match=f"^--http: cannot listen on 127.0.0.1:{port}: "):
            controller.run()
    assert not state.exists()


def test_the_unit_carries_the_http_options(capsys: pytest.CaptureFixture[str]) -> None:
    code = command.main(
        [
            "slurm-controller",
            "--print-systemd-unit",
            "--policy",
            "fifo",
            "--http",
            "9464",
            "--http-bind",
            "::1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    (exec_start,) = re.findall(r"(?m)^ExecStart=(.*)$", out)
    assert exec_start.endswith("slurm-controller --policy fifo --http 9464 --http-bind ::1")
    assert "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" in out


def test_a_failing_snapshot_never_fails_the_cycle_and_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        calls = 0

        def take_cycles(self, _times: object) -> None:
            pass

        def publish(self, **_kw: object) -> None:
            Broken.calls += 1
            raise RuntimeError("a bug")

    controller = SlurmController(ControllerSettings(policy="fifo", state_db=tmp_path / "j.db"))
    controller._live = Broken()  # type: ignore[assignment]
    with caplog.at_level("DEBUG", logger="gpuplan.executors.control.controller"):
        for _ in range(3):
            controller._publish(force=True)  # no exception escapes
    assert Broken.calls == 3
    warned = [r for r in caplog.records if "publishing the live state failed" in r.message]
    assert [r.levelname for r in warned] == ["WARNING", "DEBUG", "DEBUG"]
