"""The single-server executor end to end (issue 26 item 2; docs/single-server.md).

Real processes only: a ``gpuplan server`` daemon with 4 declared GPUs (no NVML here), the SSH
executor's agent and sidecars as its children, stand-in training jobs, and the CLI as the
client. The daemon runs with asyncssh blocked (as in a core install): the single server must
not need the ``ssh`` extra. Every wait polls with a generous bound; nothing is timed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 180.0
"""Generous bound for any state to be reached on a busy 2-core machine."""

BLOCK_ASYNCSSH = """\
import sys


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "asyncssh":
            raise ModuleNotFoundError("No module named 'asyncssh' (blocked by the test)",
                                      name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


def wait_for(what: str, check: Callable[[], Any], bound: float = BOUND_S) -> Any:
    """Poll ``check`` until it returns something truthy (at most ``bound`` seconds)."""
    deadline = time.monotonic() + bound
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {bound:.0f} s: {what}")
        time.sleep(0.1)


def standin(rate: float = 4.0) -> list[str]:
    """A job-protocol command: the stand-in, wired to the server's environment."""
    return [
        "sh",
        "-c",
        'exec "$0" -m gpuplan.executors.standin --job-id="$GPUPLAN_JOB_ID" '
        '--work "$GPUPLAN_WORK" --state-dir "$GPUPLAN_STATE_DIR" '
        f"--rate-per-gpu {rate} --progress-interval 0.2",
        sys.executable,
    ]


class Daemon:
    """One ``gpuplan server`` process on a state dir (restartable)."""

    def __init__(self, base: Path, policy: str, gpus: str = "4") -> None:
        self.base = base
        self.state = base / "state"
        self.policy = policy
        self.gpus = gpus
        (base / "site").mkdir(exist_ok=True)
        (base / "site" / "sitecustomize.py").write_text(BLOCK_ASYNCSSH)
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(base / "site"), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        self.proc: subprocess.Popen[str] | None = None

    def start(self, *extra: str) -> None:
        log = open(self.base / "server.log", "a")  # noqa: SIM115 (the child holds it)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuplan",
                "server",
                "--gpus",
                self.gpus,
                "--policy",
                self.policy,
                "--state-dir",
                str(self.state),
                "--poll",
                "0.3",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=self.env,
            start_new_session=True,
        )
        log.close()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "ready" (or EOF when it failed to start)
        assert "gpuplan server ready" in line, (line, self.log())

    def log(self) -> str:
        return (self.base / "server.log").read_text()[-4000:]

    def cli(self, *args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "gpuplan", *args]
        if user is not None:
            argv = [*as_user(user), *argv]
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=BOUND_S,
            cwd="/" if user is not None else self.base,
        )

    def submit(self, *args: str) -> str:
        done = self.cli("submit", "--server", str(self.state), *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def status(self) -> dict[str, Any]:
        done = self.cli("status", "--server", str(self.state), "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def jobs(self) -> dict[str, dict[str, Any]]:
        return {j["id"]: j for j in self.status()["jobs"]}

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=BOUND_S)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=BOUND_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def leftovers(self) -> list[int]:
        """PIDs of processes started for this state dir (sidecars, jobs) still alive."""
        mine = []
        marker = str(self.state).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                environ = (entry / "environ").read_bytes()
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                continue
            if marker in cmdline or marker in environ:
                mine.append(int(entry.name))
        return mine

    def segments(self, job: str) -> list[dict[str, Any]]:
        path = self.state / "jobs" / f"{job}.log"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def make(policy: str = "tiresias-l", gpus: str = "4") -> Daemon:
        base = tmp_path / f"d{len(made)}"
        base.mkdir(mode=0o700)
        d = Daemon(base, policy, gpus)
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop()
        for pid in d.leftovers():  # only processes this test started (their state dir)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def assert_tiled(d: Daemon, job: str, work: float) -> list[dict[str, Any]]:
    """The job's committed segments tile [0, work]: no work lost, none done twice."""
    segs = d.segments(job)
    assert segs, job
    assert segs[0]["start"] == 0.0
    for a, b in itertools.pairwise(segs):
        assert b["start"] == pytest.approx(a["end"], abs=1e-6), (job, segs)
    assert segs[-1]["end"] == pytest.approx(work), (job, segs)
    return segs


def test_three_jobs_share_four_gpus_and_complete_with_their_work(daemon) -> None:
    """A long 4-GPU job runs; a short rigid one and an elastic one arrive: SRTF preempts the
    long job (checkpoint-stop, two-phase plan), runs the others, resumes it from its
    checkpoint; every job ends with exactly its work."""
    d = daemon("srtf")
    d.start("--no-restart-gate")  # every planned change is carried out (the gate has tests)
    long = d.submit("--gpus", "4", "--work", "200", "--name", "long", "--", *standin(rate=2.0))
    wait_for("the long job progresses", lambda: d.jobs()[long]["done"] > 0)
    short = d.submit("--gpus", "2", "--work", "16", "--", *standin())
    elastic = d.submit("--gpus", "2", "--min", "1", "--max", "4", "--work", "24", "--", *standin())
    assert [long, short, elastic] == ["j1", "j2", "j3"]
    wait_for(
        "every job completed",
        lambda: all(j["state"] == "completed" for j in d.jobs().values()),
    )
    jobs = d.jobs()
    for job_id, work in ((long, 200.0), (short, 16.0), (elastic, 24.0)):
        assert jobs[job_id]["done"] == pytest.approx(work)
        assert_tiled(d, job_id, work)
    assert jobs[long]["name"] == "long"
    segments = d.segments(long)
    assert len(segments) >= 2, segments  # preempted, then resumed from its checkpoint
    assert len({s["pid"] for s in segments}) >= 2
    assert d.proc is not None and d.proc.poll() is None  # the daemon lives on, idle


def test_opaque_commands_run_where_and_as_they_were_submitted(daemon) -> None:
    """No --work: the command runs verbatim (no shell of ours) in the submitter's directory with
    the submitter's environment and its GPUs; exit 0 completes it, a failing one fails after
    its restarts, with the exit code as the reason."""
    d = daemon("fifo")
    d.start()
    d.env["GPUPLAN_TEST_MARK"] = "a value; $(touch pwned) `x`"
    ok = d.submit(
        "--gpus",
        "3",
        "--",
        "sh",
        "-c",
        'printf "%s|%s|%s" "$CUDA_VISIBLE_DEVICES" "$GPUPLAN_JOB_ID" "$GPUPLAN_TEST_MARK" > seen',
    )
    bad = d.submit("--gpus", "1", "--name", "bad", "--", "sh", "-c", "exit 3")
    wait_for("ok completed", lambda: d.jobs()[ok]["state"] == "completed")
    assert (d.base / "seen").read_text() == f"0,1,2|{ok}|a value; $(touch pwned) `x`"
    assert not (d.base / "pwned").exists()
    wait_for("bad failed", lambda: d.jobs()[bad]["state"] == "failed")
    assert "exit codes {'local': 3}" in d.jobs()[bad]["reason"]


def test_cancel_stops_a_running_job_and_frees_its_gpus(daemon) -> None:
    d = daemon("fifo")
    d.start()
    long = d.submit("--gpus", "4", "--work", "100000", "--", *standin(rate=1.0))
    wait_for("the long job runs", lambda: d.jobs()[long]["state"] == "running")
    queued = d.submit("--gpus", "2", "--work", "8", "--", *standin())
    assert d.jobs()[queued]["state"] == "pending"
    done = d.cli("cancel", long, "--server", str(d.state))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{long}: cancelling"
    wait_for("cancelled", lambda: d.jobs()[long]["state"] == "cancelled")
    wait_for("the queued job completes", lambda: d.jobs()[queued]["state"] == "completed")
    assert_tiled(d, queued, 8.0)
    # the cancelled job's process is gone; what it did is checkpointed, nothing more
    sidecar_state = json.loads((d.state / "runs" / f"{long}@local" / "state.json").read_text())
    assert sidecar_state["phase"] == "exited"
    ckpt = json.loads((d.state / "jobs" / f"{long}.ckpt").read_text())
    assert 0 < ckpt["done"] < 100000
    again = d.cli("cancel", long, "--server", str(d.state))
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1 and "already ended (cancelled)" in again.stderr


def test_kill_9_of_the_server_loses_no_job(daemon) -> None:
    d = daemon("tiresias-l")
    d.start()
    a = d.submit("--gpus", "2", "--work", "60", "--", *standin(rate=2.0))
    b = d.submit("--gpus", "2", "--work", "50", "--", *standin(rate=2.0))
    wait_for("both run", lambda: all(j["state"] == "running" for j in d.jobs().values()))
    pids = {
        j: json.loads((d.state / "runs" / f"{j}@local" / "state.json").read_text())["child_pid"]
        for j in (a, b)
    }
    d.kill9()
    # the jobs did not notice: their processes live on without the daemon
    for pid in pids.values():
        os.kill(pid, 0)
    d.start()
    status = d.status()
    assert sorted(status["server"]["adopted"]) == sorted([a, b])
    wait_for("both completed", lambda: all(j["state"] == "completed" for j in d.jobs().values()))
    for job, work in ((a, 60.0), (b, 50.0)):
        segs = assert_tiled(d, job, work)
        assert {s["pid"] for s in segs} == {pids[job]}  # adopted: never restarted


def test_a_server_restart_resubmits_a_job_that_fenced_while_it_was_down(daemon) -> None:
    """Down longer than the lease: the sidecar checkpoint-stopped its job; the next server
    resumes it from its checkpoint (not adopted, nothing lost)."""
    d = daemon("fifo")
    d.start("--lease", "1")
    job = d.submit("--gpus", "1", "--work", "40", "--", *standin(rate=2.0))
    wait_for("it runs", lambda: d.jobs()[job]["state"] == "running")
    d.kill9()
    state = d.state / "runs" / f"{job}@local" / "state.json"
    wait_for("fenced", lambda: json.loads(state.read_text()).get("phase") == "fenced")
    d.start("--lease", "1")
    assert d.status()["server"]["adopted"] == []
    wait_for("completed", lambda: d.jobs()[job]["state"] == "completed")
    assert len(assert_tiled(d, job, 40.0)) >= 2


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--gpus", "2", "--min", "3", "--max", "2", "--", "true"], "field '--min': --min 3"),
        (["--gpus", "8", "--", "true"], "8 GPU(s) asked for, this server has 4"),
        (["--gpus", "2"], "no command to run"),
        (["--gpus", "2", "--"], "no command to run"),
        (["--gpus", "2", "--work", "-1", "--", "true"], "field '--work'"),
        (["--gpus", "1", "--memory", "0", "--", "true"], "field '--memory'"),
        (["--gpus", "1", "--compute", "1.5", "--", "true"], "field '--compute'"),
        (["--gpus", "1", "--compute", "nan", "--", "true"], "field '--compute'"),
    ],
)
def test_bad_submissions_are_one_line_and_exit_2(daemon, args: list[str], text: str) -> None:
    d = daemon()
    d.start()
    done = d.cli("submit", "--server", str(d.state), *args)
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and text in done.stderr, done.stderr
    assert d.jobs() == {}


