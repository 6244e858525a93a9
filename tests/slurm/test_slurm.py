"""The Slurm executor, its CLI adapter, the job_submit hook and the lab — against a REAL Slurm.

The session fixture starts a 4-node x 4-GPU Slurm 22.05 cluster through
``tests.labs.slurm.lab`` (munged + slurmctld + 4 ``slurmd -N``, fake GPUs, the shipped
``job_submit.lua``). Outside CI a machine without root/apt skips these tests with the reason;
under CI (``CI=true``) the same condition fails them. The first block are unit tests of parsing
and argv building that need no cluster.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplan.executors.slurm.cli import (
    AccessDenied,
    ControllerUnavailable,
    InvalidJobId,
    InvalidNodeCount,
    JobBusy,
    JobNotPending,
    NodeDown,
    SlurmCli,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SubmitRejected,
    classify,
    compress_hostlist,
    expand_hostlist,
    gpus_in_tres,
)
from gpuplan.executors.slurm.executor import (
    LaunchContext,
    file_key,
    job_name,
    parse_comment,
    standin_command,
)
from gpuplan.solver_core.registry import make_policy
from tests.labs import CHECKOUT
from tests.labs.slurm.lab import LabConfig, LabError, SlurmLab
from tests.labs.slurm.lab_config import JOB_ID_BAND
from tests.labs.slurm.lab_render import render_files

from .. import slurm_fixtures as fx

# ---------------------------------------------------------------------------------------- unit


@pytest.mark.parametrize(
    ("message", "cls"),
    [
        (
            "squeue: error: Unable to contact slurm controller (connect failure)",
            ControllerUnavailable,
        ),
        (
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
            "(connect failure)",
            ControllerUnavailable,
        ),
        (
            "Access/permission denied for job 1\nslurm_suspend error: Access/permission denied",
            AccessDenied,
        ),
        (
            "Invalid job id specified for job 4\nslurm_suspend error: Invalid job id specified",
            InvalidJobId,
        ),
        ("Job is no longer pending execution for job 3", JobNotPending),
        (
            "Job update not available right now, the DB index is being set, try again in a bit "
            "for job 4",
            JobBusy,
        ),
        ("Node count specification invalid", InvalidNodeCount),
        (
            "sbatch: error: Batch job submission failed: Requested node configuration is not "
            "available",
            NodeDown,
        ),
        (
            "sbatch: error: gpuplan: GPU request 6 is outside the job's range min=1 max=4\n"
            "sbatch: error: Batch job submission failed: Unspecified error",
            SubmitRejected,
        ),
        ("something Slurm never said", SlurmError),
    ],
)
def test_failure_messages_map_to_typed_errors(message: str, cls: type[SlurmError]) -> None:
    assert classify(message) is cls


def test_lab_config_rejects_impossible_shapes() -> None:
    with pytest.raises(LabError, match="nodes must be"):
        LabConfig(nodes=0)
    with pytest.raises(LabError, match="gpus_per_node"):
        LabConfig(gpus_per_node=65)


def test_labs_under_different_roots_get_different_ports() -> None:
    """Two test runs on one machine (or a developer's lab beside CI's) must never share a
    port: a shared port makes one lab restart the other's daemons."""
    default = LabConfig()
    assert (default.ctld_port, default.slurmd_port0) == (6917, 17101)
    roots = [
        Path("/tmp/gpuplan-slurmlab-hexec"),
        Path("/tmp/ci/lab"),
        Path("/srv/lab-a"),
        Path("/srv/lab-b"),
        Path("/root/gpuplan-lab"),
    ]
    ports = {LabConfig(root=r).ctld_port for r in roots} | {6917}
    assert len(ports) == len(roots) + 1
    assert LabConfig(root=roots[0]).ctld_port == LabConfig(root=roots[0]).ctld_port
    # derived ports stay below the ephemeral range (32768+), which outgoing connections take
    for n in range(2000):
        cfg = LabConfig(root=Path(f"/tmp/gpuplan-slurmlab-{n}"), nodes=64)
        assert cfg.slurmd_port0 + cfg.nodes - 1 < 32768 and cfg.ctld_port + 3 < 32768
    explicit = LabConfig(root=roots[0], ctld_port=7001, slurmd_port0=18001)
    assert (explicit.ctld_port, explicit.slurmd_port0) == (7001, 18001)


def test_labs_under_different_roots_number_jobs_in_disjoint_bands() -> None:
    """cgroup process tracking puts a job in ``slurm_<node>/uid_<u>/job_<id>`` whatever the lab;
    two labs numbering from 1 would share cgroups and one job's end would kill the other's
    (a benchmark's job was SIGKILLed so). Each root's band is disjoint and inside Slurm's
    largest job id; slurm.conf carries it."""
    roots = [
        Path("/tmp/gpuplan-slurmlab-hexec"),
        Path("/tmp/ci/lab"),
        Path("/srv/lab-a"),
        Path("/srv/lab-b"),
        Path("/root/gpuplan-lab"),
    ]
    bands = [LabConfig()] + [LabConfig(root=r) for r in roots]
    assert bands[0].first_job_id == 1
    starts = sorted(c.first_job_id for c in bands)
    assert all(b - a >= JOB_ID_BAND for a, b in itertools.pairwise(starts))
    assert starts[-1] + JOB_ID_BAND - 1 <= 67_043_328
    conf = render_files(bands[2], Path("/srv/x"), "off", Path("/srv/x/wake"))["slurm.conf"]
    first = bands[2].first_job_id
    assert f"FirstJobId={first}\n" in conf and f"MaxJobId={first + JOB_ID_BAND - 1}\n" in conf


