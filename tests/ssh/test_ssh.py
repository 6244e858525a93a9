"""SSH executor, sidecar and SSH lab: real sshd "nodes" on 127.0.1.x, real processes.

The lab (``tests.labs.ssh.lab``) starts in a session fixture. Outside CI a machine that
cannot run it (not root, no apt) skips these tests with the reason; with ``CI`` set to a true
value or ``GPUPLAN_REQUIRE_SSH=1`` a lab that cannot start is a test *error*, so a green CI can
never hide a broken set-up. All nodes of the lab share one filesystem, which stands in for the
shared checkpoint directory a real cluster would have.

Invariants checked after every end-to-end run (:func:`check_run`):

* every job finished in the engine's records, with ``done == work``;
* per job, the stand-in's committed segments over all ranks sum to the job's work, and each
  rank's segments follow each other exactly (nothing lost beyond a checkpoint, nothing twice);
* no GPU ever ran two training processes at once (from the sidecars' start/exit history).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import pwd
import re
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpuplan.executors.engine import Engine
from gpuplan.executors.ssh.agent import parse_proc_stat, pid_alive
from gpuplan.executors.ssh.executor import (
    SIDECAR_SOURCE,
    CommandLauncher,
    Launcher,
    SshExecutor,
    SshSettings,
    StandinLauncher,
    UnsafeRunRoot,
    safe_name,
)
from gpuplan.executors.ssh.pool import HostKeyRejected, NodeAddress, SshPool
from gpuplan.models import (
    CapacityChange,
    Cluster,
    Elasticity,
    JobSpec,
    Node,
    ThroughputProfile,
)
from gpuplan.solver_core.registry import make_policy, policy_names
from tests.labs import CHECKOUT
from tests.labs.ssh.lab import LabError, SshLab, free_port

RATE = 10.0  # stand-in iterations/s per GPU
_TRUTHY = ("1", "true", "yes", "on")  # the rule of tests/slurm_fixtures.py::required
REQUIRED = (
    os.environ.get("CI", "").lower() in _TRUTHY
    or os.environ.get("GPUPLAN_REQUIRE_SSH", "").lower() in _TRUTHY
)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def ssh_lab() -> Iterator[SshLab]:
    root = Path(tempfile.mkdtemp(prefix="gpuplan-sshlab-"))
    lab: SshLab | None = None
    try:
        if os.geteuid() != 0:
            raise LabError("the SSH lab needs root")
        hosts = [f"127.0.1.{k}" for k in (1, 2, 3)]
        lab = SshLab(root, nodes=3, port=free_port(hosts)).up()
    except (LabError, OSError, subprocess.SubprocessError) as exc:
        if lab is not None:
            lab.down()
        shutil.rmtree(root, ignore_errors=True)
        if REQUIRED:
            pytest.fail(f"SSH lab could not start and CI requires it: {exc}")
        pytest.skip(f"SSH lab unavailable: {exc}")
    yield lab
    lab.down()
    shutil.rmtree(root, ignore_errors=True)


class Harness:
    """Builds executors against the lab; keeps run dirs for the invariant checks."""

    def __init__(self, lab: SshLab, tmp: Path) -> None:
        self.lab = lab
        self.tmp = tmp
        self.state = tmp / "state"  # the "shared filesystem" checkpoint dir
        self.state.mkdir(mode=0o777)
        self.run_root = tmp / "runs"
        self.engine_dir = tmp / "engine"
        self.executors: list[SshExecutor] = []
        self.cleanup: list[Path] = []

    def addresses(
        self, names: Sequence[str], user: str = "root", lab_nodes: Sequence[str] | None = None
    ) -> dict[str, NodeAddress]:
        lab_nodes = lab_nodes or [f"node{k}" for k in range(1, len(names) + 1)]
        return {
            name: NodeAddress(self.lab.node(ln).host, self.lab.port, user)
            for name, ln in zip(names, lab_nodes, strict=True)
        }

    def executor(
        self,
        cluster: Cluster,
        jobs: Sequence[JobSpec],
        *,
        launcher: Launcher | None = None,
        events: Sequence[Any] = (),
        user: str = "root",
        run_root: Path | None = None,
        lab_nodes: Sequence[str] | None = None,
        **knobs: Any,
    ) -> SshExecutor:
        settings = dict(
            poll_interval_s=0.25,
            lease_s=1.5,
            ckpt_grace_s=2.0,
            term_grace_s=0.5,
            command_timeout_s=15.0,
            deadline_s=90.0,
            remote_python="/usr/bin/python3",
        )
        settings.update(knobs)
        ex = SshExecutor(
            cluster,
            self.addresses([n.name for n in cluster.nodes], user, lab_nodes),
            launcher or self.standin(),
            SshSettings(
                known_hosts=str(self.lab.known_hosts),
                client_keys=(str(self.lab.client_key),),
                run_root=str(run_root or self.run_root),
                **settings,
            ),
            jobs=jobs,
            events=events,
            state_dir=self.engine_dir,
        )
        self.executors.append(ex)
        return ex

    def standin(self, **kw: Any) -> StandinLauncher:
        return StandinLauncher(self.state, RATE, python=sys.executable, **kw)

    def close(self) -> None:
        for ex in self.executors:
            try:
                ex.shutdown(stop_jobs=True)
            except Exception:  # best effort: a test may already have detached it
                ex.detach()
        # Anything a test left behind (detached engines) must not outlive the test.
        for state in self.run_root.glob("*/state.json"):
            data = json.loads(state.read_text())
            for key, group in (("sidecar_pid", False), ("child_pid", True)):
                pid = data.get(key)
                if pid_alive(pid, data.get(key.replace("pid", "start"))):
                    with contextlib.suppress(OSError):
                        (os.killpg if group else os.kill)(int(pid), signal.SIGKILL)
        for path in self.cleanup:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def harness(ssh_lab: SshLab, tmp_path: Path) -> Iterator[Harness]:
    tmp_path.chmod(0o755)
    h = Harness(ssh_lab, tmp_path)
    yield h
    h.close()
    for node in ssh_lab.nodes:  # fault tests stop nodes; later tests need them all
        ssh_lab.start_node(node)


def elastic(
    job_id: str, submit: float, req: int, lo: int, hi: int, seconds: float, **kw: Any
) -> JobSpec:
    """A stand-in job taking ``seconds`` at its requested size (linear profile = RATE/GPU)."""
    return JobSpec(
        id=job_id,
        submit_time=submit,
        requested_gpus=req,
        elasticity=Elasticity(min_gpus=lo, max_gpus=hi),
        total_iterations=RATE * req * seconds,
        throughput=ThroughputProfile.linear(RATE),
        **kw,
    )


def rigid(job_id: str, submit: float, gpus: int, seconds: float) -> JobSpec:
    return JobSpec(
        id=job_id,
        submit_time=submit,
        requested_gpus=gpus,
        total_iterations=RATE * gpus * seconds,
        throughput=ThroughputProfile.linear(RATE),
    )


def cluster_of(names: Sequence[str], gpus: int) -> Cluster:
    return Cluster(nodes=[Node(name=n, gpus=gpus) for n in names])


# --------------------------------------------------------------------------- invariants


def segments(launcher: StandinLauncher, job_id: str, ranks: int = 3) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for rank, path in enumerate(launcher.log_files(job_id, ranks)):
        if Path(path).exists():
            out[rank] = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return out


def gpu_intervals(run_root: Path) -> dict[tuple[str, int], list[tuple[float, float, str]]]:
    """(node, gpu) -> [(start, end, job)] from every sidecar's events.jsonl."""
    spans: dict[tuple[str, int], list[tuple[float, float, str]]] = defaultdict(list)
    for events in run_root.glob("*/events.jsonl"):
        spec = json.loads((events.parent / "spec.json").read_text())
        open_runs: dict[int, dict] = {}
        for line in events.read_text().splitlines():
            ev = json.loads(line)
            if ev["event"] == "start":
                open_runs[ev["pid"]] = ev
            elif ev["event"] == "exit" and ev["pid"] in open_runs:
                start = open_runs.pop(ev["pid"])
                for g in start["gpus"]:
                    spans[(spec["node"], g)].append((start["t"], ev["t"], spec["job_id"]))
        for start in open_runs.values():  # never seen exiting: holds its GPUs forever
            for g in start["gpus"]:
                spans[(spec["node"], g)].append((start["t"], float("inf"), spec["job_id"]))
    return spans