def test_bad_server_options_and_no_server_are_one_line_and_exit_2(daemon, tmp_path: Path) -> None:
    d = daemon()
    for argv, text in (
        (["server", "--gpus", "4", "--policy", "no-such-policy"], "no-such-policy"),
        (["server", "--gpus", "0,0", "--policy", "fifo"], "listed twice"),
        (["server", "--gpus", "x", "--policy", "fifo"], "not a GPU index or UUID"),
        (["server", "--gpus", "1", "--policy", "fifo", "--keep-finished", "0"], "--keep-finished"),
        (["server", "--gpus", "1", "--policy", "fifo", "--keep-finished", "nan"], "in (0, 36500]"),
        (["submit", "--gpus", "1", "--", "true"], "no gpuplan server is running here"),
        (["cancel", "j1"], "no gpuplan server is running here"),
        (["status", "--server", "--json"], "no gpuplan server is running here"),
    ):
        server = argv[0] == "server"
        where = ["--state-dir" if server else "--server", str(d.state)]
        if argv[0] == "status":
            argv = ["status", "--server", str(d.state)]
            where = []
        if not server:
            d.state.mkdir(mode=0o700, exist_ok=True)
        done = d.cli(argv[0], *where, *argv[1:])
        assert done.returncode == 2, (argv, done)
        assert done.stderr.count("\n") == 1 and text in done.stderr, (argv, done.stderr)
    d.start()
    unknown = d.cli("cancel", "j99", "--server", str(d.state))
    assert unknown.returncode == 2 and "no job 'j99'" in unknown.stderr
    second = d.cli("server", "--gpus", "4", "--policy", "fifo", "--state-dir", str(d.state))
    assert second.returncode == 2 and "already runs here" in second.stderr, second.stderr