@pytest.mark.parametrize("others_running", [True, False])
def test_lab_cleanup_removes_only_its_own_jobs_cgroups(
    tmp_path: Path, others_running: bool
) -> None:
    """A lab's teardown must not remove another lab's job directories in the shared cgroup
    tree (that made a benchmark job fail to start); while another lab's daemons run, the
    shared ``uid_*``/``slurm_<node>`` levels stay too. (Directories stand in for cgroups.)"""
    lab = SlurmLab(LabConfig(root=tmp_path / "lab-a"))
    mine, theirs = lab.config.first_job_id, lab.config.first_job_id + JOB_ID_BAND + 5
    top = tmp_path / "cg" / "freezer" / "slurm_node1"
    uid = top / "uid_1001"
    for job in (mine, mine + 7, theirs, 12):
        (uid / f"job_{job}" / "step_batch").mkdir(parents=True)
    lab._clean_cgroups(tmp_path / "cg", others_running=others_running)
    if others_running:
        assert sorted(p.name for p in uid.iterdir()) == sorted([f"job_{theirs}", "job_12"])
        assert (uid / f"job_{theirs}" / "step_batch").is_dir()
    else:  # the last lab on the machine leaves no slurm_<node> tree behind
        assert not top.exists()


def test_lab_priority_plugins() -> None:
    """The benchmark's second fair baseline: multifactor weighting age and size."""
    basic = render_files(LabConfig(), Path("/srv/x"), "off", Path("/srv/x/wake"))["slurm.conf"]
    multi = render_files(
        LabConfig(priority="multifactor"), Path("/srv/x"), "off", Path("/srv/x/wake")
    )["slurm.conf"]
    assert "PriorityType=priority/basic\n" in basic and "PriorityWeight" not in basic
    for line in (
        "PriorityType=priority/multifactor",
        "PriorityWeightAge=1000",
        "PriorityWeightJobSize=1000",
        "PriorityFavorSmall=YES",
    ):
        assert line + "\n" in multi


def test_hostlists_and_tres_strings() -> None:
    assert expand_hostlist("node[1-3,5],gpu07") == ["node1", "node2", "node3", "node5", "gpu07"]
    assert expand_hostlist("gpu[08-10]") == ["gpu08", "gpu09", "gpu10"]
    assert expand_hostlist("") == []
    assert compress_hostlist(["node10", "node2", "node2"]) == "node2,node10"
    assert gpus_in_tres("gres:gpu:a100:2") == 2
    assert gpus_in_tres("gres:gpu:3") == 3
    assert gpus_in_tres("gpu:a100:4(IDX:0-3)") == 4
    assert gpus_in_tres("gres/gpu=8,cpu=2") == 8
    assert gpus_in_tres("") == 0


def test_records_parse_both_json_schemas() -> None:
    v38 = {
        "job_id": 7,
        "name": "x",
        "job_state": "PENDING",
        "state_reason": "JobHeldUser",
        "nodes": "node[1-2]",
        "priority": 0,
        "restart_cnt": 2,
        "tres_per_node": "gres:gpu:a100:2",
        "comment": "gpuplan:id=a",
        "exit_code": 0,
    }
    job = SlurmJob.from_json(v38)
    assert (job.job_id, job.state, job.nodes, job.held, job.restart_count) == (
        7,
        "PENDING",
        ("node1", "node2"),
        True,
        2,
    )
    v40 = {
        **v38,
        "job_state": ["RUNNING"],
        "priority": {"set": True, "number": 5},
        "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}},
    }
    job = SlurmJob.from_json(v40)
    assert (job.state, job.priority, job.held, job.active, job.exit_code) == (
        "RUNNING",
        5,
        False,
        True,
        0,
    )
    node = SlurmNode.from_json(
        {"name": "node2", "state": "idle", "state_flags": ["DRAIN"], "gres": "gpu:a100:4"}
    )
    assert (node.gpus, node.gpu_type, node.usable) == (4, "a100", False)
    assert SlurmNode.from_json({"name": "n", "state": ["MIXED"], "gres": "gpu:8"}).usable


def test_commands_are_argument_lists_never_shell_strings(tmp_path: Path) -> None:
    cli = SlurmCli(bindir=tmp_path)
    with pytest.raises(TypeError):
        cli.run("scontrol ping")  # type: ignore[arg-type]
    # A fake squeue that prints its argv: every argument arrives as one verbatim element.
    fake = tmp_path / "squeue"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        "print(json.dumps({'errors': [], 'jobs': [], 'argv': sys.argv[1:]}))\n"
    )
    fake.chmod(0o755)
    data = cli.run_json(["squeue", "--json", "$(touch /tmp/gpuplan-never)", "a b;c"])
    assert data["argv"] == ["--json", "$(touch /tmp/gpuplan-never)", "a b;c"]
    assert not Path("/tmp/gpuplan-never").exists()


