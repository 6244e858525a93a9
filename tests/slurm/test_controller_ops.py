"""Issue 25 items 5 and 6 on the REAL Slurm lab: deploying and upgrading the controller.

* The install-to-running walk-through of docs/controller.md § 2 ("From install to running"),
  followed as far as a test can (the lab stands in for the site: its slurm.conf, its installed
  ``job_submit.lua``; the test runs as root, so root is the service user): ``--version``, the
  private state directory, ``--check`` passing, the unit, then the controller started as
  systemd's ``Type=notify`` would (``NOTIFY_SOCKET``): READY after its first cycle, WATCHDOG
  pings, a job run, STOPPING on SIGTERM. Then ``--check`` naming each broken piece (a state
  directory others can read, a partition typo, a hook of another release, a hook without its
  version line).
* A fresh journal adopts only jobs still pending or running: finished managed jobs Slurm still
  remembers are not taken over (the lab keeps finished jobs for ``MinJobAge``).
* An upgrade: the controller of the previous landed release (the commit before the schema
  change, exported from git and run in a subprocess) runs held and running jobs on a schema-1
  journal, is stopped, and this release's controller migrates the journal and carries on: no
  job lost, stopped or run twice.
"""

# ruff: noqa: F811 - the lab fixtures are imported from test_controller and used by name
from __future__ import annotations

import contextlib
import html
import http.client
import io
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuplan import __version__
from gpuplan.executors.control.controller import engine_id
from gpuplan.executors.control.journal import SCHEMA_VERSION, Journal
from tests.labs.slurm.lab import SlurmLab

from .. import slurm_fixtures as fx
from .test_controller import (  # noqa: F401 - fixtures
    LAB_WAIT_S,
    PARTITION,
    Controller,
    _assert_tiles,
    _states,
    _submit,
    _wait,
    clean_partition,
    lab,
    shared,
    user,
)
from .test_controller_deploy import receive

ROOT = Path(__file__).resolve().parents[2]


def _gpuplan(lab: SlurmLab, argv: list[str], cwd: str = "/") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuplan", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
        env={**os.environ, **lab.env},
    )


def _check(lab: SlurmLab, db: Path, *extra: str) -> tuple[int, dict[str, str], str]:
    """``gpuplan slurm-controller --check``: exit code, check name -> its line, stderr."""
    proc = _gpuplan(
        lab,
        [
            "slurm-controller",
            "--check",
            "--partition",
            PARTITION,
            "--state-db",
            str(db),
            "--connect-timeout",
            "60",
            *extra,
        ],
    )
    lines = {}
    for line in proc.stdout.splitlines()[1:]:
        word, name, *_ = line.split()
        lines[name] = line
        assert word in ("ok", "FAIL", "skip"), line
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, lines, proc.stderr


