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

Parts kept in their own modules: the process manifest and identity checks (:mod:`.lab_procs`),
the configuration files' text (:mod:`.lab_render`) and the apt-get installer (:mod:`.lab_install`).

Command line: ``python -m tests.labs.slurm.lab up|down|status|env [--job-submit-lua]``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import IO

from gpuplan.executors.pidlock import lock_with_pid
from gpuplan.executors.slurm.cli import SlurmCli, SlurmError
from gpuplan.models import GpuplanError

from ..labroot import private_dir, private_root, read_file, write_file
from .lab_config import JOB_ID_BAND, PACKAGES, LabConfig, LabError
from .lab_install import install_packages
from .lab_procs import MUNGED, LabProcesses, _munge_works, _other_slurm_daemons, _tail
from .lab_render import choose_cgroup, render_files

__all__ = [
    "MUNGED",
    "PACKAGES",
    "ROOT_MODE",
    "LabConfig",
    "LabError",
    "SlurmLab",
    "iter_lab_logs",
    "lock_path",
    "main",
    "open_lock",
]

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


class SlurmLab(LabProcesses):
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
                    raise LabError(
                        f"port {port} is in use by another process; give this lab "
                        "another --root (ports follow the root) or free it"
                    ) from None

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
        live = [
            name
            for name, entry in self._manifest().items()
            if name != "munged" and self._alive(name, entry)
        ]
        if live and running_owner != owner:
            # Someone else's lab with another configuration: never stop what we did not start.
            raise LabError(
                f"a Slurm lab with another configuration runs under {self.root} (started by "
                f"{running_owner or 'unknown'}: {', '.join(sorted(live))}); stop it first "
                f"(python -m tests.labs.slurm.lab down --root {self.root}) or use "
                "another --root"
            )
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
            self._start(f"slurmd-{name}", ["slurmd", "-D", "-f", str(self.conf_path), "-N", name])
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
        return all(n in started and self._alive(n, started[n]) for n in names) and self.cli().ping()

    def status(self) -> dict[str, object]:
        started = self._manifest()
        result: dict[str, object] = {
            "root": str(self.root),
            "slurm_conf": str(self.conf_path),
            "processes": {
                k: {"pid": v.pid, "alive": self._alive(k, v)} for k, v in started.items()
            },
        }
        try:
            result["nodes"] = {
                n.name: n.state + "".join("+" + f for f in n.flags)
                for n in self.cli(timeout=10).nodes()
            }
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
                raise LabError(
                    f"lab {self.root} still in use by another process after "
                    f"{timeout_s:g} s (lock {path})"
                )
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
        install_packages(self.config.install)

    # ------------------------------------------------------------------ configuration
    def _choose_cgroup(self) -> str:
        return choose_cgroup(self.config.cgroup)

    def _render(self) -> dict[str, str]:
        """File name -> content for every config file (also the fingerprint input)."""
        return render_files(self.config, self.root, self._cgroup, self.wake_file)

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
            write_file(
                etc / name, text, mode=0o755 if name.endswith(".sh") else 0o644, error=LabError
            )
        write_file(self.root / "run" / "config.sha256", fingerprint, mode=0o644, error=LabError)
        # Fake GPUs: c 195 N like /dev/nvidiaN. Opening one fails (no driver), which is fine:
        # Slurm only needs the device numbers for gres accounting and cgroup rules.
        for i in range(self.config.gpus_per_node):
            dev = self.root / "dev" / f"nvidia{i}"
            try:
                st = os.lstat(dev)
            except FileNotFoundError:
                st = None
            if st is not None and (
                not stat.S_ISCHR(st.st_mode)
                or st.st_uid != os.geteuid()
                or st.st_rdev != os.makedev(195, i)
            ):
                os.unlink(dev)
                st = None
            if st is None:
                os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(195, i))

    def _running_with(self, files: Mapping[str, str], fingerprint: str) -> bool:
        """The running lab has this configuration: same fingerprint, and the files slurmctld
        reads are still exactly ours (content, owner, mode; no link), so a swapped
        ``epilog_wake.sh`` is never kept running."""
        if self._read_text(self.root / "run" / "config.sha256") != fingerprint:
            return False
        try:
            intact = all(
                self._read_text(self.root / "etc" / name) == text for name, text in files.items()
            )
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
        self._start(
            "munged",
            argv,
            user=munge.pw_uid,
            group=munge.pw_gid,
            extra_groups=os.getgrouplist("munge", munge.pw_gid),
        )
        while not _munge_works():
            if time.monotonic() > deadline:
                raise LabError("munged did not start; see log/munged.stdio")
            time.sleep(0.1)

    def _start_ctld(self, deadline: float) -> None:
        self._start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf_path)])
        cli = self.cli(timeout=5)
        while not cli.ping():
            entry = self._manifest().get("slurmctld")
            if entry is None or not self._alive("slurmctld", entry) or time.monotonic() > deadline:
                tail = _tail(self.log_dir / "slurmctld.log") or _tail(
                    self.log_dir / "slurmctld.stdio"
                )
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
                    n.usable and n.gpus == self.config.gpus_per_node for n in nodes.values()
                )
                last = ", ".join(
                    f"{k}={v.state}{''.join('+' + f for f in v.flags)} gres={v.gres}"
                    for k, v in sorted(nodes.items())
                )
            except SlurmError as err:
                ok, last = False, str(err)
            if ok:
                return
            if time.monotonic() > deadline:
                raise LabError(
                    f"nodes not usable in time: {last}\n{_tail(self.log_dir / 'slurmctld.log')}"
                )
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

    def _clean_cgroups(
        self, base: Path = Path("/sys/fs/cgroup"), others_running: bool | None = None
    ) -> None:
        """Remove the cgroup directories this lab's jobs left behind (a MULTIPLE_SLURMD lab's
        slurmstepd does not always). Every lab on the machine shares
        ``<controller>/slurm_<node>/uid_<u>/``, so only ``job_<id>`` directories with ids in
        this lab's band (:attr:`LabConfig.first_job_id`) are removed, and the shared
        ``uid_*`` and ``slurm_<node>`` levels only when no other lab's daemon runs: removing
        an empty directory another lab had just created made its job fail to start
        ("Slurmd could not execve job"). ``others_running``: None looks at the processes."""
        if not base.is_dir():
            return
        lo = self.config.first_job_id or 1
        band = range(lo, lo + JOB_ID_BAND)
        shared_levels = not (_other_slurm_daemons() if others_running is None else others_running)
        for ctrl in base.iterdir():
            for name in self.node_names:
                top = ctrl / f"slurm_{name}"
                if not top.is_dir():
                    continue
                for uid in top.glob("uid_*"):
                    for job in uid.glob("job_*"):
                        if job.name[4:].isdigit() and int(job.name[4:]) in band:
                            _remove_tree(job)
                    if shared_levels:
                        _remove_tree(uid)
                if shared_levels:
                    _remove_tree(top)