def test_json_errors_mean_controller_unavailable_not_no_jobs(tmp_path: Path) -> None:
    """22.05's squeue --json exits 0 with an errors list and no jobs when slurmctld is down."""
    fake = tmp_path / "squeue"
    fake.write_text(
        f"#!{sys.executable}\nimport json\nprint(json.dumps({{'errors': [{{"
        "'description': 'Failed while looking for jobs', 'error_number': -1, "
        "'error': 'Unspecified error', 'source': 'slurm_load_jobs'}], 'jobs': []}))\n"
    )
    fake.chmod(0o755)
    with pytest.raises(ControllerUnavailable, match="Failed while looking for jobs"):
        SlurmCli(bindir=tmp_path).jobs()


def test_hostile_ids_get_safe_files_names_and_reversible_comments() -> None:
    hostile = "a'b\"$(touch /tmp/x)`id`;\nrm -rf / ../../etc"
    key = file_key(hostile)
    assert "/" not in key and "\n" not in key and "$" not in key and not key.startswith(".")
    assert key != file_key(hostile + " ")
    name = job_name(hostile)
    assert "\n" not in name and "$(touch /tmp/x)" in name and "`id`;" in name
    from urllib.parse import quote

    comment = f"gpuplan:run=r1;id={quote(hostile, safe='')};min=1;max=4"
    assert parse_comment(comment) == {"run": "r1", "id": hostile, "min": "1", "max": "4"}
    spec = fx.job(hostile, 0.0, 4.0, 1, 1, 1)
    argv = standin_command(script="/s.py")(LaunchContext(spec, key, Path("/st"), 1.0))
    assert argv[1:3] == ["/s.py", f"--job-id={key}"] and "--rate-per-gpu" in argv
    # an id that starts with "-" stays a value, not an option (it used to crash-loop)
    dash = standin_command(script="/s.py")(
        LaunchContext(fx.job("-x", 0.0, 4.0, 1, 1, 1), "-x", Path("/st"), 1.0)
    )
    assert dash[2] == "--job-id=-x"


# ---------------------------------------------------------------------------------------- lab


@pytest.fixture(scope="session")
def lab() -> Iterator[SlurmLab]:
    t0 = time.monotonic()
    session = fx.lab_session()
    lab = next(session)
    print(f"\n[slurm lab up in {time.monotonic() - t0:.1f} s]")
    yield lab
    session.close()  # runs lab_session's finally: down() if we started it, then unlock


@pytest.fixture(scope="session")
def gpuuser(lab: SlurmLab) -> str:
    fx.ensure_user(fx.UNPRIVILEGED_USER)
    return fx.UNPRIVILEGED_USER


def _squeue(lab: SlurmLab, job_id: int) -> SlurmJob:
    job = lab.cli().job(job_id)
    assert job is not None
    return job


def test_lab_runs_four_gpu_nodes_and_up_is_idempotent(lab: SlurmLab) -> None:
    nodes = {n.name: n for n in lab.cli().nodes()}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert all(n.gpus == 4 and n.gpu_type == "a100" and n.usable for n in nodes.values())
    before = json.loads((lab.root / "run" / "started.json").read_text())
    t0 = time.monotonic()
    lab.up()
    assert time.monotonic() - t0 < 5.0
    after = json.loads((lab.root / "run" / "started.json").read_text())
    assert {k: v["pid"] for k, v in after.items()} == {k: v["pid"] for k, v in before.items()}
    status = subprocess.run(
        [sys.executable, "-m", "tests.labs.slurm.lab", "status", "--root", str(lab.root)],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        check=True,
    )
    processes = json.loads(status.stdout)["processes"]
    # every daemon passes the identity check down() applies before a signal (exe through
    # Debian's alternatives, exact argv, uid), so down() can stop them all
    assert {k for k, v in processes.items() if v["alive"]} >= {
        "slurmctld",
        *(f"slurmd-{n}" for n in lab.node_names),
    }
    root = lab.root.lstat()
    assert (root.st_uid, stat.S_IMODE(root.st_mode)) == (os.geteuid(), 0o711)
    assert (lab.root / "lab.lock").is_file()  # the session's lock, inside the private root


