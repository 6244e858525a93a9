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

``down`` cancels the lab's jobs and stops **only** the processes in that manifest whose PID and
start time still match (a reused PID is never signalled), so it cannot hit another cluster's
daemons or a munged someone else started. ``up`` is idempotent: an already running lab with the
same configuration is reused.

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

from gpuplan.models import GpuplanError

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


def _alive(entry: _Started) -> bool:
    """The recorded process still runs: same PID *and* start time, and not a zombie (PID 1 on
    these VMs reaps orphans slowly, so ``kill -0`` alone would call a dead daemon alive)."""
    st = _proc_stat(entry.pid)
    return st is not None and st[0] not in ("Z", "X") and st[1] == entry.start_ticks


class SlurmLab:
    """Start, inspect and stop the lab cluster described by ``config``."""

    def __init__(self, config: LabConfig | None = None, **overrides: object) -> None:
        cfg = config or LabConfig()
        if overrides:
            cfg = replace(cfg, **overrides)  # type: ignore[arg-type]
        self.config = cfg
        self.root = cfg.root
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
        """Environment for Slurm clients talking to this lab."""
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
        self._install()
        configs = self._render()
        fingerprint = hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest()
        owner_file = self.root / "run" / "owner"
        running_owner = owner_file.read_text().strip() if owner_file.exists() else ""
        if self._running_with(fingerprint):
            self._wait_nodes(time.monotonic() + timeout_s)
            self.reused = True
            self.owner = running_owner
            return time.monotonic() - t0
        live = [name for name, entry in self._manifest().items()
                if name != "munged" and _alive(entry)]
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
        owner_file.write_text(owner + "\n")
        deadline = time.monotonic() + timeout_s
        self._start_munge(deadline)
        self._start_ctld(deadline)
        for name in self.node_names:
            self._start(f"slurmd-{name}",
                        ["slurmd", "-D", "-f", str(self.conf_path), "-N", name])
        self._wait_nodes(deadline)
        return time.monotonic() - t0

    def down(self, timeout_s: float = 30.0) -> None:
        """Cancel the lab's jobs, then stop only the processes this lab started."""
        started = self._manifest()
        ctld = started.get("slurmctld")
        if ctld is not None and _alive(ctld) and self.conf_path.exists():
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
        if entry is not None and _alive(entry):
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
        if entry is None or not _alive(entry):
            self._start(f"slurmd-{name}", ["slurmd", "-D", "-f", str(self.conf_path), "-N", name])

    def is_up(self) -> bool:
        started = self._manifest()
        names = ["slurmctld", *(f"slurmd-{n}" for n in self.node_names)]
        return all(n in started and _alive(started[n]) for n in names) and self.cli().ping()

    def status(self) -> dict[str, object]:
        started = self._manifest()
        result: dict[str, object] = {
            "root": str(self.root),
            "slurm_conf": str(self.conf_path),
            "processes": {k: {"pid": v.pid, "alive": _alive(v)} for k, v in started.items()},
        }
        try:
            result["nodes"] = {n.name: n.state + "".join("+" + f for f in n.flags)
                               for n in self.cli(timeout=10).nodes()}
        except SlurmError as err:
            result["nodes"] = f"unavailable: {err}"
        return result

    @contextlib.contextmanager
    def exclusive(self, timeout_s: float = 900.0) -> Iterator[None]:
        """Hold the lab for this process (``flock`` on ``<root>.lock``).

        Test sessions that share a machine (developers running the suite side by side) would
        otherwise submit into the same cluster and one session's ``down`` would stop the other's
        daemons mid-run. The lock is released when the block ends or the process dies.
        """
        path = self.root.with_name(self.root.name + ".lock")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(path, "a+")  # noqa: SIM115 - closed by the with block below
        except OSError as err:
            raise LabError(f"cannot create the lab lock {path}: {err}") from err
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
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        guard = Path("/usr/sbin/policy-rc.d")
        own_guard = not guard.exists()
        if own_guard:  # keep the packages' postinst from starting system-wide daemons
            guard.write_text("#!/bin/sh\nexit 101\n")
            guard.chmod(0o755)
        try:
            for argv in (["apt-get", "update", "-qq"],
                         ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                          *missing]):
                proc = subprocess.run(argv, env=env, capture_output=True, text=True,
                                      stdin=subprocess.DEVNULL, timeout=600, check=False)
                if proc.returncode != 0:
                    raise LabError(f"{' '.join(argv)} failed: {proc.stderr.strip()[-2000:]}")
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

    def _write(self, files: Mapping[str, str], fingerprint: str) -> None:
        root = self.root
        for sub in ("etc", "state/ctld", "log", "run", "dev"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        for name in self.node_names:
            (root / "state" / "d" / name).mkdir(parents=True, exist_ok=True)
        etc = root / "etc"
        for stale in etc.iterdir():
            if stale.name not in files:
                stale.unlink()
        for name, text in files.items():
            (etc / name).write_text(text)
            (etc / name).chmod(0o755 if name.endswith(".sh") else 0o644)
        (root / "run" / "config.sha256").write_text(fingerprint)
        # Fake GPUs: c 195 N like /dev/nvidiaN. Opening one fails (no driver), which is fine:
        # Slurm only needs the device numbers for gres accounting and cgroup rules.
        for i in range(self.config.gpus_per_node):
            dev = root / "dev" / f"nvidia{i}"
            if dev.exists() and not stat.S_ISCHR(dev.stat().st_mode):
                dev.unlink()
            if not dev.exists():
                os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(195, i))

    # ------------------------------------------------------------------ processes
    def _manifest_path(self) -> Path:
        return self.root / "run" / "started.json"

    def _manifest(self) -> dict[str, _Started]:
        try:
            data = json.loads(self._manifest_path().read_text())
        except (OSError, ValueError):
            return {}
        return {k: _Started(**v) for k, v in data.items()}

    def _save_manifest(self, started: Mapping[str, _Started]) -> None:
        path = self._manifest_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({k: asdict(v) for k, v in started.items()}, indent=1))
        tmp.replace(path)

    def _start(self, name: str, argv: list[str]) -> _Started:
        log = open(self.root / "log" / f"{name}.stdio", "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env={**os.environ, **self.env}, start_new_session=True,
            )
        finally:
            log.close()
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
        live = [n for n in names if n in started and _alive(started[n])]
        for name in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(started[name].pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while live and time.monotonic() < deadline:
            self._reap()
            live = [n for n in live if _alive(started[n])]
            if live:
                time.sleep(0.1)
        for name in live:
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

    def _running_with(self, fingerprint: str) -> bool:
        try:
            old = (self.root / "run" / "config.sha256").read_text()
        except OSError:
            return False
        return old == fingerprint and self.is_up()

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
        # setpriv exec()s munged, so the PID we record is munged's own (munged refuses root).
        # Ten threads, munge's own advice for a busy host: with the default two, a loaded
        # machine running two labs sees "If munged is up, restart with --num-threads=10".
        self._start("munged", ["setpriv", "--reuid=munge", "--regid=munge", "--init-groups",
                               "/usr/sbin/munged", "-F", "--num-threads=10"])
        while not _munge_works():
            if time.monotonic() > deadline:
                raise LabError("munged did not start; see log/munged.stdio")
            time.sleep(0.1)

    def _start_ctld(self, deadline: float) -> None:
        self._start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf_path)])
        cli = self.cli(timeout=5)
        while not cli.ping():
            entry = self._manifest().get("slurmctld")
            if entry is None or not _alive(entry) or time.monotonic() > deadline:
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