def _journal_rows(db: Path) -> dict[str, str]:
    """engine id -> state, read without any gpuplan code (any schema)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT engine_id, state FROM jobs"))
    finally:
        conn.close()


def _schema(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    directory = tempfile.mkdtemp(prefix="gp-notify-", dir="/tmp")
    path = os.path.join(directory, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.bind(path)
    sock.settimeout(LAB_WAIT_S)
    try:
        yield sock, path
    finally:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
            os.rmdir(directory)


def _collect(sock: socket.socket, messages: list[tuple[str, int]]) -> None:
    """Read sd_notify messages until the socket is closed."""
    with contextlib.suppress(OSError):
        while True:
            messages.append(receive(sock))


# ------------------------------------------------------------------------ the walk-through


def test_the_walkthrough_from_install_to_running(
    lab: SlurmLab,
    user: str,
    shared: Path,
    clean_partition: None,
    notify_socket: tuple[socket.socket, str],
) -> None:
    # 1. The release (and the hook of the same release, installed in the lab's etc/).
    version = _gpuplan(lab, ["--version"])
    assert version.returncode == 0 and version.stdout.strip() == f"gpuplan {__version__}"
    # 2. The state directory: the service user's, 0700 (`install -d -m 0700 ...`).
    state = shared / "var-lib-gpuplan"
    subprocess.run(["install", "-d", "-m", "0700", str(state)], check=True)
    db = state / "slurm-controller.db"
    # 3. --check passes on the correct set-up, and creates nothing.
    code, lines, err = _check(lab, db)
    assert code == 0, (lines, err)
    for name in ("slurm", "partition", "hook", "state-dir", "journal"):
        assert lines[name].startswith("ok "), lines[name]
    assert f"gpuplan {__version__}" in lines["hook"]
    assert lines["port"].startswith("skip ") or lines["port"].startswith("ok ")
    assert list(state.iterdir()) == []
    # 4. The unit for these options (what the operator installs; systemd is not in the lab).
    unit = _gpuplan(
        lab,
        [
            "slurm-controller",
            "--print-systemd-unit",
            "--policy",
            "fifo",
            "--partition",
            PARTITION,
            "--state-db",
            str(db),
        ],
    )
    assert unit.returncode == 0 and "Type=notify" in unit.stdout, unit.stderr
    exec_start = re.search(r"(?m)^ExecStart=(.*)$", unit.stdout)
    assert exec_start is not None
    argv = exec_start.group(1).split()
    options = argv[argv.index("slurm-controller") + 1 :]
    assert options == ["--policy", "fifo", "--partition", PARTITION, "--state-db", str(db)]
    # 5. Start it as systemd would run that unit (Type=notify, WatchdogSec). Like systemd,
    # the test reads every message as it comes (a full queue would drop them).
    sock, path = notify_socket
    messages: list[tuple[str, int]] = []
    reader = threading.Thread(target=_collect, args=(sock, messages), daemon=True)
    reader.start()
    log = shared / "controller.log"
    # Step 8 (metrics and the live page) on the same start: --http (port 0: the lab picks a
    # free one and the controller logs it, as an operator's fixed port would be).
    run = Controller(
        lab,
        db,
        log,
        args=("--policy", "fifo", "--interval", "0.5", "--http", "0"),
        env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"},
    )
    try:
        _wait("READY=1", lambda: bool(messages), LAB_WAIT_S, log)
        message, pid = messages[0]
        assert pid == run.proc.pid and message.startswith("READY=1\nSTATUS="), message
        # ready means a completed cycle: the heartbeat is there, the journal is current
        assert Path(f"{db}.heartbeat").exists() and _schema(db) == SCHEMA_VERSION
        _wait(
            "a WATCHDOG=1 ping", lambda: ("WATCHDOG=1", run.proc.pid) in messages, LAB_WAIT_S, log
        )
        ports = re.findall(r"live page on http://127\.0\.0\.1:(\d+)/", log.read_text())
        assert ports, log.read_text()[-2000:]
        port = int(ports[0])
        # 6. A user's job runs under it.
        ids = {"W": _submit(lab, user, shared, "W", 4.0, 2, 1, 2)}
        _wait(
            "W to complete",
            lambda: (
                _states(lab, ids)["W"].state == "COMPLETED"
                and _journal_rows(db).get(engine_id(ids["W"])) == "completed"
            ),
            LAB_WAIT_S,
            log,
        )
        # --check beside the running controller: still passes (it takes no lock), and the
        # port line says the port is this controller's.
        code, lines, err = _check(lab, db, "--http", str(port))
        assert code == 0 and "(current)" in lines["journal"], (lines, err)
        assert lines["port"].startswith("ok "), lines["port"]
        # 8. curl /metrics: up, W's start applied and W no longer running; the page is served.
        _wait(
            "/metrics to show W's start and end",
            lambda: (
                lambda m: (
                    m[("gpuplan_up", ())] == 1
                    and m[("gpuplan_running_jobs", ())] == 0
                    and m.get(
                        ("gpuplan_actions_total", (("kind", "start"), ("status", "applied"))), 0
                    )
                    >= 1
                )
            )(_metric_values(port)),
            LAB_WAIT_S,
            log,
        )
        code, _, page = _scrape(port, "/")
        assert code == 200 and b"<title>" in page
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0
    _wait("STOPPING=1", lambda: ("STOPPING=1", run.proc.pid) in messages, LAB_WAIT_S, log)
    _assert_tiles(shared, "W", 4.0)


def test_check_names_each_broken_piece(lab: SlurmLab, shared: Path) -> None:
    state = shared / "state"
    db = state / "ctl.db"
    assert _check(lab, db)[0] == 0
    # A state directory others can read.
    state.chmod(0o750)
    code, lines, err = _check(lab, db)
    assert code == 2 and lines["state-dir"].startswith("FAIL") and "mode 750" in lines["state-dir"]
    assert err.strip() == "error: --check failed: state-dir"
    state.chmod(0o700)
    # A partition typo.
    code, lines, err = _check(lab, db, "--partition", "gpuplam")
    assert code == 2 and "unknown partition 'gpuplam'" in lines["partition"]
    assert err.strip() == "error: --check failed: partition"
    # The hook of another release, and a hook from before the version line.
    installed = (lab.conf_path.parent / "job_submit.lua").read_text()
    other = shared / "other-hook.lua"
    other.write_text(
        installed.replace(
            f'GPUPLAN_HOOK_VERSION = "{__version__}"', 'GPUPLAN_HOOK_VERSION = "0.0.9"'
        )
    )
    code, lines, err = _check(lab, db, "--hook-file", str(other))
    assert code == 2 and "gpuplan 0.0.9's hook" in lines["hook"], lines
    assert err.strip() == "error: --check failed: hook"
    other.write_text(re.sub(r"(?m)^local GPUPLAN_HOOK_VERSION.*$", "", installed))
    code, lines, _err = _check(lab, db, "--hook-file", str(other))
    assert code == 2 and "no GPUPLAN_HOOK_VERSION line" in lines["hook"]
    assert list(state.iterdir()) == []  # no check created anything


# ------------------------------------------------------------------------ fresh journal


def test_a_fresh_journal_adopts_only_pending_and_running_jobs(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None
) -> None:
    log = shared / "controller.log"
    first_db = shared / "state" / "first.db"
    run = Controller(lab, first_db, log, args=("--policy", "fifo", "--interval", "0.5"))
    try:
        ids = {n: _submit(lab, user, shared, n, 2.0, 1, 1, 1) for n in ("F1", "F2")}
        ids["R"] = _submit(lab, user, shared, "R", 3600.0, 1, 1, 1)
        _wait(
            "F1, F2 done and R running",
            lambda: (
                _states(lab, ids)["R"].state == "RUNNING"
                and all(_states(lab, ids)[n].state == "COMPLETED" for n in ("F1", "F2"))
            ),
            LAB_WAIT_S,
            log,
        )
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0
    ids["P"] = _submit(lab, user, shared, "P", 2.0, 1, 1, 1)  # held: no controller runs
    # A fresh journal (a new host, a lost journal): only R and P are the engine's now.
    fresh = shared / "state" / "fresh.db"
    run = Controller(lab, fresh, log, args=("--policy", "fifo", "--interval", "0.5"))
    try:
        _wait(
            "P to complete under the fresh journal",
            lambda: fresh.exists() and _journal_rows(fresh).get(engine_id(ids["P"])) == "completed",
            LAB_WAIT_S,
            log,
        )
        rows = _journal_rows(fresh)
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0
    # F1 and F2 (and every other finished job the lab remembers) are not taken over.
    assert set(rows) == {engine_id(ids["R"]), engine_id(ids["P"])}, rows
    assert rows[engine_id(ids["R"])] == "running"
    r = _states(lab, ids)["R"]
    assert r.state == "RUNNING" and r.restart_count == 0  # adopted as running, not restarted


# ------------------------------------------------------------------------ metrics, live page

XSS = "<img src=x onerror=alert(1)>"
CHROMIUM = Path("/usr/bin/chromium")


def _submit_named(
    lab: SlurmLab, user: str, shared: Path, key: str, name: str, work: float, gpus: int
) -> int:
    """A rigid job whose Slurm name (free text, the user's) differs from its files' key."""
    proc = fx.submit_standin(
        lab,
        user,
        shared,
        key,
        name=name,
        work=work,
        gpus=gpus,
        lo=gpus,
        hi=gpus,
        checkpoint_interval_s=None,
    )
    return fx.submitted_id(proc)


def _scrape(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _metric_values(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    code, _, body = _scrape(port, "/metrics")
    assert code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(body.decode())
        for s in f.samples
    }


def _journal_figures(db: Path) -> dict[str, float]:
    """What the metrics must equal, read from the journal with plain SQL (no gpuplan code)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (run,) = conn.execute("SELECT MAX(run_id) FROM runs").fetchone()
        jobs = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(gpus), 0) FROM jobs WHERE state = 'running'"
        ).fetchone()
        text = conn.execute(
            "SELECT value FROM meta WHERE key = ?", (f"cycle_times:{run}",)
        ).fetchone()
        decisions = 0
        if text is not None:
            doc = json.loads(text[0])
            column = doc["columns"].index("decide_s")
            decisions = sum(row[column] is not None for row in doc["rows"])
        return {
            "running": jobs[0],
            "gpus": jobs[1],
            "queue": conn.execute("SELECT COUNT(*) FROM jobs WHERE state = 'pending'").fetchone()[
                0
            ],
            "plans": conn.execute("SELECT COUNT(*) FROM plans WHERE run_id = ?", (run,)).fetchone()[
                0
            ],
            "starts": conn.execute(
                "SELECT COUNT(*) FROM actions WHERE run_id = ? AND kind = "
                "'start' AND status = 'applied'",
                (run,),
            ).fetchone()[0],
            "decisions": decisions,
            "run": run,
        }
    finally:
        conn.close()