def test_a_second_lab_stops_only_what_it_started(lab: SlurmLab, tmp_path: Path) -> None:
    """A 1-node lab next to the session's: its down() must leave the session lab (and the
    munged it did not start) running."""
    mini = SlurmLab(
        LabConfig(
            root=tmp_path / "mini",
            nodes=1,
            gpus_per_node=2,
            node_prefix="mini",
            ctld_port=6927,
            slurmd_port0=17201,
        )
    )
    mini.up(timeout_s=60)
    try:
        started = json.loads((mini.root / "run" / "started.json").read_text())
        assert set(started) == {"slurmctld", "slurmd-mini1"}  # munge was already working
        assert [n.name for n in mini.cli().nodes()] == ["mini1"]
    finally:
        mini.down()
    assert not mini.is_up()
    assert lab.is_up()
    job_id = lab.cli().sbatch(None, options=["--gres=gpu:1", "--output=/dev/null", "--wrap=true"])
    deadline = time.time() + 30
    while _squeue(lab, job_id).state != "COMPLETED":
        assert time.time() < deadline, _squeue(lab, job_id)
        time.sleep(0.2)


def test_a_lab_with_another_configuration_is_refused_not_stopped(
    lab: SlurmLab, tmp_path: Path
) -> None:
    """A developer's lab (owner "cli") running with another configuration in the same root is
    never torn down by a test session's up(): it refuses with a LabError naming the root."""
    shape = {
        "root": tmp_path / "dev",
        "nodes": 1,
        "node_prefix": "dev",
        "ctld_port": 6928,
        "slurmd_port0": 17301,
    }
    dev = SlurmLab(LabConfig(gpus_per_node=2, **shape))  # type: ignore[arg-type]
    dev.up(timeout_s=60)  # owner "cli"
    try:
        other = SlurmLab(LabConfig(gpus_per_node=4, **shape))  # type: ignore[arg-type]
        with pytest.raises(LabError, match="another configuration"):
            other.up(timeout_s=60, owner=fx.OWNER)
        assert dev.is_up() and [n.gpus for n in dev.cli().nodes()] == [2]
    finally:
        dev.down()
    assert not dev.is_up()


# ------------------------------------------------------------------------- lab security (issue 23)
# The attacks of issue 23 against a lab root another local user prepared. They need root (to act
# as another user) but no running cluster: each lab here is configured, never started.


@pytest.fixture
def hostile() -> pwd.struct_passwd:
    """The unprivileged account that plays the hostile local user."""
    if os.geteuid() != 0:
        fx.unavailable("acting as another local user needs root")
    return fx.ensure_user(fx.UNPRIVILEGED_USER)


def _plant_lab(root: Path) -> None:
    """What a squatter leaves in a lab root: a config link to a root-owned file, an epilog of
    their own (slurmctld would run it as root) and a manifest of PIDs for down() to kill."""
    for sub in ("etc", "run"):
        (root / sub).mkdir(parents=True)
    (root / "etc" / "slurm.conf").symlink_to("/etc/shadow")
    (root / "etc" / "epilog_wake.sh").write_text("#!/bin/sh\ncp /bin/sh /tmp/rootshell\n")


def _as_other_user(user: pwd.struct_passwd, argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        cwd="/",
        stdin=subprocess.DEVNULL,
    )


def _start_ticks(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rfind(")") + 2 :].split()[19])


def _lab_at(root: Path) -> SlurmLab:
    return SlurmLab(
        LabConfig(
            root=root,
            nodes=1,
            gpus_per_node=2,
            node_prefix="plant",
            ctld_port=6937,
            slurmd_port0=17401,
            install=False,
        )
    )


def _chown_tree(root: Path, user: pwd.struct_passwd) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, user.pw_uid, user.pw_gid)