def _remove_tree(top: Path) -> None:
    """rmdir ``top`` and its (cgroup) subdirectories, deepest first; a directory a process
    still uses stays (cgroup directories cannot be removed while populated)."""
    for d in sorted(top.rglob("*"), key=lambda p: -len(p.parts)):
        if d.is_dir():
            with contextlib.suppress(OSError):
                d.rmdir()
    with contextlib.suppress(OSError):
        top.rmdir()


# ---------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.labs.slurm.lab up|down|status|env``."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.labs.slurm.lab", description=__doc__.splitlines()[0]
    )
    parser.add_argument("action", choices=["up", "down", "status", "env", "restart-ctld"])
    default = LabConfig()
    parser.add_argument("--root", default=str(default.root))
    parser.add_argument("--nodes", type=int, default=default.nodes)
    parser.add_argument("--gpus", type=int, default=default.gpus_per_node)
    parser.add_argument("--gpu-type", default=default.gpu_type)
    parser.add_argument(
        "--job-submit-lua", action="store_true", help="load the shipped job_submit.lua hook"
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for a test session using the lab to finish",
    )
    args = parser.parse_args(argv)
    lab = SlurmLab(
        LabConfig(
            root=Path(args.root),
            nodes=args.nodes,
            gpus_per_node=args.gpus,
            gpu_type=args.gpu_type,
            job_submit_lua=args.job_submit_lua,
        )
    )
    try:
        if args.action in ("up", "down", "restart-ctld"):
            with lab.exclusive(timeout_s=args.wait):  # never pull the lab from under a test run
                if args.action == "up":
                    took = lab.up()
                    print(
                        f"lab up in {took:.1f} s; export SLURM_CONF={lab.conf_path}",
                        file=sys.stderr,
                    )
                elif args.action == "down":
                    lab.down()
                else:
                    print(
                        f"controller back after {lab.restart_controller():.1f} s", file=sys.stderr
                    )
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