def _metric_figures(port: int) -> dict[str, float]:
    m = _metric_values(port)
    run = next(dict(labels)["run"] for (name, labels) in m if name == "gpuplan_controller_info")
    return {
        "running": m[("gpuplan_running_jobs", ())],
        "gpus": m[("gpuplan_gpus_allocated", ())],
        "queue": m[("gpuplan_queue_jobs", ())],
        "plans": m[("gpuplan_plans_total", ())],
        "starts": m.get(("gpuplan_actions_total", (("kind", "start"), ("status", "applied"))), 0.0),
        "decisions": m[("gpuplan_decisions_total", ())],
        "run": int(run),
    }


def test_metrics_and_the_live_page_show_what_the_journal_holds(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None, tmp_path: Path
) -> None:
    """``--http``: ``/metrics`` agrees with the journal (running jobs, GPUs allocated, the
    queue, plans, starts, decisions), and the live page, opened in headless Chromium, shows a
    running job on the GPU map, the waiting job and a refused job with its reason in the
    queue, and a job named like an HTML element as text, never as an element."""
    db, log = shared / "state" / "ctl.db", shared / "controller.log"
    # 16 GPUs: four 4-GPU jobs fill them (the first named like markup), Q waits behind them,
    # R has marker values no hook would write (an operator's typo): kept held, refused.
    ids = {"XSS": _submit_named(lab, user, shared, "XSS", XSS, 1e6, 4)}
    for key in ("F1", "F2", "F3"):
        ids[key] = _submit_named(lab, user, shared, key, f"filler-{key}", 1e6, 4)
    ids["Q"] = _submit_named(lab, user, shared, "Q", "waits", 10.0, 2)
    ids["R"] = _submit_named(lab, user, shared, "R", "refused", 10.0, 1)
    lab.cli(timeout=30).update_job(ids["R"], AdminComment="gpuplan:held;gpus=1;min=1;max=99")
    run = Controller(lab, db, log, args=("--policy", "fifo", "--interval", "0.5", "--http", "0"))
    try:

        def port_logged() -> list[str]:
            return re.findall(r"live page on http://127\.0\.0\.1:(\d+)/", log.read_text())

        _wait("the HTTP port in the log", lambda: bool(port_logged()), LAB_WAIT_S, log)
        port = int(port_logged()[0])
        eids = {k: engine_id(v) for k, v in ids.items()}
        _wait(
            "4 jobs running, Q queued, R refused",
            lambda: (
                (_journal_rows(db) if db.exists() else {})
                == {
                    **{eids[k]: "running" for k in ("XSS", "F1", "F2", "F3")},
                    eids["Q"]: "pending",
                    eids["R"]: "rejected",
                }
            ),
            LAB_WAIT_S,
            log,
        )
        # The snapshot follows the journal after each cycle (and the cycle-time ring is
        # journaled every 10 s): poll until they agree, then compare every figure.
        figures: dict[str, tuple[dict[str, float], dict[str, float]]] = {}

        def agree() -> bool:
            figures["now"] = (_journal_figures(db), _metric_figures(port))
            return figures["now"][0] == figures["now"][1]

        _wait("/metrics to equal the journal", agree, LAB_WAIT_S, log)
        journal, _metrics = figures["now"]
        assert journal["running"] == 4 and journal["gpus"] == 16 and journal["queue"] == 1
        assert journal["starts"] == 4 and journal["plans"] >= 1 and journal["decisions"] >= 1
        m = _metric_values(port)
        assert m[("gpuplan_gpus", ())] == 16 and m[("gpuplan_gpus_idle", ())] == 0
        assert m[("gpuplan_refused_held_jobs", ())] == 1
        assert m[("gpuplan_decision_seconds_count", ())] == journal["decisions"]
        assert m[("gpuplan_heartbeat_age_seconds", ())] < LAB_WAIT_S
        assert m[("gpuplan_heartbeat_withheld", ())] == 0 and m[("gpuplan_up", ())] == 1
        assert m[("gpuplan_journal_bytes", ())] >= db.stat().st_size
        # --check beside it: the port is this journal's controller's; another port in use
        # is not free.
        code, lines, err = _check(lab, db, "--http", str(port))
        assert code == 0 and "running controller (run" in lines["port"], (lines, err)
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            code, lines, _err = _check(lab, db, "--http", str(busy.getsockname()[1]))
            assert code == 2 and lines["port"].startswith("FAIL"), lines
        # The page in headless Chromium (its script fetches /state.json and renders it).
        assert CHROMIUM.exists(), "Debian's chromium is missing: `make test` installs it"
        done = subprocess.run(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                f"--user-data-dir={tmp_path / 'profile'}",
                "--virtual-time-budget=10000",
                "--dump-dom",
                f"http://127.0.0.1:{port}/",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        dom = done.stdout
        with Journal(db, writer=False) as reader:
            rows = {eid: reader.job(eid) for eid in eids.values()}
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0
    # the GPU map: 16 GPU cells, all held, 4 of them by the markup-named job
    assert dom.count('class="gpu job"') == 16 and 'class="gpu free"' not in dom
    cells = re.findall(r'<td class="gpu job"[^>]*\sdata-job="([^"]+)"', dom)
    assert len(cells) == 16 and cells.count(eids["XSS"]) == 4, cells
    assert html.escape(XSS, quote=False) in dom and "<img" not in dom  # text, not an element
    # the queue: Q waiting with the engine's reason (jobs.waiting, schema 3), R held with the
    # journal's reason
    for key in ("Q", "R"):
        assert f'<tr data-job="{eids[key]}">' in dom, key
    waiting = json.loads(rows[eids["Q"]].waiting)["text"]  # type: ignore[union-attr]
    assert "needs 2 GPUs" in waiting and html.escape(waiting, quote=False) in dom, waiting
    reason = rows[eids["R"]].reason  # type: ignore[union-attr]
    assert reason.startswith("refused, kept held") and html.escape(reason, quote=False) in dom
    # recent decisions: the four starts
    assert dom.count("<td>start</td>") >= 4


# ------------------------------------------------------------------------ reasons
def test_reasons_reach_the_journal_the_log_status_explain_and_the_admin_comment(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None
) -> None:
    """Issue 25 items 1-2 on the lab: four 3-GPU jobs take a GPU short of every node, so a
    4-GPU job (single-node: it starts no ranks) waits; its reason is journaled, shown in its
    admin comment, by ``gpuplan status`` and ``gpuplan explain``; each start is logged at
    INFO with its reason."""
    log = shared / "controller.log"
    db = shared / "state" / "controller.db"
    run = Controller(lab, db, log, args=("--policy", "fifo", "--interval", "0.5"))
    try:
        ids = {f"R{i}": _submit(lab, user, shared, f"R{i}", 3600.0, 3, 3, 3) for i in range(4)}
        _wait(
            "R0..R3 running",
            lambda: (
                all(s.state == "RUNNING" for s in _states(lab, ids).values())
                and len(_states(lab, ids)) == 4
            ),
            LAB_WAIT_S,
            log,
        )
        ids["B"] = _submit(lab, user, shared, "B", 60.0, 4, 4, 4)
        big = engine_id(ids["B"])
        want = "needs 4 GPUs on one node, at most 1 free on any node"

        def waiting() -> str:
            with Journal(db, writer=False) as journal:
                row = journal.job(big)
                return row.waiting if row is not None else ""

        _wait("B's reason in the journal", lambda: want in waiting(), LAB_WAIT_S, log)
        shown = "wait=needs 4 GPUs on one node at most 1 free on any node"  # no ',' in it
        _wait(
            "B's reason in its admin comment",
            lambda: shown in (_states(lab, ids)["B"].admin_comment),
            LAB_WAIT_S,
            log,
        )
        comment = _states(lab, ids)["B"].admin_comment
        assert comment.startswith("gpuplan:held;gpus=4;min=4;max=4"), comment
        status = _gpuplan(lab, ["status", "--journal", str(db)])
        assert status.returncode == 0, status.stderr
        out = status.stdout
        assert all(len(line) <= 80 for line in out.splitlines()), out
        assert want in " ".join(out.split()) and "running" in out.splitlines()[0]
        queue = [line.split() for line in out.splitlines() if line[:4].strip().isdigit()]
        assert [q[2] for q in queue[:4]] == ["running"] * 4 and queue[4][1] == big, out
        as_json = _gpuplan(lab, ["status", "--journal", str(db), "--json"])
        data = json.loads(as_json.stdout)
        assert sum(data["usage"].values()) == 12 and data["health"]["running"]
        assert data["health"]["heartbeat_age_s"] is not None
        explain = _gpuplan(lab, ["explain", str(ids["B"]), "--journal", str(db)])
        assert explain.returncode == 0, explain.stderr
        assert f"waiting now: {want}" in " ".join(explain.stdout.split()), explain.stdout
        first = engine_id(ids["R0"])
        explain = _gpuplan(lab, ["explain", first, "--journal", str(db)])
        assert explain.returncode == 0, explain.stderr
        assert re.search(
            r"start .*\[applied\] start: rank \d+ in fifo's order", " ".join(explain.stdout.split())
        ), explain.stdout
        unknown = _gpuplan(lab, ["explain", "slurm-999999", "--journal", str(db)])
        assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
        text = log.read_text(errors="replace")
        assert re.search(rf"start {first} \(0 -> 3 GPUs\): start: rank \d+", text), text[-3000:]
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0


# ------------------------------------------------------------------------ upgrade


def _previous_release() -> str:
    """The last commit before this release's schema change: the previous landed release.

    ``--first-parent``: on main's own history a change merged from a branch is the merge
    commit, so its parent is main before the merge, not a commit inside the branch."""
    try:
        bump = subprocess.run(
            [
                "git",
                "-C",
                str(ROOT),
                "log",
                "-1",
                "--first-parent",
                "--format=%H",
                "-G^SCHEMA_VERSION = ",
                "--",
                "executors/control/journal_schema.py",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.strip()
        parent = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", bump + "^"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"no git history to take the previous release from: {err}")
    if not bump or not parent:
        pytest.skip("no git history to take the previous release from")
    return parent


def _stage_release(commit: str, into: Path) -> Path:
    """The release at ``commit`` as an importable ``gpuplan`` package (the layout
    pyproject's package-dir gives an install): ``into/gpuplan/{models,executors,...}``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout
    src = into / "src"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    site = into / "site"
    site.mkdir()
    (src / "gpuplan").rename(site / "gpuplan")
    for package in ("models", "solver_core", "executors", "scenarios"):
        (src / package).rename(site / "gpuplan" / package)
    return site


def test_upgrade_from_the_previous_release_loses_stops_and_repeats_nothing(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None, tmp_path: Path
) -> None:
    commit = _previous_release()
    site = _stage_release(commit, tmp_path)
    found = re.search(
        r"(?m)^SCHEMA_VERSION = (\d+)$",
        (site / "gpuplan" / "executors" / "control" / "journal_schema.py").read_text(),
    )
    assert found is not None
    old_schema = int(found.group(1))
    assert old_schema < SCHEMA_VERSION
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    env = {**os.environ, **lab.env, "PYTHONPATH": str(site)}
    argv = [
        sys.executable,
        "-m",
        "gpuplan",
        "slurm-controller",
        "--policy",
        "fifo",
        "--interval",
        "0.5",
        "--partition",
        PARTITION,
        "--state-db",
        str(db),
    ]
    with open(log, "ab") as out:
        out.write(f"\n==== previous release {commit}\n".encode())
        old = subprocess.Popen(
            argv,
            env=env,
            cwd=site,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    # Four long rigid jobs fill the 16 GPUs; two more wait, held, behind them.
    work = {f"R{i}": 360.0 for i in range(1, 5)} | {"H1": 16.0, "H2": 16.0}
    try:
        ids = {n: _submit(lab, user, shared, n, w, 4, 4, 4) for n, w in work.items()}
        _wait(
            "R1-R4 running under the previous release",
            lambda: all(_states(lab, ids)[n].state == "RUNNING" for n in ("R1", "R2", "R3", "R4")),
            LAB_WAIT_S,
            log,
        )
        _wait(
            "the old journal to record them",
            lambda: (
                {_journal_rows(db).get(engine_id(ids[n])) for n in ids} == {"running", "pending"}
            ),
            LAB_WAIT_S,
            log,
        )
    finally:
        old.send_signal(signal.SIGTERM)
    assert old.wait(LAB_WAIT_S) == 0
    assert _schema(db) == old_schema, "the previous release's code should have run"
    before = _journal_rows(db)
    held = _states(lab, ids)
    assert held["H1"].held and held["H2"].held
    # This release on the same journal: migrate, adopt R1-R4 as running, start H1, H2 later.
    new = Controller(lab, db, log, args=("--policy", "fifo", "--interval", "0.5"))
    try:
        _wait("the journal migrated", lambda: _schema(db) == SCHEMA_VERSION, LAB_WAIT_S, log)
        _wait(
            "all six jobs completed",
            lambda: (
                all((shared / f"{n}.done").exists() for n in ids)
                and all(j.state == "COMPLETED" for j in _states(lab, ids).values())
                and set(_journal_rows(db)[engine_id(i)] for i in ids.values()) == {"completed"}
            ),
            LAB_WAIT_S + 400,
            log,
        )
    finally:
        new.kill(signal.SIGTERM)
    assert new.wait(LAB_WAIT_S) == 0
    # Nothing lost: every job the old journal held is still there (now completed).
    assert set(before) <= set(_journal_rows(db))
    # Nothing stopped or run twice: one Slurm run each (restart count 0), one segment each.
    for name, job in _states(lab, ids).items():
        assert job.restart_count == 0, (name, job.restart_count)
        assert len(_assert_tiles(shared, name, work[name])) == 1, name
    assert f"migrated from schema {old_schema} to {SCHEMA_VERSION}" in log.read_text()
    assert _schema(db.parent / f"{db.name}.schema{old_schema}.bak") == old_schema
    with Journal(db, writer=False) as journal:
        runs = journal.runs()
        assert len(runs) == 2 and runs[-1].version == __version__ and runs[-1].exit == "clean"
        assert journal.open_actions() == []