def test_a_root_another_user_created_is_refused_everywhere(
    tmp_path: Path, hostile: pwd.struct_passwd
) -> None:
    """Issue 23: a local user who creates the lab root first must get nothing: up, down,
    status, env and the lock each refuse in one line naming the root, nothing in it is written
    or followed, and no PID from its manifest is signalled."""
    root = tmp_path / "lab"
    _plant_lab(root)
    victim = _as_other_user(hostile, ["sleep", "600"])
    try:
        (root / "run" / "started.json").write_text(
            json.dumps(
                {
                    "slurmctld": {
                        "pid": victim.pid,
                        "start_ticks": _start_ticks(victim.pid),
                        "argv": ["sleep", "600"],
                    }
                }
            )
        )
        _chown_tree(root, hostile)
        before = {p: p.lstat() for p in root.rglob("*")}
        lab = _lab_at(root)
        for name, action in [
            ("up", lambda: lab.up(timeout_s=5)),
            ("down", lab.down),
            ("status", lab.status),
            ("env", lambda: lab.env),
            ("is_up", lab.is_up),
            ("write_config", lab.write_config),
        ]:
            with pytest.raises(LabError, match="belongs to uid") as err:
                action()
            assert str(root) in str(err.value) and "\n" not in str(err.value), name
        with pytest.raises(LabError, match="belongs to uid"), lab.exclusive(timeout_s=1):
            pass
        cli = subprocess.run(
            [sys.executable, "-m", "tests.labs.slurm.lab", "down", "--root", str(root)],
            cwd=CHECKOUT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 1 and len(cli.stderr.strip().splitlines()) == 1, cli.stderr
        assert "belongs to uid" in cli.stderr
        assert victim.poll() is None, "down() signalled a PID from a foreign manifest"
        after = {p: p.lstat() for p in root.rglob("*")}
        assert {p: (s.st_ino, s.st_mtime_ns) for p, s in after.items()} == {
            p: (s.st_ino, s.st_mtime_ns) for p, s in before.items()
        }
        assert not (root / "lab.lock").exists()
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize(
    "shape", ["world-writable", "group-writable", "symlink", "file", "parent-writable"]
)
def test_a_root_others_can_write_or_redirect_is_refused(tmp_path: Path, shape: str) -> None:
    root = tmp_path / "lab"
    expect = {
        "world-writable": "writable by group or others",
        "group-writable": "writable by group or others",
        "symlink": "symbolic link",
        "file": "not a directory",
        "parent-writable": "writable by others and not sticky",
    }[shape]
    if shape == "symlink":
        (tmp_path / "elsewhere").mkdir()
        root.symlink_to(tmp_path / "elsewhere")
    elif shape == "file":
        root.write_text("")
    elif shape == "parent-writable":
        parent = tmp_path / "open"
        parent.mkdir()
        parent.chmod(0o777)
        root = parent / "lab"
    else:
        root.mkdir()
        root.chmod(0o777 if shape == "world-writable" else 0o770)
    with pytest.raises(LabError, match=expect):
        _lab_at(root).write_config()
    if shape == "symlink":
        assert not list((tmp_path / "elsewhere").iterdir())


def test_a_new_root_is_private_and_planted_links_are_replaced_not_followed(
    tmp_path: Path, hostile: pwd.struct_passwd
) -> None:
    root = tmp_path / "lab"
    lab = _lab_at(root)
    lab.write_config()
    st = root.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o711)
    # Links and foreign files inside (a root left by an older version, or an operator's
    # mistake): every write replaces the entry itself and never follows it.
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.unlink(lab.conf_path)
    lab.conf_path.symlink_to(victim)
    epilog = root / "etc" / "epilog_wake.sh"
    shipped = epilog.read_text()
    epilog.write_text("#!/bin/sh\ncp /bin/sh /tmp/rootshell\n")
    os.chown(epilog, hostile.pw_uid, hostile.pw_gid)
    (root / "run" / "config.sha256").unlink()
    (root / "run" / "config.sha256").symlink_to(victim)
    lab.write_config()
    assert victim.read_text() == "precious\n"
    for path in (lab.conf_path, epilog, root / "run" / "config.sha256"):
        st = path.lstat()
        assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022, path
    assert epilog.read_text() == shipped and stat.S_IMODE(epilog.stat().st_mode) == 0o755
    # slurmctld runs the epilog as root: no directory on its path may be writable by others
    # (a sticky /tmp is fine: nobody can rename our entry in it).
    conf = lab.conf_path.read_text()
    path = Path(
        next(
            line.split("=", 1)[1]
            for line in conf.splitlines()
            if line.startswith("EpilogSlurmctld=")
        )
    )
    assert path == epilog
    for part in [*path.parents, path]:
        st = part.lstat()
        assert st.st_uid == 0 and not stat.S_ISLNK(st.st_mode), part
        assert not st.st_mode & 0o022 or st.st_mode & stat.S_ISVTX, part
    # A directory below the root that others can write, or a link instead of it: refused.
    (root / "etc").chmod(0o777)
    with pytest.raises(LabError, match=r"etc is writable by group or others"):
        lab.write_config()
    (root / "etc").chmod(0o755)
    shutil.rmtree(root / "log")
    (root / "log").symlink_to(tmp_path)
    with pytest.raises(LabError, match=r"log is a symbolic link"):
        lab.write_config()


def test_down_never_signals_a_pid_it_did_not_start(
    tmp_path: Path, hostile: pwd.struct_passwd
) -> None:
    """A manifest naming processes that are not the lab's daemons (another user's, or one of
    root's that is not a Slurm daemon), with their correct start times: down() leaves them
    all running, status() calls them dead."""
    lab = _lab_at(tmp_path / "lab")
    lab.write_config()
    theirs = _as_other_user(hostile, ["sleep", "600"])
    roots = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    try:
        manifest = {
            "slurmctld": {
                "pid": theirs.pid,
                "start_ticks": _start_ticks(theirs.pid),
                "argv": ["slurmctld", "-D", "-f", str(lab.conf_path)],
            },
            "slurmd-plant1": {
                "pid": roots.pid,
                "start_ticks": _start_ticks(roots.pid),
                "argv": ["sleep", "600"],
            },
            "munged": {"pid": theirs.pid, "start_ticks": _start_ticks(theirs.pid)},
        }
        (lab.root / "run" / "started.json").write_text(json.dumps(manifest))
        assert not any(p["alive"] for p in lab.status()["processes"].values())  # type: ignore[union-attr]
        lab.down()
        assert theirs.poll() is None and roots.poll() is None
        # a manifest that is a link is not read at all
        (lab.root / "run" / "started.json").unlink()
        (lab.root / "run" / "started.json").symlink_to(tmp_path / "elsewhere.json")
        with pytest.raises(LabError, match=r"started\.json"):
            lab.down()
        assert theirs.poll() is None and roots.poll() is None
    finally:
        for proc in (theirs, roots):
            proc.kill()
            proc.wait()