def check_run(
    engine: Engine, ex: SshExecutor, jobs: Sequence[JobSpec], run_root: Path | None = None
) -> None:
    records = {r.job_id: r for r in engine.result().jobs}
    for spec in jobs:
        rec = records[spec.id]
        assert rec.finish_time is not None, f"{spec.id} did not finish"
        assert rec.done_iterations == pytest.approx(spec.work)
    launcher = ex.launcher
    assert isinstance(launcher, StandinLauncher)
    for spec in jobs:
        per_rank = segments(launcher, spec.id)
        assert per_rank, spec.id
        for rank, segs in per_rank.items():
            for prev, seg in itertools.pairwise(segs):
                assert seg["start"] == pytest.approx(prev["end"], abs=1e-9), (spec.id, rank)
            assert segs[0]["start"] == 0.0
        total = sum(s["end"] - s["start"] for segs in per_rank.values() for s in segs)
        assert total == pytest.approx(spec.work, rel=1e-9), (spec.id, per_rank)
    for (node, gpu), spans in gpu_intervals(run_root or Path(ex.settings.run_root)).items():
        spans.sort()
        for (_s1, e1, j1), (s2, _e2, j2) in itertools.pairwise(spans):
            assert s2 >= e1, f"GPU {node}:{gpu} ran {j1} and {j2} at once"


def action_kinds(ex: SshExecutor) -> dict[str, int]:
    kinds: dict[str, int] = defaultdict(int)
    for a in ex.action_log:
        kind = a["kind"]
        if kind == "resize":
            kind = "grow" if a["after"] > a["before"] else "shrink"
        kinds[kind] += 1
    return dict(kinds)


def sidecar_state(ex: SshExecutor, job_id: str, node: str) -> dict:
    return json.loads((Path(ex.job_dir(job_id, node)) / "state.json").read_text())


class When:
    """Run ``action`` once ``ready()`` holds, polled from a thread while the engine runs.

    Fault injection at a *state* (the job is running, the node has failed), never at a fixed
    delay: on a busy machine a delay can land before the state (a job not placed yet) or after
    it (a job already finished). ``check()`` after the run re-raises what went wrong, and fails
    when the state never came within ``timeout_s`` (a generous bound: "never", not "slow")."""

    def __init__(
        self,
        what: str,
        ready: Callable[[], bool],
        action: Callable[[], Any],
        timeout_s: float = 300.0,
    ) -> None:
        self.what = what
        self.done = threading.Event()
        self.error: BaseException | None = None

        def watch() -> None:
            deadline = time.monotonic() + timeout_s
            try:
                while time.monotonic() < deadline:
                    try:
                        ok = ready()
                    except (OSError, ValueError, KeyError):  # files mid-write, not there yet
                        ok = False
                    if ok:
                        action()
                        self.done.set()
                        return
                    time.sleep(0.05)
                self.error = AssertionError(f"never reached: {what} (within {timeout_s:g} s)")
            except BaseException as exc:  # reported by check()
                self.error = exc

        self.thread = threading.Thread(target=watch, name=f"when {what}", daemon=True)
        self.thread.start()

    def check(self) -> None:
        self.thread.join(timeout=1.0)
        if self.error is not None:
            raise self.error
        assert self.done.is_set(), f"never reached: {self.what}"


