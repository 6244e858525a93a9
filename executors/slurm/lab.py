"""A real single-machine Slurm 22.05 cluster for tests and demos ("the lab").

Why a real cluster: the Slurm executor's hard parts — requeue timing, what ``squeue --json``
really says, how slurmctld treats a DOWN node or its own restart, what the job_submit hook may
change — cannot be mocked faithfully. Debian 12 ships Slurm 22.05.8 built with
``MULTIPLE_SLURMD``, so one machine can run slurmctld plus several ``slurmd -N nodeK`` "virtual
nodes". GPUs are fake character devices with the NVIDIA major number (195): 22.05 drops GPUs
without ``File=`` from gres.conf, and cgroup device rules act on the 195:N numbers, so jobs see
the same ``CUDA_VISIBLE_DEVICES`` they would on a real GPU node.

What :class:`SlurmLab` does, all under one root directory (default ``/tmp/gpuplan-slurmlab``):

* installs ``munge slurmctld slurmd slurm-client`` with apt-get if missing (non-interactive, with
  a temporary ``policy-rc.d`` so the packages' services are not auto-started);
* writes slurm.conf / gres.conf / cgroup.conf, the shipped ``epilog_wake.sh`` as
  ``EpilogSlurmctld`` (it rewrites :attr:`SlurmLab.wake_file`) and optionally ``job_submit.lua``;
* starts munged (only if munge is not already working), slurmctld and one slurmd per node, in the
  foreground as our own children (``-D``), and records each PID *with its kernel start time* in
  ``run/started.json``;
* waits until every node is usable.

``down`` cancels the lab's jobs and stops **only** the processes in that manifest that are still
the daemons the lab started: same PID and start time, the expected executable and command line
(derived from the lab's configuration, not from the manifest) and the expected uid. A reused or
forged PID is never signalled, so ``down`` cannot hit another cluster's daemons, a munged someone
else started, or another user's process. ``up`` is idempotent: an already running lab with the
same configuration (and intact configuration files) is reused.

Security (see docs/slurm.md, "Threat model"): the root is private. ``up`` creates it (``mkdir``,
mode 0711: others may reach ``etc/slurm.conf``, which Slurm clients of every user read, but never
list or write anything) or accepts an existing one only when it is a real directory owned by the
caller that no one else can write, below directories only root or the caller control; every
entry point (up, down, status, env, the lock) checks that again, and every directory the lab
writes below it. Files are written without following links (:mod:`..labroot`), so a planted
``etc/slurm.conf`` link or a swapped ``etc/epilog_wake.sh`` (slurmctld runs it as root) cannot
reach root. The lock that serialises test sessions lives inside the root.

Ports: see :mod:`.lab_config` (never Slurm's standard 6817/6818, distinct per root).

Command line: ``python -m gpuplan.executors.slurm.lab up|down|status|env [--job-submit-lua]``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import IO

from gpuplan.models import GpuplanError

from ..labroot import apt_get, private_dir, private_root, process_is, read_file, write_file
from ..pidlock import lock_with_pid
from .cli import SlurmCli, SlurmError
from .lab_config import PACKAGES, LabConfig, LabError
from .wake import epilog_script


@dataclass(slots=True)
class _Started:
    pid: int
    start_ticks: int
    argv: list[str] = field(default_factory=list)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid``, or None if there is no such PID."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    return rest[0], int(rest[19])


def _other_slurm_daemons() -> bool:
    """Any slurmctld/slurmd still running on this machine (after ours were stopped)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            name = (proc / "comm").read_text().strip()
        except OSError:
            continue
        if name in ("slurmctld", "slurmd"):
            stat = _proc_stat(int(proc.name))
            if stat is not None and stat[0] != "Z":
                return True
    return False