def test_the_lab_lock_is_inside_the_root_and_never_followed(
    tmp_path: Path, hostile: pwd.struct_passwd
) -> None:
    lab = _lab_at(tmp_path / "lab")
    with lab.exclusive(timeout_s=5):
        lock = lab.root / "lab.lock"
        assert int(lock.read_text()) == os.getpid() and lock.stat().st_uid == 0
    assert not (tmp_path / "lab.lock").exists()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    lock.unlink()
    lock.symlink_to(victim)
    with pytest.raises(LabError, match="lab lock"), lab.exclusive(timeout_s=1):
        pass
    assert victim.read_text() == "precious\n"
    lock.unlink()
    lock.write_text("")
    os.chown(lock, hostile.pw_uid, hostile.pw_gid)
    with pytest.raises(LabError, match="lab lock"), lab.exclusive(timeout_s=1):
        pass


# ---------------------------------------------------------------------------------------- hook


def test_hook_holds_marks_and_normalises_engine_jobs(lab: SlurmLab, gpuuser: str) -> None:
    env = lab.env
    sub = fx.as_user(
        gpuuser,
        [
            "sbatch",
            "--parsable",
            "--gpus=3",
            "--comment=gpuplan:min=1,max=4",
            "--output=/dev/null",
            "--wrap=sleep 30",
        ],
        env,
    )
    assert sub.returncode == 0, sub.stderr
    assert "held for the GPU engine" in sub.stderr
    job = _squeue(lab, int(sub.stdout.strip()))
    assert job.state == "PENDING" and job.held and job.priority == 0
    # the marker also carries the request's shape (one node x 3 GPUs; no ranks of its own)
    assert job.admin_comment == "gpuplan:held;gpus=3;min=1;max=4;nodes=1;gpn=3"
    assert (job.tres_per_node, job.tres_per_job) == ("gres:gpu:3", "")  # --gpus -> per node

    # Opt-in by partition; 8 GPUs on 4-GPU nodes become 2 nodes x 4.
    sub = fx.as_user(
        gpuuser,
        [
            "sbatch",
            "--parsable",
            "--partition=gpuplan",
            "--gpus=a100:8",
            "--output=/dev/null",
            "--wrap=true",
        ],
        env,
    )
    assert sub.returncode == 0, sub.stderr
    big = _squeue(lab, int(sub.stdout.strip()))
    assert big.held and big.tres_per_node == "gres:gpu:a100:4"
    assert big.raw["node_count"] == 2 and big.admin_comment.endswith(
        "gpus=8;min=8;max=8;nodes=2;gpn=4"
    )

    # A request outside its own elastic range is refused at submit time.
    bad = fx.as_user(
        gpuuser,
        [
            "sbatch",
            "--parsable",
            "--gpus=6",
            "--comment=gpuplan:max=4",
            "--output=/dev/null",
            "--wrap=true",
        ],
        env,
    )
    assert bad.returncode != 0 and "outside the job's range" in bad.stderr

    # Jobs that did not opt in are not touched.
    sub = fx.as_user(
        gpuuser, ["sbatch", "--parsable", "--gpus=1", "--output=/dev/null", "--wrap=true"], env
    )
    plain = _squeue(lab, int(sub.stdout.strip()))
    assert plain.admin_comment == "" and not plain.held
    for j in (job.job_id, big.job_id, plain.job_id):
        lab.cli().cancel(j)
    log = (lab.log_dir / "slurmctld.log").read_text()
    assert "gpuplan job_submit.lua loaded" in log


def test_users_cannot_release_engine_held_jobs(lab: SlurmLab, gpuuser: str) -> None:
    env = lab.env
    sub = fx.as_user(
        gpuuser,
        [
            "sbatch",
            "--parsable",
            "--gpus=1",
            "--comment=gpuplan:min=1,max=2",
            "--output=/dev/null",
            "--wrap=sleep 30",
        ],
        env,
    )
    engine_job = int(sub.stdout.strip())
    sub = fx.as_user(
        gpuuser,
        ["sbatch", "--parsable", "--hold", "--gpus=1", "--output=/dev/null", "--wrap=sleep 30"],
        env,
    )
    own_job = int(sub.stdout.strip())
    try:
        refused = fx.as_user(gpuuser, ["scontrol", "release", str(engine_job)], env)
        assert refused.returncode != 0
        assert "Access/permission denied" in refused.stderr
        assert _squeue(lab, engine_job).held
        refused = fx.as_user(
            gpuuser, ["scontrol", "update", f"JobId={engine_job}", "Priority=100"], env
        )
        assert refused.returncode != 0 and _squeue(lab, engine_job).held
        # Control: the same user may release an ordinary held job of their own ...
        ok = fx.as_user(gpuuser, ["scontrol", "release", str(own_job)], env)
        assert ok.returncode == 0, ok.stderr
        assert not _squeue(lab, own_job).held
        # ... and the operator (root, the engine's identity in the lab) may release both.
        lab.cli().release(engine_job)
        assert not _squeue(lab, engine_job).held
        # Users can still cancel their engine-managed job.
        assert fx.as_user(gpuuser, ["scancel", str(engine_job)], env).returncode == 0
    finally:
        for j in (engine_job, own_job):
            with contextlib.suppress(SlurmError):
                lab.cli().cancel(j)