def as_user(user: str) -> list[str]:
    """The setpriv prefix that runs a command as ``user`` (numeric ids: Debian's nobody has
    no group of that name)."""
    entry = pwd.getpwnam(user)
    return ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]


def _other_user() -> str | None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return None
    return "nobody"


def test_hostile_state_dirs_are_refused(daemon, tmp_path: Path) -> None:
    d = daemon()
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    cases: dict[str, str] = {}
    link = tmp_path / "link"
    link.symlink_to(target)
    cases[str(link)] = "not a directory (a symlink?)"
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o755)
    cases[str(open_dir)] = "mode 755"
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, pwd.getpwnam("nobody").pw_uid, -1)
        cases[str(theirs)] = "owned by uid"
    for path, text in cases.items():
        for argv in (
            ["server", "--gpus", "4", "--policy", "fifo", "--state-dir", path],
            ["submit", "--server", path, "--gpus", "1", "--", "true"],
        ):
            done = d.cli(*argv)
            assert done.returncode == 2, (argv, done)
            assert done.stderr.count("\n") == 1 and text in done.stderr, (argv, done.stderr)
    assert list(target.iterdir()) == []  # nothing was written through the link


@pytest.mark.skipif(_other_user() is None, reason="needs root and setpriv to act as nobody")
def test_another_uid_is_refused_on_the_socket(daemon) -> None:
    """Defence in depth: even when the socket is reachable (an operator opened the state dir),
    the server answers only its own uid (SO_PEERCRED)."""
    d = daemon()
    d.start()
    # the socket made reachable by another name (a hard link in a directory all may enter)
    reachable = Path(tempfile.mkdtemp(prefix="gpuplan-sock-", dir="/tmp"))
    reachable.chmod(0o711)
    sock = reachable / "s"
    os.link(d.state / "server.sock", sock)
    sock.chmod(0o666)
    # it connects and reads: the server answers a stranger at once, before any request
    probe = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        "    s.connect(sys.argv[1])\n"
        "except OSError as e:\n"
        "    sys.exit(repr(e))\n"
        "print(s.makefile().readline())\n"
    )
    user = _other_user()
    assert user is not None
    done = subprocess.run(
        [
            *as_user(user),
            shutil.which("python3", path="/usr/bin:/bin") or sys.executable,
            "-c",
            probe,
            str(sock),
        ],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
    )
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["ok"] is False and "may not use this server" in reply["error"]
    shutil.rmtree(reachable)
    assert d.jobs() == {}
    # and a client run as that user gets one line, not a traceback
    refused = d.cli("status", "--server", str(d.state), user=user)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr


