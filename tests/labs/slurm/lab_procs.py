"""The Slurm lab's process identity: what it started and whether a PID is still that daemon.

Kept apart from the lab's configuration and lifecycle because this is the safety-critical
sub-protocol behind ``down``: the manifest ``run/started.json`` records each daemon's PID with
its kernel start time, and a process is signalled only while it is still the daemon the lab
started (same PID and start time, expected executable, command line and uid, derived from the
configuration). :class:`LabProcesses` is mixed into :class:`.lab.SlurmLab`, which provides the
root checks, paths and environment it relies on.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..labroot import process_is, write_file
from .lab_config import LabError


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
    rest = raw[raw.rfind(")") + 2 :].split()
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


def _munge_works() -> bool:
    if not shutil.which("munge") or not shutil.which("unmunge"):
        return False
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=5, check=False)
        if cred.returncode != 0:
            return False
        back = subprocess.run(
            ["unmunge"], input=cred.stdout, capture_output=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return back.returncode == 0


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class LabProcesses:
    """Start, identify and stop the lab's daemons through its manifest (mixed into
    :class:`.lab.SlurmLab`)."""

    if TYPE_CHECKING:
        root: Path
        _procs: dict[str, subprocess.Popen[bytes]]

        @property
        def conf_path(self) -> Path: ...
        @property
        def env(self) -> dict[str, str]: ...
        @property
        def node_names(self) -> list[str]: ...
        def _verify(self, create: bool) -> bool: ...
        def _dir(self, rel: str) -> Path: ...
        def _read_text(self, path: Path) -> str: ...

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
        write_file(
            self._manifest_path(),
            json.dumps({k: asdict(v) for k, v in started.items()}, indent=1),
            mode=0o644,
            error=LabError,
        )

    def _expected(self, name: str) -> tuple[list[str], int] | None:
        """The command line and uid the lab's daemon ``name`` runs with, derived from the
        configuration (never from the manifest, which only says which PID to look at)."""
        conf = str(self.conf_path)
        if name == "slurmctld":
            return ["slurmctld", "-D", "-f", conf], os.geteuid()
        if name.startswith("slurmd-") and name[len("slurmd-") :] in self.node_names:
            return ["slurmd", "-D", "-f", conf, "-N", name[len("slurmd-") :]], os.geteuid()
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
        return process_is(entry.pid, exe=argv[0], uid=uid, argv=argv, start_ticks=entry.start_ticks)

    def _start(self, name: str, argv: list[str], **popen: object) -> _Started:
        self._dir("log")
        fd = os.open(
            self.root / "log" / f"{name}.stdio",
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
        )
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                env={**os.environ, **self.env},
                start_new_session=True,
                umask=0o022,
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

    def _stop(
        self, names: list[str], started: dict[str, _Started], timeout_s: float = 10.0
    ) -> None:
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