# ---------------------------------------------------------------------------------------- e2e


def test_elastic_afs_p_end_to_end_grow_shrink_preempt(lab: SlurmLab, tmp_path: Path) -> None:
    """Ten elastic stand-in jobs under the registered AFS-P on three real Slurm nodes."""
    jobs = fx.e2e_workload()
    cluster, executor = fx.make_executor(
        lab, jobs, tmp_path / "state", nodes=fx.E2E_NODES, max_wall_s=240
    )
    assert cluster.total_gpus == 12
    t0 = time.monotonic()
    engine = fx.run(cluster, executor, make_policy("afs-p"))
    wall = time.monotonic() - t0
    print(
        f"\n[e2e: {len(jobs)} jobs in {wall:.1f} s; restart latency "
        f"{executor.capabilities.restart_latency_s:.2f} s]"
    )

    fx.assert_progress_conserved(engine, executor, tmp_path / "state", jobs)
    resizes = [a for a in executor.actions if a.kind == "resize"]
    grows = [a for a in resizes if a.gpus_after > a.gpus_before]
    shrinks = [a for a in resizes if a.gpus_after < a.gpus_before]
    preempts = [a for a in executor.actions if a.kind == "preempt"]
    assert grows and shrinks and preempts, [
        (a.kind, a.job_id, a.gpus_before, a.gpus_after) for a in executor.actions
    ]
    # Each engine job kept one Slurm job id across all its stops and restarts.
    for spec in jobs:
        assert len({s.slurm_id for s in executor.segments_of(spec.id)}) == 1
    # The GPU count the job itself saw (CUDA_VISIBLE_DEVICES) is the planned one.
    single = [s for s in executor.segments if len(s.nodes) == 1 and s.observed_gpus]
    assert single and all(s.observed_gpus == s.gpus for s in single)
    assert any(s.observed_gpus != 4 for s in single)  # really ran at other sizes
    for rec in engine.records:
        assert rec.lost_iterations == pytest.approx(0.0, abs=1e-6)
    assert executor.restart_latencies
    assert executor.capabilities.restart_latency_s == pytest.approx(
        sum(executor.restart_latencies) / len(executor.restart_latencies), abs=1e-3
    )
    assert executor.capabilities.resize == "restart" and not executor.capabilities.pin_gpus
    assert wall < 180


# ---------------------------------------------------------------------------------------- faults


def _standin_pid(key: str) -> int | None:
    """PID of the stand-in process of the job whose file key is ``key`` (it runs under a
    slurmstepd of the lab; argv carries ``--job-id=KEY``)."""
    out = subprocess.run(
        ["pgrep", "-f", f"standin.py --job-id={key} "], capture_output=True, text=True, check=False
    ).stdout.split()
    return int(out[0]) if out else None


def test_crashed_training_process_restarts_from_its_checkpoint(
    lab: SlurmLab, tmp_path: Path
) -> None:
    """SIGKILL a job's training process mid-run (no checkpoint signal): Slurm ends the run,
    the executor sees an unplanned stop, requeues and restarts the job in place from its last
    periodic checkpoint, and the job still finishes with its runs chaining exactly; the tail
    since the checkpoint is lost work, never progress."""
    jobs = [fx.job("crash", 0.0, 24.0, 2, 2, 2), fx.job("calm", 0.0, 12.0, 2, 2, 2)]
    interval = 0.5
    cluster, executor = fx.make_executor(
        lab,
        jobs,
        tmp_path / "state",
        nodes=("node1",),
        max_wall_s=120,
        command=fx.standin_builder(checkpoint_interval_s=interval),
    )
    killed: list[int] = []

    def kill_when_running() -> None:
        key = file_key("crash")
        deadline = time.time() + 60
        while time.time() < deadline:
            pid = _standin_pid(key)
            checkpoint = fx.standin_checkpoint(tmp_path / "state", "crash")
            if pid is not None and checkpoint is not None and checkpoint >= 4.0:
                subprocess.run(["kill", "-KILL", str(pid)], check=False)
                killed.append(pid)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_when_running, daemon=True)
    killer.start()
    engine = fx.run(cluster, executor, make_policy("fifo"))
    killer.join(timeout=5)
    assert killed, "the stand-in was never seen running"
    fx.assert_progress_conserved(engine, executor, tmp_path / "state", jobs)
    crash = [s for s in executor.segments_of("crash")]
    assert any(s.how.startswith("unplanned") for s in crash), [s.how for s in crash]
    assert len({s.slurm_id for s in crash}) == 1  # restarted on the same Slurm job id
    record = {r.job_id: r for r in engine.result().jobs}["crash"]
    # at most one checkpoint interval of work at 2 GPUs (plus polling slack) is lost
    assert 0.0 <= record.lost_iterations <= 2 * 1.0 * (interval + 0.5)