def _running_on(ex: SshExecutor, job_id: str, nodes: Sequence[str]) -> str | None:
    """The node whose sidecar runs ``job_id``'s training process now (None: none yet)."""
    for node in nodes:
        path = Path(ex.job_dir(job_id, node), "state.json")
        if path.exists():
            state = json.loads(path.read_text())
            if state.get("phase") == "running" and state.get("child_pid"):
                return node
    return None


# --------------------------------------------------------------------------- units (no lab)


def test_proc_stat_parsing_and_safe_names() -> None:
    # comm may contain spaces and ')' — fields are counted after the last ')'
    line = "4242 (we ird) (name) S 1 4242 4242 0 -1 4194560 " + " ".join(["0"] * 12) + " 987654 0"
    state, start = parse_proc_stat(line)
    assert state == "S" and start == 987654
    assert parse_proc_stat(line.replace(") S ", ") Z "))[0] == "Z"
    assert safe_name("job-1.a_b") == "job-1.a_b"
    for hostile in ("a/b", "..", ".hidden", "x; rm -rf /", "$(id)", "a\nb", "ü"):
        name = safe_name(hostile)
        assert "+" in name and "/" not in name and not name.startswith(".")
        assert re.fullmatch(r"[A-Za-z0-9_.+-]+", name), name
    assert safe_name("a;b") != safe_name("a:b"), "sanitising must not merge ids"