MUNGED = "/usr/sbin/munged"
ROOT_MODE = 0o711
"""The lab root's mode: private to its owner, except that other users may traverse it to read
``etc/slurm.conf`` (every Slurm client reads it; the tests submit as an unprivileged user)."""
_MANIFEST_LIMIT = 1 << 20


def lock_path(root: Path) -> Path:
    """The file whose ``flock`` serialises users of the lab under ``root`` (inside the root, so
    it is as private as the root: no predictable path in a shared directory)."""
    return root / "lab.lock"


def open_lock(path: Path) -> IO[str]:
    """Open (create) the lab lock without following links, and only when it is a regular file
    of ours: a lock another user planted (a link to a file root would truncate, or a file they
    hold locked forever) is refused."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as err:
        raise LabError(f"cannot open the lab lock {path}: {err.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise LabError(f"the lab lock {path} is not a regular file of this user; refusing it")
    return os.fdopen(fd, "r+")


class SlurmLab:
    """Start, inspect and stop the lab cluster described by ``config``."""

    def __init__(self, config: LabConfig | None = None, **overrides: object) -> None:
        cfg = config or LabConfig()
        if overrides:
            cfg = replace(cfg, **overrides)  # type: ignore[arg-type]
        self.config = cfg
        self.root = Path(os.path.abspath(cfg.root))
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._cgroup = self._choose_cgroup()
        self.reused = False
        """Set by :meth:`up`: True when a running lab with this configuration was reused (a
        caller that did not start it should then not stop it)."""
        self.owner = ""
        """Who started the running lab (``up(owner=...)``; e.g. "cli" or "pytest")."""

    # ------------------------------------------------------------------ paths and views
    @property
    def conf_path(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def wake_file(self) -> Path:
        return self.root / "run" / "gpuplan.wake"

    @property
    def jobcomp_path(self) -> Path:
        """jobcomp/filetxt log: one line per finished job (no slurmdbd in the lab)."""
        return self.root / "log" / "jobcomp.txt"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm clients talking to this lab (its root checked first: a client
        must never read a slurm.conf another user could have written)."""
        self._verify(create=False)
        return {"SLURM_CONF": str(self.conf_path)}

    @property
    def node_names(self) -> list[str]:
        return [f"{self.config.node_prefix}{k}" for k in range(1, self.config.nodes + 1)]

    @property
    def hook_installed(self) -> bool:
        return bool(self.config.job_submit_lua)

    def cli(self, **kw: object) -> SlurmCli:
        """A :class:`SlurmCli` bound to this lab."""
        return SlurmCli(self.env, **kw)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ lifecycle
    def _check_ports_free(self) -> None:
        """Refuse to start on a port another process holds (a lab under another root with
        explicit ports): two labs sharing a port restart each other's daemons."""
        c = self.config
        ports = [c.ctld_port, *range(c.slurmd_port0, c.slurmd_port0 + c.nodes)]
        for port in ports:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind(("0.0.0.0", port))
                except OSError:
                    raise LabError(f"port {port} is in use by another process; give this lab "
                                   "another --root (ports follow the root) or free it") from None

    def up(self, timeout_s: float = 90.0, owner: str = "cli") -> float:
        """Install, configure and start the lab if needed; return the seconds it took.

        ``owner`` is recorded when the lab is started here, so a later caller that reuses it
        can tell a developer's lab (leave it running) from one a crashed test run left behind.
        """
        t0 = time.monotonic()
        if os.geteuid() != 0:
            raise LabError("the Slurm lab needs root (slurmd, munged and cgroups run as root)")
        self._verify(create=True)
        self._install()
        configs = self._render()
        fingerprint = hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest()
        owner_file = self.root / "run" / "owner"
        running_owner = self._read_text(owner_file).strip()
        if self._running_with(configs, fingerprint):
            self._wait_nodes(time.monotonic() + timeout_s)
            self.reused = True
            self.owner = running_owner
            return time.monotonic() - t0
        live = [name for name, entry in self._manifest().items()
                if name != "munged" and self._alive(name, entry)]
        if live and running_owner != owner:
            # Someone else's lab with another configuration: never stop what we did not start.
            raise LabError(
                f"a Slurm lab with another configuration runs under {self.root} (started by "
                f"{running_owner or 'unknown'}: {', '.join(sorted(live))}); stop it first "
                f"(python -m gpuplan.executors.slurm.lab down --root {self.root}) or use "
                "another --root")
        self.reused = False
        self.owner = owner
        self.down()
        self._check_ports_free()
        shutil.rmtree(self.root / "state", ignore_errors=True)
        shutil.rmtree(self.root / "log", ignore_errors=True)
        self._write(configs, fingerprint)
        write_file(owner_file, owner + "\n", mode=0o644, error=LabError)
        deadline = time.monotonic() + timeout_s
        self._start_munge(deadline)
        self._start_ctld(deadline)
        for name in self.node_names:
            self._start(f"slurmd-{name}",
                        ["slurmd", "-D", "-f", str(self.conf_path), "-N", name])
        self._wait_nodes(deadline)
        return time.monotonic() - t0

    def down(self, timeout_s: float = 30.0) -> None:
        """Cancel the lab's jobs, then stop only the processes this lab started (refused, with
        nothing signalled, when the root is not a private root of the caller's)."""
        if not self._verify(create=False):
            return
        started = self._manifest()
        ctld = started.get("slurmctld")
        if ctld is not None and self._alive("slurmctld", ctld) and self.conf_path.exists():
            self._cancel_all_jobs(timeout_s)
        daemons = [k for k in started if k != "munged"]
        self._stop(daemons, started)
        if "munged" in started and not _other_slurm_daemons():
            # munged is machine-wide: another lab (another root) still authenticates with it
            self._stop(["munged"], started)
        self._clean_cgroups()

    def stop_controller(self) -> None:
        """Stop slurmctld only (jobs keep running on the slurmds; clients get "Unable to contact
        slurm controller" until :meth:`start_controller`)."""
        started = self._manifest()
        if "slurmctld" not in started:
            raise LabError("slurmctld was not started by this lab")
        self._stop(["slurmctld"], started)

    def start_controller(self, timeout_s: float = 60.0) -> None:
        """Start slurmctld again; it recovers jobs and nodes from ``StateSaveLocation``."""
        entry = self._manifest().get("slurmctld")
        if entry is not None and self._alive("slurmctld", entry):
            return
        self._start_ctld(time.monotonic() + timeout_s)

    def restart_controller(self, down_s: float = 0.0, timeout_s: float = 60.0) -> float:
        """Stop slurmctld, keep it down ``down_s`` seconds, start it; return the seconds the
        controller was unreachable. Running jobs keep running on the slurmds meanwhile."""
        t0 = time.monotonic()
        self.stop_controller()
        if down_s > 0:
            time.sleep(down_s)
        self.start_controller(timeout_s)
        return time.monotonic() - t0

    def stop_node(self, name: str) -> None:
        """Stop one node's slurmd (SIGTERM): slurmctld sees it stop responding (``*``), as after
        a crash of the daemon or a network cut. :meth:`start_node` brings it back."""
        started = self._manifest()
        if f"slurmd-{name}" not in started:
            raise LabError(f"slurmd of {name} was not started by this lab")
        self._stop([f"slurmd-{name}"], started)

    def start_node(self, name: str) -> None:
        """Start one node's slurmd again (it registers; ``ReturnToService=1`` clears DOWN)."""
        entry = self._manifest().get(f"slurmd-{name}")
        if entry is None or not self._alive(f"slurmd-{name}", entry):
            self._start(f"slurmd-{name}", ["slurmd", "-D", "-f", str(self.conf_path), "-N", name])

    def is_up(self) -> bool:
        started = self._manifest()
        names = ["slurmctld", *(f"slurmd-{n}" for n in self.node_names)]
        return all(n in started and self._alive(n, started[n]) for n in names) and \
            self.cli().ping()

    def status(self) -> dict[str, object]:
        started = self._manifest()
        result: dict[str, object] = {
            "root": str(self.root),
            "slurm_conf": str(self.conf_path),
            "processes": {k: {"pid": v.pid, "alive": self._alive(k, v)}
                          for k, v in started.items()},
        }
        try:
            result["nodes"] = {n.name: n.state + "".join("+" + f for f in n.flags)
                               for n in self.cli(timeout=10).nodes()}
        except SlurmError as err:
            result["nodes"] = f"unavailable: {err}"
        return result

    @contextlib.contextmanager
    def exclusive(self, timeout_s: float = 900.0) -> Iterator[None]:
        """Hold the lab for this process (``flock`` on :func:`lock_path`, inside the root).

        Test sessions that share a machine (developers running the suite side by side) would
        otherwise submit into the same cluster and one session's ``down`` would stop the other's
        daemons mid-run. The lock is released when the block ends or the process dies. The root
        is created (private) or checked first, and the lock file is opened without following
        links and used only when it is ours: another user can neither plant it nor hold it.
        """
        self._verify(create=True)
        path = lock_path(self.root)
        fh = open_lock(path)
        with fh:
            if not lock_with_pid(fh, timeout_s, poll_s=0.5):
                raise LabError(f"lab {self.root} still in use by another process after "
                               f"{timeout_s:g} s (lock {path})")
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def __enter__(self) -> SlurmLab:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ------------------------------------------------------------------ install
    def _install(self) -> None:
        missing = [p for p in PACKAGES if not _installed(p)]
        if not missing:
            return
        if not self.config.install:
            raise LabError(f"Debian packages missing: {' '.join(missing)}")
        guard = Path("/usr/sbin/policy-rc.d")
        own_guard = not guard.exists()
        if own_guard:  # keep the packages' postinst from starting system-wide daemons
            guard.write_text("#!/bin/sh\nexit 101\n")
            guard.chmod(0o755)
        try:  # both wait (bounded) for another apt/dpkg holding the locks
            apt_get(["update", "-qq"], error=LabError)
            apt_get(["install", "-y", "-qq", "--no-install-recommends", *missing],
                    error=LabError)
        finally:
            if own_guard:
                guard.unlink(missing_ok=True)
        still = [p for p in PACKAGES if not _installed(p)]
        if still:
            raise LabError(f"packages still missing after apt-get install: {' '.join(still)}")

    # ------------------------------------------------------------------ configuration
    def _choose_cgroup(self) -> str:
        mode = self.config.cgroup
        if mode == "auto":
            ok = os.access("/sys/fs/cgroup/devices/devices.allow", os.W_OK) and \
                Path("/sys/fs/cgroup/freezer").is_dir()
            return "v1" if ok else "off"
        return mode

    def _render(self) -> dict[str, str]:
        """File name -> content for every config file (also the fingerprint input)."""
        c = self.config
        root = self.root
        host = socket.gethostname().split(".")[0]
        n = c.nodes
        prefix = c.node_prefix
        cg = self._cgroup == "v1"
        lua = ""
        files: dict[str, str] = {}
        if c.job_submit_lua:
            src = (resources.files("gpuplan.executors.slurm") / "job_submit.lua"
                   if c.job_submit_lua is True else Path(str(c.job_submit_lua)))
            # Site configuration of the shipped hook: its idea of a whole node and of the
            # largest job the managed partition can hold.
            text = re.sub(r"(?m)^local MAX_GPUS_PER_NODE = \d+",
                          f"local MAX_GPUS_PER_NODE = {c.gpus_per_node}", src.read_text())
            files["job_submit.lua"] = re.sub(
                r"(?m)^local MAX_ENGINE_GPUS = \d+",
                f"local MAX_ENGINE_GPUS = {c.gpus_per_node * c.nodes}", text)
            lua = "JobSubmitPlugins=lua\n"
        common = (f"NodeHostname={host} NodeAddr=127.0.0.1 CPUs={c.cpus_per_node} Boards=1 "
                  f"SocketsPerBoard=2 CoresPerSocket={max(1, c.cpus_per_node // 2)} "
                  f"ThreadsPerCore=1 RealMemory={c.memory_mb} State=UNKNOWN")
        gres = f"gpu:{c.gpu_type}:{c.gpus_per_node}" if c.gpu_type else f"gpu:{c.gpus_per_node}"
        nodes = f"{prefix}[1-{n}]" if n > 1 else f"{prefix}1"
        ports = (f"[{c.slurmd_port0}-{c.slurmd_port0 + n - 1}]" if n > 1
                 else str(c.slurmd_port0))
        files["slurm.conf"] = f"""\
# generated by gpuplan.executors.slurm.lab — do not edit, `up` rewrites it
ClusterName=gpuplanlab
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire={c.cred_expire_s}
SlurmctldPort={c.ctld_port}
SlurmdPort={c.slurmd_port0}
StateSaveLocation={root}/state/ctld
SlurmdSpoolDir={root}/state/d/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={root}/etc/plugstack.conf
MpiDefault=none
ProctrackType={"proctrack/cgroup" if cg else "proctrack/pgid"}
TaskPlugin={"task/cgroup" if cg else "task/none"}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
PriorityType=priority/basic
PreemptType=preempt/none
JobRequeue=1
EpilogSlurmctld={root}/etc/epilog_wake.sh
{lua}JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
ReturnToService=1
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=600
KillWait=5
Waittime=0
NodeName={nodes} Port={ports} {common} Gres={gres}
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName={c.engine_partition} Nodes=ALL MaxTime=INFINITE State=UP
"""
        type_opt = f"Type={c.gpu_type} " if c.gpu_type else ""
        files["gres.conf"] = (f"NodeName={nodes} Name=gpu {type_opt}"
                              f"File={root}/dev/nvidia[0-{c.gpus_per_node - 1}]\n")
        files["plugstack.conf"] = ""
        files["epilog_wake.sh"] = epilog_script(self.wake_file)
        if cg:
            files["cgroup.conf"] = ("CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
                                    "CgroupAutomount=no\nConstrainCores=no\n"
                                    "ConstrainRAMSpace=no\nConstrainDevices=yes\n")
        return files

    def write_config(self) -> str:
        """Render and write the configuration files (no daemon is started or stopped); return
        their fingerprint. :meth:`up` does this when it (re)starts the lab."""
        self._verify(create=True)
        configs = self._render()
        fingerprint = hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest()
        self._write(configs, fingerprint)
        return fingerprint

    def _verify(self, create: bool) -> bool:
        """The root is private to the caller (created here when ``create``); False when it does
        not exist (and ``create`` is False). Refused with a :class:`LabError` otherwise."""
        return private_root(self.root, mode=ROOT_MODE, error=LabError, create=create) is not None

    def _dir(self, rel: str) -> Path:
        return private_dir(self.root, rel, error=LabError)

    def _read_text(self, path: Path) -> str:
        raw = read_file(path, limit=_MANIFEST_LIMIT, error=LabError)
        return "" if raw is None else raw.decode(errors="replace")

    def _write(self, files: Mapping[str, str], fingerprint: str) -> None:
        """Every directory checked or created private, every file replaced without following
        links: nothing here can be redirected to another file or swapped by another user."""
        for sub in ("etc", "state/ctld", "log", "run", "dev"):
            self._dir(sub)
        for name in self.node_names:
            self._dir(f"state/d/{name}")
        etc = self._dir("etc")
        for stale in etc.iterdir():
            if stale.name not in files:
                stale.unlink()  # a link is removed, never followed
        for name, text in files.items():
            write_file(etc / name, text, mode=0o755 if name.endswith(".sh") else 0o644,
                       error=LabError)
        write_file(self.root / "run" / "config.sha256", fingerprint, mode=0o644, error=LabError)
        # Fake GPUs: c 195 N like /dev/nvidiaN. Opening one fails (no driver), which is fine:
        # Slurm only needs the device numbers for gres accounting and cgroup rules.
        for i in range(self.config.gpus_per_node):
            dev = self.root / "dev" / f"nvidia{i}"
            try:
                st = os.lstat(dev)
            except FileNotFoundError:
                st = None
            if st is not None and (not stat.S_ISCHR(st.st_mode) or st.st_uid != os.geteuid()
                                   or st.st_rdev != os.makedev(195, i)):
                os.unlink(dev)
                st = None
            if st is None:
                os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(195, i))

    # ------------------------------------------------------------------ processes
    def _manifest_path(self) -> Path:
        return self.root / "run" / "started.json"

    def _manifest(self) -> dict[str, _Started]:
        """What the lab started, read only from the verified private root, without following
        links and bounded; an entry that does not parse is dropped (never signalled)."""
        if not self._verify(create=False):
            return {}
        try:
            data = json.loads(self._read_text(self._manifest_path()) or "{}")
        except ValueError:
            return {}
        started: dict[str, _Started] = {}
        for key, value in data.items() if isinstance(data, dict) else ():
            with contextlib.suppress(TypeError, ValueError):
                entry = _Started(**value)
                if isinstance(entry.pid, int) and isinstance(entry.start_ticks, int):
                    started[str(key)] = entry
        return started

    def _save_manifest(self, started: Mapping[str, _Started]) -> None:
        self._dir("run")
        write_file(self._manifest_path(),
                   json.dumps({k: asdict(v) for k, v in started.items()}, indent=1),
                   mode=0o644, error=LabError)

    def _expected(self, name: str) -> tuple[list[str], int] | None:
        """The command line and uid the lab's daemon ``name`` runs with, derived from the
        configuration (never from the manifest, which only says which PID to look at)."""
        conf = str(self.conf_path)
        if name == "slurmctld":
            return ["slurmctld", "-D", "-f", conf], os.geteuid()
        if name.startswith("slurmd-") and name[len("slurmd-"):] in self.node_names:
            return ["slurmd", "-D", "-f", conf, "-N", name[len("slurmd-"):]], os.geteuid()
        if name == "munged":
            try:
                return [MUNGED, "-F", "--num-threads=10"], pwd.getpwnam("munge").pw_uid
            except KeyError:
                return None
        return None

    def _alive(self, name: str, entry: _Started) -> bool:
        """The recorded daemon still runs and is the one we started: same PID *and* start time,
        not a zombie (PID 1 on these VMs reaps orphans slowly, so ``kill -0`` alone would call a
        dead daemon alive), the expected executable, command line and uid. Anything else (a
        reused PID, a PID someone wrote into the manifest) is not ours and never signalled."""
        expected = self._expected(name)
        if expected is None:
            return False
        argv, uid = expected
        return process_is(entry.pid, exe=argv[0], uid=uid, argv=argv,
                          start_ticks=entry.start_ticks)

    def _start(self, name: str, argv: list[str], **popen: object) -> _Started:
        self._dir("log")
        fd = os.open(self.root / "log" / f"{name}.stdio",
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                env={**os.environ, **self.env}, start_new_session=True, umask=0o022,
                **popen,  # type: ignore[arg-type]
            )
        finally:
            os.close(fd)
        st = None
        for _ in range(50):  # /proc entry appears at once; retry only for robustness
            st = _proc_stat(proc.pid)
            if st is not None:
                break
            time.sleep(0.01)
        if st is None:
            raise LabError(f"{name} exited at once; see {self.root}/log/{name}.stdio")
        entry = _Started(pid=proc.pid, start_ticks=st[1], argv=argv)
        self._procs[name] = proc
        started = self._manifest()
        started[name] = entry
        self._save_manifest(started)
        return entry

    def _stop(self, names: list[str], started: dict[str, _Started],
              timeout_s: float = 10.0) -> None:
        """SIGTERM all of ``names`` at once (each Slurm daemon needs ~2 s), SIGKILL stragglers."""
        live = [n for n in names if n in started and self._alive(n, started[n])]
        for name in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(started[name].pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while live and time.monotonic() < deadline:
            self._reap()
            live = [n for n in live if self._alive(n, started[n])]
            if live:
                time.sleep(0.1)
        for name in live:
            if self._alive(name, started[name]):  # checked again right before the signal
                with contextlib.suppress(ProcessLookupError):
                    os.kill(started[name].pid, signal.SIGKILL)
        self._reap()
        current = self._manifest()
        for name in names:
            current.pop(name, None)
            self._procs.pop(name, None)
        self._save_manifest(current)

    def _reap(self) -> None:
        for proc in self._procs.values():
            proc.poll()

    def _running_with(self, files: Mapping[str, str], fingerprint: str) -> bool:
        """The running lab has this configuration: same fingerprint, and the files slurmctld
        reads are still exactly ours (content, owner, mode; no link), so a swapped
        ``epilog_wake.sh`` is never kept running."""
        if self._read_text(self.root / "run" / "config.sha256") != fingerprint:
            return False
        try:
            intact = all(self._read_text(self.root / "etc" / name) == text
                         for name, text in files.items())
        except LabError:
            intact = False
        return intact and self.is_up()

    def _start_munge(self, deadline: float) -> None:
        if _munge_works():
            return
        key = Path("/etc/munge/munge.key")
        if not key.exists() or key.stat().st_size == 0:
            key.parent.mkdir(parents=True, exist_ok=True)
            key.write_bytes(os.urandom(1024))
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)
        for d in ("/run/munge", "/var/lib/munge", "/var/log/munge"):
            Path(d).mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "munge", "munge")
        Path("/run/munge").chmod(0o755)
        # Popen switches to munge before exec, so the PID we record is munged's own (munged
        # refuses root). Ten threads, munge's own advice for a busy host: with the default
        # two, a loaded machine running two labs sees "If munged is up, restart with
        # --num-threads=10".
        munge = pwd.getpwnam("munge")
        argv, _uid = self._expected("munged")  # type: ignore[misc]
        self._start("munged", argv, user=munge.pw_uid, group=munge.pw_gid,
                    extra_groups=os.getgrouplist("munge", munge.pw_gid))
        while not _munge_works():
            if time.monotonic() > deadline:
                raise LabError("munged did not start; see log/munged.stdio")
            time.sleep(0.1)

    def _start_ctld(self, deadline: float) -> None:
        self._start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf_path)])
        cli = self.cli(timeout=5)
        while not cli.ping():
            entry = self._manifest().get("slurmctld")
            if entry is None or not self._alive("slurmctld", entry) or \
                    time.monotonic() > deadline:
                tail = _tail(self.log_dir / "slurmctld.log") or _tail(
                    self.log_dir / "slurmctld.stdio")
                raise LabError(f"slurmctld did not come up:\n{tail}")
            time.sleep(0.1)

    def _wait_nodes(self, deadline: float) -> None:
        cli = self.cli(timeout=10)
        wanted = set(self.node_names)
        last = ""
        while True:
            try:
                nodes = {n.name: n for n in cli.nodes() if n.name in wanted}
                ok = wanted <= nodes.keys() and all(
                    n.usable and n.gpus == self.config.gpus_per_node for n in nodes.values())
                last = ", ".join(f"{k}={v.state}{''.join('+' + f for f in v.flags)} gres={v.gres}"
                                 for k, v in sorted(nodes.items()))
            except SlurmError as err:
                ok, last = False, str(err)
            if ok:
                return
            if time.monotonic() > deadline:
                raise LabError(f"nodes not usable in time: {last}\n"
                               f"{_tail(self.log_dir / 'slurmctld.log')}")
            time.sleep(0.2)

    def _cancel_all_jobs(self, timeout_s: float) -> None:
        cli = self.cli(timeout=10)
        try:
            ids = [j.job_id for j in cli.jobs(all_states=False)]
            for job_id in ids:
                with contextlib.suppress(SlurmError):
                    cli.cancel(job_id)
            deadline = time.monotonic() + timeout_s
            while ids and time.monotonic() < deadline:
                if not [j for j in cli.jobs(ids) if j.active]:
                    break
                time.sleep(0.2)
        except SlurmError:
            pass  # a dead controller cannot cancel; the slurmds are stopped next anyway

    def _clean_cgroups(self) -> None:
        """Remove the per-node cgroup directories a MULTIPLE_SLURMD lab leaves behind."""
        base = Path("/sys/fs/cgroup")
        if not base.is_dir():
            return
        for ctrl in base.iterdir():
            for name in self.node_names:
                top = ctrl / f"slurm_{name}"
                if top.is_dir():
                    for d in sorted(top.rglob("*"), key=lambda p: -len(p.parts)):
                        if d.is_dir():
                            with contextlib.suppress(OSError):
                                d.rmdir()
                    with contextlib.suppress(OSError):
                        top.rmdir()