def test_node_down_and_controller_restart_lose_nothing(lab: SlurmLab, tmp_path: Path) -> None:
    """Rigid SRTF (the registered policy). node2 goes DOWN mid-run (Slurm kills and requeues
    its jobs; the engine evicts and replans them), then slurmctld is stopped for 4 s while jobs
    run, then node2 returns. Every job must finish with its work conserved."""
    jobs = [fx.job(f"r{i}", 0.0, 18.0 + 2 * i, 2, 2, 2) for i in range(8)]
    state = tmp_path / "state"
    cluster, executor = fx.make_executor(
        lab, jobs, state, max_wall_s=240, command=fx.standin_builder(checkpoint_interval_s=1.0)
    )
    cli = lab.cli(timeout=30, unavailable_retry_s=60)
    marks: dict[str, float] = {}
    errors: list[BaseException] = []

    def chaos() -> None:
        try:
            time.sleep(5.0)
            marks["down"] = time.time()
            cli.update_node("node2", "DOWN", reason="gpuplan-test")
            time.sleep(4.0)
            marks["ctld_stop"] = time.time()
            lab.restart_controller(down_s=4.0)
            marks["ctld_up"] = time.time()
            time.sleep(3.0)
            cli.update_node("node2", "RESUME")
            marks["resume"] = time.time()
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=chaos, daemon=True)
    try:
        thread.start()
        engine = fx.run(cluster, executor, make_policy("srtf"))
        thread.join(timeout=60)
    finally:
        with contextlib.suppress(SlurmError):
            node2 = next(n for n in lab.cli().nodes() if n.name == "node2")
            if not node2.usable:
                lab.cli().update_node("node2", "RESUME")
    assert not errors, errors
    assert {"down", "ctld_up", "resume"} <= marks.keys()
    fx.assert_progress_conserved(engine, executor, state, jobs)
    evicted = {a.job_id for a in executor.actions if a.kind == "evict"}
    assert evicted, "no job was running on node2 when it went down"
    on_node2 = {
        s.job_id
        for s in executor.segments
        if "node2" in s.nodes and s.released < marks["down"] <= (s.ended or float("inf"))
    }
    assert evicted == on_node2
    for job_id in evicted:
        rec = next(r for r in engine.records if r.job_id == job_id)
        assert rec.preemptions >= 1
        assert len(executor.segments_of(job_id)) >= 2
    # While node2 was down nothing was placed on it.
    assert not [
        s
        for s in executor.segments
        if "node2" in s.nodes and marks["down"] < s.released < marks["resume"]
    ]
    # Some Slurm runs were alive across the controller restart and simply carried on.
    survived = [
        s
        for s in executor.segments
        if s.released < marks["ctld_stop"] and (s.ended or 0) > marks["ctld_up"]
    ]
    assert survived


# ---------------------------------------------------------------------------------------- hostile


HOSTILE_ID = "evil'\"$(touch /tmp/gpuplan-pwned-id)`touch /tmp/gpuplan-pwned-bt`;\ntouch x"
HOSTILE_ARGS = [
    "$(touch /tmp/gpuplan-pwned-arg)",
    "`touch /tmp/gpuplan-pwned-arg2`",
    "; touch /tmp/gpuplan-pwned-arg3",
    "a\nb && touch /tmp/gpuplan-pwned-arg4",
    "'single' \"double\" $HOME *",
]


def _pwned() -> list[Path]:
    return sorted(Path("/tmp").glob("gpuplan-pwned*"))


def test_hostile_names_and_commands_never_reach_a_shell(lab: SlurmLab, tmp_path: Path) -> None:
    for path in _pwned():
        path.unlink()
    state = tmp_path / "state"
    standin = fx.standin_builder()

    def command(ctx: LaunchContext) -> list[str]:
        if ctx.spec.id == "echo":
            return ["/bin/echo", *HOSTILE_ARGS]
        return list(standin(ctx))

    jobs = [fx.job(HOSTILE_ID, 0.0, 3.0, 1, 1, 1), fx.job("echo", 0.0, 1.0, 1, 1, 1)]
    cluster, executor = fx.make_executor(
        lab, jobs, state, command=command, protocol="exit", max_wall_s=120
    )
    engine = fx.run(cluster, executor, make_policy("fifo"))
    assert sorted(r.job_id for r in engine.records) == sorted(j.id for j in jobs)
    assert _pwned() == []
    # The echo job printed its arguments verbatim (one line per "\n" in them, nothing expanded).
    out = (state / f"{file_key('echo')}.out").read_text()
    assert out == " ".join(HOSTILE_ARGS) + "\n"
    # Slurm stored the hostile id as the job name and the comment decodes back to it.
    hostile = _squeue(lab, executor.slurm_id(HOSTILE_ID))  # type: ignore[arg-type]
    assert hostile.name == job_name(HOSTILE_ID) and hostile.state == "COMPLETED"
    assert parse_comment(hostile.comment)["id"] == HOSTILE_ID
    assert (state / f"{file_key(HOSTILE_ID)}.done").exists()