def test_fifo_ojpp_co_locates_two_profiled_jobs_on_one_gpu(daemon) -> None:
    """Two 1-GPU jobs submitted with an OJPP profile (``--memory``, ``--compute``) on a 1-GPU
    server under ``fifo-ojpp``: the second is packed onto the first's GPU (both run at once,
    same placement) and both complete with their work; a job without a profile waits for a
    whole GPU."""
    d = daemon("fifo-ojpp(theta_max=1.5,theta_balance=1.5)", gpus="1")
    d.start()
    profile = ("--memory", "0.3", "--compute", "0.5")
    first = d.submit(
        "--gpus", "1", "--work", "40", "--name", "resnet18", *profile, "--", *standin(rate=2.0)
    )
    second = d.submit(
        "--gpus", "1", "--work", "20", "--name", "resnet18", *profile, "--", *standin(rate=2.0)
    )
    whole = d.submit("--gpus", "1", "--work", "4", "--", *standin())
    both = wait_for(
        "both profiled jobs run on GPU 0 together",
        lambda: (lambda j: j if j[first]["state"] == j[second]["state"] == "running" else None)(
            d.jobs()
        ),
    )
    assert both[first]["placement"] == both[second]["placement"] == "local:0", both
    assert both[first]["memory"] == 0.3 and both[first]["compute"] == 0.5
    assert both[whole]["state"] == "pending", both[whole]
    wait_for(
        "every job completed",
        lambda: all(j["state"] == "completed" for j in d.jobs().values()),
    )
    for job_id, work in ((first, 40.0), (second, 20.0), (whole, 4.0)):
        assert_tiled(d, job_id, work)