def _installed(package: str) -> bool:
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True,
                          text=True, check=False)
    return proc.returncode == 0 and "ok installed" in proc.stdout


def _munge_works() -> bool:
    if not shutil.which("munge") or not shutil.which("unmunge"):
        return False
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=5, check=False)
        if cred.returncode != 0:
            return False
        back = subprocess.run(["unmunge"], input=cred.stdout, capture_output=True, timeout=5,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return back.returncode == 0


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuplan.executors.slurm.lab up|down|status|env``."""
    parser = argparse.ArgumentParser(prog="python -m gpuplan.executors.slurm.lab",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "status", "env", "restart-ctld"])
    default = LabConfig()
    parser.add_argument("--root", default=str(default.root))
    parser.add_argument("--nodes", type=int, default=default.nodes)
    parser.add_argument("--gpus", type=int, default=default.gpus_per_node)
    parser.add_argument("--gpu-type", default=default.gpu_type)
    parser.add_argument("--job-submit-lua", action="store_true",
                        help="load the shipped job_submit.lua hook")
    parser.add_argument("--wait", type=float, default=0.0, metavar="S",
                        help="wait up to S seconds for a test session using the lab to finish")
    args = parser.parse_args(argv)
    lab = SlurmLab(LabConfig(root=Path(args.root), nodes=args.nodes, gpus_per_node=args.gpus,
                             gpu_type=args.gpu_type, job_submit_lua=args.job_submit_lua))
    try:
        if args.action in ("up", "down", "restart-ctld"):
            with lab.exclusive(timeout_s=args.wait):  # never pull the lab from under a test run
                if args.action == "up":
                    took = lab.up()
                    print(f"lab up in {took:.1f} s; export SLURM_CONF={lab.conf_path}",
                          file=sys.stderr)
                elif args.action == "down":
                    lab.down()
                else:
                    print(f"controller back after {lab.restart_controller():.1f} s",
                          file=sys.stderr)
        elif args.action == "env":
            for key, value in lab.env.items():
                print(f"export {key}={value}")
        else:
            print(json.dumps(lab.status(), indent=2))
    except GpuplanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def iter_lab_logs(lab: SlurmLab) -> Iterator[Path]:
    """Log files worth attaching to a failing test report."""
    yield from sorted(lab.log_dir.glob("*.log"))


if __name__ == "__main__":
    raise SystemExit(main())