def test_zombie_is_not_alive() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 5
        while parse_proc_stat(Path(f"/proc/{pid}/stat").read_text())[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(pid, 0)  # kill -0 still "succeeds" on a zombie ...
        assert not pid_alive(pid), "... but a zombie is not a live process"
    finally:
        os.waitpid(pid, 0)
    me = parse_proc_stat(Path("/proc/self/stat").read_text())
    assert pid_alive(os.getpid(), me[1])
    assert not pid_alive(os.getpid(), me[1] + 1), "a different start time means PID reuse"


def test_sidecar_escalates_to_killing_the_process_group(tmp_path: Path) -> None:
    """A job that ignores the checkpoint signal and SIGTERM, with a child of its own, is
    SIGKILLed as a whole group; the sidecar records how it stopped."""
    sidecar = tmp_path / "sidecar.py"  # the program as shipped: the agent package, bundled
    sidecar.write_text(SIDECAR_SOURCE, encoding="utf-8")
    stubborn = (
        "import signal, subprocess, time\n"
        "signal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen(['sleep', '300'])\n"
        "time.sleep(300)\n"
    )
    jobdir = tmp_path / "job"
    bundle = {
        "spec": {
            "job_id": "stubborn",
            "node": "local",
            "ckpt_grace_s": 0.5,
            "term_grace_s": 0.5,
            "lease_s": 0,
        },
        "control": {
            "seq": 1,
            "action": "run",
            "gen": 1,
            "rank": 0,
            "gpus": [3],
            "argv": [sys.executable, "-c", stubborn],
        },
    }

    def cli(*args: str, data: dict) -> dict:
        out = subprocess.run(
            [sys.executable, str(sidecar), *args],
            input=json.dumps(data),
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return json.loads(out.stdout)

    res = cli("launch", str(jobdir), "--wait", "10", data=bundle)
    assert res["ok"] and res["state"]["phase"] == "running"
    pgid = res["state"]["child_pid"]
    deadline = time.monotonic() + 10
    while len(_group(pgid)) < 2:  # the job and its sleep child
        assert time.monotonic() < deadline
        time.sleep(0.05)
    res = cli("control", str(jobdir), "--wait", "10", data={"seq": 2, "action": "exit"})
    assert res["ok"] and res["state"]["phase"] == "exited"
    assert res["state"]["stops"][-1]["how"] == "kill"
    assert res["state"]["stops"][-1]["rc"] == -signal.SIGKILL
    assert _group(pgid) == [], "nothing of the job's process group survives"
    events = [json.loads(line) for line in (jobdir / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "stop_request", "exit"]
    assert events[0]["gpus"] == [3]


def _group(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


# --------------------------------------------------------------------------- lab and security


def test_lab_is_idempotent_and_host_keys_are_verified(ssh_lab: SshLab, tmp_path: Path) -> None:
    pids = ssh_lab.status()
    assert all(pids.values())
    t0 = time.monotonic()
    ssh_lab.up()
    assert ssh_lab.status() == pids, "up() keeps running nodes"
    assert time.monotonic() - t0 < 5
    with pytest.raises(ValueError, match="known_hosts"):
        SshPool({}, known_hosts="", client_keys=[ssh_lab.client_key])
    # A known_hosts file with a different key for the node: the connection must be refused.
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    node = ssh_lab.nodes[0]
    wrong = tmp_path / "known_hosts"
    wrong.write_text(
        f"[{node.host}]:{node.port} "
        + " ".join(other.with_suffix(".pub").read_text().split()[:2])
        + "\n"
    )

    async def attempt(known: Path) -> str:
        pool = SshPool(
            {"n": NodeAddress(node.host, node.port)},
            known_hosts=known,
            client_keys=[ssh_lab.client_key],
        )
        try:
            return (await pool.run("n", ["echo", "it's", "$(id)"])).stdout
        finally:
            await pool.close()

    with pytest.raises(HostKeyRejected):
        asyncio.run(attempt(wrong))
    assert asyncio.run(attempt(ssh_lab.known_hosts)) == "it's $(id)\n"


# The lab's own root (issue 23): a root another user prepared is refused, a key the lab did not
# make is never used. Root is needed to act as another user; no sshd is started here.


@pytest.fixture
def hostile() -> pwd.struct_passwd:
    """The unprivileged account that plays the hostile local user."""
    if os.geteuid() != 0:
        if REQUIRED:
            pytest.fail("acting as another local user needs root (CI requires it)")
        pytest.skip("acting as another local user needs root")
    from ..slurm_fixtures import ensure_user

    return ensure_user("gpuuser")


def _keypair(path: Path, comment: str = "planted") -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True
    )
    return path.with_suffix(".pub").read_text()


def test_a_planted_ssh_lab_root_is_refused_and_its_key_never_authorised(
    tmp_path: Path, hostile: pwd.struct_passwd
) -> None:
    """Issue 23: a user who creates the lab root first, with a key pair of their own in
    ``keys/``, must never get that key into root's ``authorized_keys``."""
    root = tmp_path / "sshlab"
    (root / "keys").mkdir(parents=True)
    planted = _keypair(root / "keys" / "id_ed25519")
    (root / "authorized_keys").mkdir()
    for path in [root, *root.rglob("*")]:
        os.lchown(path, hostile.pw_uid, hostile.pw_gid)
    lab = SshLab(root, nodes=1, port=free_port(["127.0.1.1"]))
    for action in (lab.up, lab.prepare, lab.down, lab.status):
        with pytest.raises(LabError, match="belongs to uid") as err:
            action()
        assert str(root) in str(err.value) and "\n" not in str(err.value)
    assert not list((root / "authorized_keys").iterdir())
    assert (root / "keys" / "id_ed25519.pub").read_text() == planted
    cli = subprocess.run(
        [sys.executable, "-m", "tests.labs.ssh.lab", "down", "--dir", str(root)],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 1 and "belongs to uid" in cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1, cli.stderr


@pytest.mark.parametrize("plant", ["foreign-owner", "readable-mode", "symlink"])
def test_ssh_lab_never_reuses_a_key_it_did_not_make(
    tmp_path: Path, hostile: pwd.struct_passwd, plant: str
) -> None:
    lab = SshLab(tmp_path / "own", nodes=1, port=free_port(["127.0.1.1"]))
    assert lab.prepare() is True  # a new root: fresh keys
    st = lab.root.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o711)
    assert stat.S_IMODE((lab.root / "keys").stat().st_mode) == 0o700
    made = lab.client_key.with_suffix(".pub").read_text()
    assert lab.prepare() is False and lab.client_key.with_suffix(".pub").read_text() == made
    # Plant a key pair the lab did not make (as a squatter or a careless copy would).
    for half in (lab.client_key, lab.client_key.with_suffix(".pub")):
        half.unlink()
    if plant == "symlink":
        planted = _keypair(tmp_path / "elsewhere")
        lab.client_key.symlink_to(tmp_path / "elsewhere")
        lab.client_key.with_suffix(".pub").symlink_to(tmp_path / "elsewhere.pub")
    else:
        planted = _keypair(lab.client_key)
        if plant == "foreign-owner":
            for half in (lab.client_key, lab.client_key.with_suffix(".pub")):
                os.chown(half, hostile.pw_uid, hostile.pw_gid)
        else:
            lab.client_key.chmod(0o644)
    # ... and a link where root's authorized_keys goes.
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (lab.root / "authorized_keys" / "root").unlink()
    (lab.root / "authorized_keys" / "root").symlink_to(victim)
    assert lab.prepare() is False
    fresh = lab.client_key.with_suffix(".pub").read_text()
    assert fresh != planted and fresh != made
    key = lab.client_key.lstat()
    assert stat.S_ISREG(key.st_mode) and key.st_uid == 0 and stat.S_IMODE(key.st_mode) == 0o600
    for user in ("root", "gpuuser"):
        auth = lab.root / "authorized_keys" / user
        assert not auth.is_symlink() and auth.stat().st_uid == 0
        assert auth.read_text() == fresh and planted.split()[1] not in auth.read_text()
    assert victim.read_text() == "precious\n"
    if plant == "symlink":
        assert (tmp_path / "elsewhere.pub").read_text() == planted


def test_hostile_names_and_arguments_never_reach_a_shell(harness: Harness) -> None:
    markers = [harness.tmp / f"pwned{i}" for i in range(8)]
    job_id = (
        f'h\'; touch {markers[0]}; echo "$(touch {markers[1]})" `touch {markers[2]}`\n&& rm -rf / #'
    )
    hostile_args = [
        f"$(touch {markers[3]})",
        f"`touch {markers[4]}`",
        f"; touch {markers[5]}",
        "a\nb'\"\\",
        "--lease",
        "*",
        "-c",
    ]
    node_name = f"node$(touch {markers[6]});`touch {markers[7]}`"
    out = harness.tmp / "out.json"
    program = (
        "import json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'job': os.environ['GPUPLAN_JOB_ID'],"
        " 'cvd': os.environ['CUDA_VISIBLE_DEVICES']}, open(os.environ['OUT'], 'w'))\n"
    )
    launcher = CommandLauncher(
        ["/usr/bin/python3", "-c", program, *hostile_args], env={"OUT": str(out)}
    )
    spec = JobSpec(id=job_id, submit_time=0, requested_gpus=2, total_iterations=1.0)
    cluster = cluster_of([node_name], 2)
    ex = harness.executor(cluster, [spec], launcher=launcher)
    engine = Engine(cluster, make_policy("fifo"), ex, sample_interval_s=None)
    engine.run()
    assert engine.result().jobs[0].finish_time is not None
    seen = json.loads(out.read_text())
    assert seen == {"argv": hostile_args, "job": job_id, "cvd": "0,1"}
    assert not [m for m in markers if m.exists()], "a hostile string was executed by a shell"
    names = {p.name for p in harness.run_root.iterdir()}
    assert all("\n" not in n and "'" not in n and "$" not in n and "`" not in n for n in names)


def test_jobs_run_as_an_unprivileged_user(harness: Harness) -> None:
    user = harness.lab.user
    uid = pwd.getpwnam(user).pw_uid
    # pytest's tmp tree is private to root; the user's files need a path it can traverse.
    shared = Path(tempfile.mkdtemp(prefix="gpuplan-user-"))
    shared.chmod(0o1777)
    harness.cleanup.append(shared)
    out = shared / "who.json"
    program = "import json, os; json.dump({'uid': os.getuid()}, open(os.environ['OUT'], 'w'))"
    launcher = CommandLauncher(["/usr/bin/python3", "-c", program], env={"OUT": str(out)})
    cluster = cluster_of(["u1"], 2)
    spec = JobSpec(id="as-user", submit_time=0, requested_gpus=1, total_iterations=1.0)
    ex = harness.executor(cluster, [spec], launcher=launcher, user=user, run_root=shared / "runs")
    engine = Engine(cluster, make_policy("fifo"), ex, sample_interval_s=None)
    engine.run()
    assert engine.result().jobs[0].finish_time is not None
    assert json.loads(out.read_text()) == {"uid": uid}
    assert (shared / "runs").stat().st_uid == uid, "no root needed on the node"


def test_a_run_root_squatted_by_another_user_is_refused(harness: Harness) -> None:
    """A local user who creates the run root first (or a symlink in its place) would get the
    sidecar script run as the login user and could plant ``state.json`` files naming any PID.
    gpuplan refuses such a root before running anything from it, and the victim process the
    planted state points at is never signalled."""
    user = harness.lab.user
    pw = pwd.getpwnam(user)
    base = Path(tempfile.mkdtemp(prefix="gpuplan-squat-"))
    base.chmod(0o1777)  # like /tmp: anyone may create entries, nobody may move others'
    harness.cleanup.append(base)
    squatted = base / "runs"
    victim = subprocess.Popen(["sleep", "600"])
    try:
        # The squatter's directory and a planted state file naming the victim.
        subprocess.run(
            ["runuser", "-u", user, "--", "mkdir", "-m", "0700", str(squatted)], check=True
        )
        plant = squatted / "planted"
        subprocess.run(["runuser", "-u", user, "--", "mkdir", "-m", "0700", str(plant)], check=True)
        assert squatted.stat().st_uid == pw.pw_uid
        subprocess.run(
            [
                "runuser",
                "-u",
                user,
                "--",
                "/usr/bin/python3",
                "-c",
                "import json,sys; json.dump({'sidecar_pid': int(sys.argv[2]), "
                "'child_pid': int(sys.argv[2])}, open(sys.argv[1], 'w'))",
                str(plant / "state.json"),
                str(victim.pid),
            ],
            check=True,
        )
        link = base / "linked"
        link.symlink_to(squatted)
        cluster = cluster_of(["s1"], 2)
        spec = JobSpec(id="squat", submit_time=0, requested_gpus=1, total_iterations=1.0)
        for root in (squatted, link):
            ex = harness.executor(cluster, [spec], run_root=root)
            engine = Engine(cluster, make_policy("fifo"), ex, sample_interval_s=None)
            with pytest.raises(Exception, match=r"run root .* refused") as err:
                engine.run()
            assert "owned by uid" in str(err.value) or "symlink" in str(err.value)
            ex.shutdown(stop_jobs=True)
        assert victim.poll() is None, "the planted PID was signalled"
        assert not any(p.name.startswith(".sidecar") for p in squatted.iterdir())
    finally:
        victim.kill()
        victim.wait()


def test_a_run_root_open_to_others_is_refused_and_a_new_one_is_private(harness: Harness) -> None:
    cluster = cluster_of(["p1"], 2)
    spec = JobSpec(id="private", submit_time=0, requested_gpus=1, total_iterations=1.0)
    open_root = harness.tmp / "open-runs"
    open_root.mkdir()
    open_root.chmod(0o777)
    ex = harness.executor(cluster, [spec], run_root=open_root)
    with pytest.raises(Exception, match="mode 777 lets others in"):
        Engine(cluster, make_policy("fifo"), ex, sample_interval_s=None).run()
    ex.shutdown(stop_jobs=True)
    fresh = harness.tmp / "fresh" / "runs"
    ex = harness.executor(cluster, [spec], run_root=fresh)
    engine = Engine(cluster, make_policy("fifo"), ex, sample_interval_s=None)
    engine.run()
    assert engine.result().jobs[0].finish_time is not None
    assert fresh.stat().st_mode & 0o777 == 0o700


# --------------------------------------------------------------------------- end to end


def test_elastic_jobs_end_to_end_grow_shrink_preempt(harness: Harness) -> None:
    """Ten elastic stand-in jobs on 2 x 4 GPUs under AFS-P (SRTF if AFS-P is absent).

    The arrivals oversubscribe the cluster (AFS-P shrinks running jobs for newcomers and
    time-slices when jobs outnumber GPUs), completions let survivors grow, and node2 is drained
    at t=6 s and returned at t=9 s (elastic jobs on it shrink or are evicted). Designed in the
    simulator first: in 40 variants with jittered arrivals and restart overheads (0.3-0.9 s)
    every run had >= 3 grows, >= 4 shrinks, >= 3 preemptions and >= 2 multi-node placements.
    """
    policy = "afs-p" if "afs-p" in policy_names() else "srtf"
    jobs = [
        elastic("j0", 0.0, 4, 2, 4, 6),
        elastic("j1", 0.0, 2, 1, 4, 5),
        elastic("j2", 0.5, 2, 1, 2, 4),
        elastic("j3", 1.0, 1, 1, 2, 3),
        elastic("j4", 2.0, 2, 2, 4, 4),
        elastic("j5", 2.5, 1, 1, 1, 2),
        elastic("j6", 3.0, 3, 2, 4, 4),
        elastic("j7", 3.5, 1, 1, 2, 3),
        elastic("j8", 4.0, 2, 1, 2, 3),
        elastic("j9", 4.5, 4, 2, 4, 3),
    ]
    cluster = cluster_of(["node1", "node2"], 4)
    events = [
        CapacityChange(time=6.0, change="remove", nodes=("node2",)),
        CapacityChange(time=9.0, change="add", nodes=("node2",)),
    ]
    ex = harness.executor(cluster, jobs, events=events)
    engine = Engine(
        cluster, make_policy(policy), ex, sample_interval_s=None, restart_gate=None
    )  # every planned change, carried out
    t0 = time.monotonic()
    engine.run()
    wall = time.monotonic() - t0
    check_run(engine, ex, jobs)
    kinds = action_kinds(ex)
    preemptions = sum(r.preemptions for r in engine.result().jobs)
    # Whether AFS-P's time-slicing preempts here depends on how long real restarts take on this
    # machine (a loaded one once gave 4 grows, 4 shrinks, 3 evictions and no preemption), so
    # this run asserts that jobs were stopped and resumed at all; the policy-driven preemption
    # has its own deterministic test below.
    assert preemptions >= 1 and kinds.get("preempt", 0) + kinds.get("evict", 0) >= 1, kinds
    if policy != "srtf":
        assert kinds.get("grow", 0) >= 1 and kinds.get("shrink", 0) >= 1, kinds
    assert any(len(a["after_placement"]) > 1 for a in ex.action_log), "a multi-node run"
    assert ex.restart_latencies, "restart latency was measured"
    assert ex.capabilities.restart_latency_s == statistics.median(ex.restart_latencies)
    assert ex.capabilities.resize == "restart" and ex.capabilities.pin_gpus
    print(
        f"\n{policy}: {kinds}, {preemptions} preemptions, wall {wall:.1f} s, restart "
        f"latency median {ex.capabilities.restart_latency_s:.2f} s"
    )


def test_policy_preemption_checkpoints_and_resumes_the_job(harness: Harness) -> None:
    """SRTF must preempt a long job for a short one that needs every GPU, whatever the
    machine's speed (remaining ~60 s against 1 s): the long job is checkpoint-stopped, the short
    one runs, and the long one resumes from its checkpoint and completes exactly its work."""
    jobs = [rigid("long", 0.0, 4, 10.0), rigid("short", 3.0, 4, 1.0)]
    cluster = cluster_of(["node1"], 4)
    launcher = harness.standin()
    ex = harness.executor(cluster, jobs, launcher=launcher)
    engine = Engine(
        cluster, make_policy("srtf"), ex, sample_interval_s=None, restart_gate=None
    )  # every planned change, carried out
    engine.run()
    check_run(engine, ex, jobs)
    kinds = action_kinds(ex)
    records = {r.job_id: r for r in engine.result().jobs}
    assert kinds.get("preempt", 0) == 1 and records["long"].preemptions == 1, kinds
    assert records["short"].preemptions == 0
    assert records["short"].finish_time < records["long"].finish_time  # type: ignore[operator]
    # Two committed runs, the first ended by the checkpoint signal — or one, when a loaded
    # machine had not even started the long job's process by the time the short one arrived
    # (nothing to checkpoint then); either way the runs tile its work exactly (check_run).
    runs = segments(launcher, "long", ranks=1)[0]
    assert runs[-1]["reason"] == "complete" and len(runs) <= 2, runs
    if len(runs) == 2:
        assert runs[0]["reason"].startswith("signal"), runs


def test_crashed_training_process_is_restarted_from_its_checkpoint(harness: Harness) -> None:
    """SIGKILL the stand-in mid-run: the sidecar reports the crash, the executor restarts the
    job from its last periodic checkpoint and wakes the engine, the job still completes and
    the lost tail is accounted as lost work, never as progress."""
    jobs = [rigid("crash", 0.0, 2, 8.0), rigid("calm", 0.0, 2, 2.0)]
    cluster = cluster_of(["node1"], 4)
    launcher = harness.standin(checkpoint_interval_s=0.3)
    ex = harness.executor(cluster, jobs, launcher=launcher)

    def kill() -> None:
        state = sidecar_state(ex, "crash", "node1")
        os.kill(state["child_pid"], signal.SIGKILL)

    crash = When(
        "crash running past its first checkpoint",
        lambda: (
            _running_on(ex, "crash", ["node1"]) is not None
            and any(harness.state.glob("crash*.ckpt"))
        ),
        kill,
    )
    engine = Engine(cluster, make_policy("fifo"), ex, sample_interval_s=None)
    engine.run()
    crash.check()
    check_run(engine, ex, jobs)
    state = sidecar_state(ex, "crash", "node1")
    assert state["launches"] == 2, "the wrapper stayed; only the training process restarted"
    events = [
        json.loads(x)
        for x in (Path(ex.job_dir("crash", "node1")) / "events.jsonl").read_text().splitlines()
    ]
    assert any(
        e["event"] == "exit" and e["rc"] == -signal.SIGKILL and not e["requested"] for e in events
    )
    assert any(getattr(e, "name", "") == "restart:crash" for _, e in ex.event_log)
    record = {r.job_id: r for r in engine.result().jobs}["crash"]
    # lost = last reported progress - checkpoint: about one checkpoint interval of work (0.3 s
    # at 2 GPUs), plus however late a loaded machine ran the stand-in's timer (up to 1 s here)
    assert 0.0 <= record.lost_iterations <= 2 * RATE * (0.3 + 1.0)
    assert ex.restarts_of("crash") == 1


def test_sshd_killed_node_fails_jobs_move_and_node_recovers(harness: Harness) -> None:
    """node3's sshd and its sessions are SIGKILLed mid-run. Its sidecar loses its lease and
    checkpoint-stops its job (fencing); only then does the executor report NodeFailure, the
    engine restarts the job on another node from that checkpoint, and when sshd is back the
    node is cleaned and reported recovered (a 6-GPU job needs it)."""
    names = ["node1", "node2", "node3"]
    cluster = cluster_of(names, 2)
    jobs = [
        rigid("a", 0.0, 2, 3.0),
        rigid("b", 0.0, 2, 3.0),
        rigid("c", 0.0, 2, 5.0),
        rigid("d", 7.5, 6, 1.0),
    ]
    ex = harness.executor(cluster, jobs)
    lab = harness.lab
    placed: dict[str, str] = {}

    def crash() -> None:
        placed.update(
            {
                j: n
                for n in names
                for j in ("a", "b", "c")
                if Path(ex.job_dir(j, n), "state.json").exists()
            }
        )
        lab.stop_node(lab.node(placed["c"]), hard=True)

    def failed() -> bool:
        return "c" in placed and any(
            type(e).__name__ == "NodeFailure" and getattr(e, "node", None) == placed["c"]
            for _, e in list(ex.event_log)
        )

    cut = When("c running", lambda: _running_on(ex, "c", names) is not None, crash)
    back = When("c's node reported failed", failed, lambda: lab.start_node(lab.node(placed["c"])))
    engine = Engine(cluster, make_policy("fifo"), ex, sample_interval_s=None)
    engine.run()
    cut.check()
    back.check()
    check_run(engine, ex, jobs)
    victim = placed["c"]
    kinds = [(type(e).__name__, getattr(e, "node", None)) for _, e in ex.event_log]
    assert ("NodeFailure", victim) in kinds and ("NodeRecovery", victim) in kinds
    assert kinds.index(("NodeFailure", victim)) < kinds.index(("NodeRecovery", victim))
    fenced = sidecar_state(ex, "c", victim)
    assert fenced["phase"] == "fenced", "the cut-off sidecar stopped its job by itself"
    fence_time = fenced["stops"][-1]["t_exit"]
    elsewhere = [n for n in names if n != victim and Path(ex.job_dir("c", n)).exists()]
    assert elsewhere, "c was restarted on another node"
    restarted = [
        json.loads(x)
        for x in (Path(ex.job_dir("c", elsewhere[0])) / "events.jsonl").read_text().splitlines()
    ]
    assert restarted[0]["event"] == "start" and restarted[0]["t"] > fence_time
    assert {r.job_id: r for r in engine.result().jobs}["c"].preemptions == 1


def test_engine_restart_reconciles_without_losing_jobs(harness: Harness) -> None:
    """Engine A is stopped mid-run (connections dropped, nothing stopped). Engine B, with a new
    executor on the same run root, adopts the jobs still running where it would place them
    (no restart), recognises the job that completed meanwhile, and runs the rest."""
    cluster = cluster_of(["node1", "node2"], 4)
    # r1 and r2 have 20 s of work so that the hand-over (detach, a new executor, its scan of
    # the nodes) finds them still running. Adoption also needs the hand-over to end within the
    # sidecars' lease, or they fence their jobs (docs/ssh.md). With the harness's 1.5 s lease
    # that was a wall-clock deadline: at load average 13 the new executor renewed it 1.8-3.2 s
    # after the old one's last request (3.2-4.6 s before the install step renewed it), and
    # r1/r2 fenced themselves (adopted == {r0} or {r0, r2}). So this test, about adoption,
    # gets the product's default lease; fencing at a hand-over has its own test
    # (test_a_handover_slower_than_the_lease_restarts_the_fenced_jobs_and_says_so).
    jobs = [
        rigid("r0", 0.0, 2, 1.0),
        rigid("r1", 0.0, 4, 20.0),
        rigid("r2", 0.0, 2, 20.0),
        rigid("r3", 8.0, 2, 2.0),
    ]
    first = harness.executor(cluster, jobs, lease_s=30.0)

    def r0_done_r1_r2_running() -> bool:
        r0 = Path(first.job_dir("r0", "node2"), "state.json")
        return (
            r0.exists()
            and json.loads(r0.read_text()).get("phase") == "completed"
            and _running_on(first, "r1", ["node1"]) == "node1"
            and _running_on(first, "r2", ["node2"]) == "node2"
        )

    handover = When("r0 done, r1 and r2 running", r0_done_r1_r2_running, first.end_run)
    engine = Engine(
        cluster, make_policy("fifo"), first, sample_interval_s=None, restart_gate=None
    )  # every planned change, carried out
    engine.run()  # returns when asked: r1, r2 running, r0 done, r3 not submitted yet
    handover.check()
    pids = {
        j: sidecar_state(first, j, n)["child_pid"] for j, n in (("r1", "node1"), ("r2", "node2"))
    }
    first.detach()  # the engine "crashes": sidecars and jobs keep running
    second = harness.executor(cluster, jobs, lease_s=30.0)
    engine = Engine(
        cluster, make_policy("fifo"), second, sample_interval_s=None, restart_gate=None
    )  # every planned change, carried out
    engine.run()
    check_run(engine, second, jobs)
    assert second.adopted == {"r0", "r1", "r2"}, (
        f"fenced during the hand-over: {sorted(second.fenced_at_start)}, lease age when the "
        f"new executor renewed it: {second.nodes.lease_ages}"
    )
    for job_id, node in (("r1", "node1"), ("r2", "node2")):
        state = sidecar_state(second, job_id, node)
        assert state["launches"] == 1, f"{job_id} was adopted, not restarted"
        per_rank = segments(second.launcher, job_id)  # type: ignore[arg-type]
        assert [s["reason"] for s in per_rank[0]] == ["complete"]
        assert pids[job_id] not in (None, 0)
    assert [s["reason"] for s in segments(second.launcher, "r0")[0]] == ["complete"]


def test_the_first_command_of_a_connection_renews_the_lease(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A (re)connected engine renews the node's lease in its first command, the install step,
    before the agent starts. The agent's start-up (a second Python start-up on the node) used to
    count against the lease: at an engine hand-over under load the gap exceeded ``lease_s`` and
    the sidecars fenced the very jobs the new engine was about to adopt. Here the lease is made
    100 s old by hand, then the connection is re-opened and only the install step runs."""
    ex = harness.executor(cluster_of(["node1"], 2), [])
    ex._run(ex.nodes.ensure_uploaded("node1"))  # creates the run root, installs the sidecar
    lease = Path(ex.lease_file("node1"))
    lease.touch(exist_ok=True)
    stale = time.time() - 100.0
    os.utime(lease, (stale, stale))
    ex.pool.drop("node1")  # the next command reconnects: the install step runs again
    before = lease.stat().st_mtime
    with caplog.at_level("INFO", logger="gpuplan.executors.ssh.executor"):
        ex._run(ex.nodes.ensure_uploaded("node1"))
    assert not ex.nodes._agents, "no agent has started: the install step renewed the lease"
    assert lease.stat().st_mtime > before + 50.0, "the lease was not renewed"
    assert ex.nodes.lease_ages["node1"] == pytest.approx(100.0, abs=30.0)
    assert "node1: lease renewed after 1" in caplog.text  # ~100 s
    # Never through a symlink, even inside the verified run root: the run stops instead.
    victim = harness.tmp / "victim"
    victim.write_text("")
    os.utime(victim, (stale, stale))
    lease.unlink()
    lease.symlink_to(victim)
    ex.pool.drop("node1")
    with pytest.raises(UnsafeRunRoot, match="lease file"):
        ex._run(ex.nodes.ensure_uploaded("node1"))
    assert victim.stat().st_mtime == pytest.approx(stale)
    fresh = harness.executor(cluster_of(["node1"], 2), [], run_root=harness.tmp / "fresh")
    fresh._run(fresh.nodes.ensure_uploaded("node1"))
    assert fresh.nodes.lease_ages["node1"] is None  # a new run root had no lease: no warning
    assert Path(fresh.lease_file("node1")).is_file()


def test_a_handover_slower_than_the_lease_restarts_the_fenced_jobs_and_says_so(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """When a new engine reaches a node only after its lease ran out, the node's sidecars have
    fenced (checkpoint-stopped) their jobs: those cannot be adopted, they restart from their
    checkpoints, and the executor says why (``fenced_at_start``, a warning) instead of leaving
    an unexplained "not adopted" (how the hand-over test's flakiness under load looked)."""
    cluster = cluster_of(["node1"], 4)
    jobs = [rigid("f1", 0.0, 2, 8.0)]
    first = harness.executor(cluster, jobs)
    handover = When(
        "f1 running", lambda: _running_on(first, "f1", ["node1"]) == "node1", first.end_run
    )
    Engine(cluster, make_policy("fifo"), first, sample_interval_s=None, restart_gate=None).run()
    handover.check()
    first.detach()  # the engine "crashes"; no engine renews node1's lease from now on
    deadline = time.monotonic() + 120.0  # generous: "never", not "slow"
    while sidecar_state(first, "f1", "node1")["phase"] != "fenced":
        assert time.monotonic() < deadline, "the sidecar never fenced its job"
        time.sleep(0.05)
    second = harness.executor(cluster, jobs)
    engine = Engine(cluster, make_policy("fifo"), second, sample_interval_s=None, restart_gate=None)
    with caplog.at_level("WARNING", logger="gpuplan.executors.ssh.executor"):
        engine.run()
    check_run(engine, second, jobs)  # nothing lost, nothing run twice
    assert second.fenced_at_start == {"f1"}
    assert "f1" not in second.adopted
    age = second.nodes.lease_ages["node1"]
    assert age is not None and age > second.settings.lease_s
    assert "fenced themselves before this executor renewed" in caplog.text
    reasons = [s["reason"] for s in segments(second.launcher, "f1")[0]]  # type: ignore[arg-type]
    assert reasons[-1] == "complete" and len(reasons) >= 2, reasons  # fenced, then resumed
    assert set(reasons[:-1]) == {"signal:SIGUSR1"}, reasons  # every stop a checkpoint-stop
