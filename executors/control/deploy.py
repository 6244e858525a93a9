"""Deploying the controller: ``gpuplan slurm-controller --check`` and ``--print-systemd-unit``.

Why a pre-flight command apart from the controller's own start-up checks: the start-up checks
refuse a set-up that cannot work at all (no Slurm client, an unknown partition, a journal
directory others can write), but several mistakes only show later or not at all — a
``job_submit.lua`` left behind by an upgrade (it marks jobs with rules the controller no
longer shares), a hook that is not loaded, a state directory others can read, a journal an
older release wrote, a metrics port another service holds. ``--check`` runs every check,
prints one line per check (``ok``, ``FAIL`` or ``skip``) and exits 0 only when none failed,
else 2 with the failing checks named; it creates nothing, takes no lock and changes no job,
so it is safe beside a running controller (run it as the controller's own user).

Why the unit is generated rather than shipped as a fixed file: its ``ExecStart`` must carry the
site's options (policy, partitions, journal, heartbeat) and its sandbox must open exactly the
directories those options name (``StateDirectory=`` for the journal, ``ReadWritePaths=`` for a
heartbeat elsewhere) and nothing more; writing both from one set of options keeps them in
agreement.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import sqlite3
import stat as stat_mod
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuplan import __version__
from gpuplan.models import GpuplanError, InputError

HOOK_VERSION_LINE = re.compile(r'(?m)^local GPUPLAN_HOOK_VERSION = "([^"\n]{1,40})"\s*$')
"""The version line of the shipped ``job_submit.lua`` (site edits must keep it)."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One line of ``--check``: ``ok`` True/False, or None when the check was skipped."""

    name: str
    ok: bool | None
    detail: str

    def line(self) -> str:
        word = "skip" if self.ok is None else "ok" if self.ok else "FAIL"
        return f"{word:<4} {self.name:<10} {' '.join(self.detail.split())}"


def hook_version(text: str) -> str | None:
    """The ``GPUPLAN_HOOK_VERSION`` a hook file declares (None: an older hook without it)."""
    found = HOOK_VERSION_LINE.search(text)
    return found.group(1) if found else None


def _state_dir(state_db: Path) -> CheckResult:
    """The journal's directory: this user's, and private (0700). The controller itself refuses
    only what others could write; ``--check`` also wants nobody else to read the journal's
    names, heartbeat or backups."""
    from .journal import UnsafeStatePath, check_state_path

    directory = state_db.parent
    try:
        check_state_path(state_db)
    except UnsafeStatePath as err:
        return CheckResult("state-dir", False, str(err))
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        parent = next((p for p in directory.parents if p.exists()), Path("/"))
        if os.access(parent, os.W_OK):
            return CheckResult(
                "state-dir",
                True,
                f"{directory} does not exist yet; the "
                "controller creates it 0700 at its first start",
            )
        return CheckResult(
            "state-dir",
            False,
            f"{directory} does not exist and this user "
            f"cannot create it in {parent} (systemd's StateDirectory= creates "
            "it, or: install -d -m 0700 -o USER DIR)",
        )
    mode = stat_mod.S_IMODE(st.st_mode)
    if mode & 0o077:
        return CheckResult(
            "state-dir", False, f"{directory} is not private (mode {mode:o}); chmod 700 {directory}"
        )
    return CheckResult(
        "state-dir", True, f"{directory} is this user's (uid {os.geteuid()}), mode {mode:o}"
    )


def _journal(state_db: Path) -> CheckResult:
    """An existing journal: its schema, and whether this release migrates or refuses it."""
    from .journal_files import _sqlite_uri
    from .journal_schema import SCHEMA_VERSION

    if not state_db.exists():
        return CheckResult("journal", True, f"none at {state_db} yet; created at the first start")
    try:
        db = sqlite3.connect(_sqlite_uri(state_db, "ro"), uri=True, timeout=5.0)
        try:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error as err:
        return CheckResult("journal", False, f"{state_db} cannot be read: {err}")
    if version > SCHEMA_VERSION:
        return CheckResult(
            "journal",
            False,
            f"{state_db} has schema {version}, written by a "
            f"newer gpuplan (this {__version__} knows {SCHEMA_VERSION})",
        )
    if version < 1:
        return CheckResult("journal", False, f"{state_db} holds no gpuplan journal (schema 0)")
    if version < SCHEMA_VERSION:
        return CheckResult(
            "journal",
            True,
            f"{state_db} has schema {version}: migrated to "
            f"{SCHEMA_VERSION} at the next start (a copy is kept as "
            f"{state_db.name}.schema{version}.bak)",
        )
    return CheckResult("journal", True, f"{state_db} has schema {version} (current)")


def _port(args: argparse.Namespace, state_db: Path) -> CheckResult:
    """The ``--http`` port, when one is configured: free to bind, or held by the running
    controller of this journal (``--check`` beside it must not fail)."""
    port = getattr(args, "http", None)
    if port is None:
        return CheckResult("port", None, "no metrics port configured (--http)")
    host = getattr(args, "http_bind", None) or "127.0.0.1"
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if port == 0:
        return CheckResult("port", True, f"{where}: any free port, chosen at start")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, int(port)))
    except OSError as err:
        run = _serving_run(host, int(port))
        if run is not None and run == _live_run(state_db):
            return CheckResult(
                "port", True, f"{where} is served by this journal's running controller (run {run})"
            )
        return CheckResult("port", False, f"cannot bind {where}: {err.strerror}")
    return CheckResult("port", True, f"{where} is free")


def _serving_run(host: str, port: int) -> int | None:
    """The run id a gpuplan controller serving ``host:port`` reports (None: not one)."""
    import http.client
    import json

    conn = http.client.HTTPConnection(host, port, timeout=3.0)
    try:
        conn.request("GET", "/state.json", headers={"Host": "127.0.0.1"})
        answer = conn.getresponse()
        doc = json.loads(answer.read(1 << 22)) if answer.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    run = doc.get("run") if isinstance(doc, dict) and "gpuplan" in doc else None
    return run if isinstance(run, int) else None


def _live_run(state_db: Path) -> int | None:
    """The journal's newest run that has not ended (None: none, or no readable journal)."""
    from .journal_files import _sqlite_uri

    if not state_db.exists():
        return None
    try:
        db = sqlite3.connect(_sqlite_uri(state_db, "ro"), uri=True, timeout=5.0)
        try:
            row = db.execute("SELECT MAX(run_id) FROM runs WHERE ended IS NULL").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return int(row[0]) if row and row[0] is not None else None


def run_checks(
    args: argparse.Namespace,
    partitions: tuple[str, ...],
    state_db: Path,
    heartbeat: Path,
    out: Callable[[str], None] = print,
) -> int:
    """Every check, one line each through ``out``; 0 when none failed, else 2 (the failing
    checks named on stderr)."""
    from gpuplan.executors.slurm.cli import SlurmCli, SlurmError, SlurmSetupError

    from .journal import UnsafeStatePath, check_private_dir

    results: list[CheckResult] = []

    def add(result: CheckResult) -> None:
        results.append(result)
        out(result.line())

    out(f"gpuplan {__version__}")
    if args.policy:
        from gpuplan.solver_core.registry import make_policy

        try:
            make_policy(args.policy)
            add(CheckResult("policy", True, args.policy))
        except (GpuplanError, ValueError, KeyError) as err:
            add(CheckResult("policy", False, str(err)))
    cli = SlurmCli(timeout=30.0)
    reachable = False
    try:
        nodes = cli.check_setup((), args.connect_timeout)
        config = cli.show_config()
        reachable = True
        add(
            CheckResult(
                "slurm",
                True,
                f"slurmctld answers (Slurm {config.get('SLURM_VERSION', '?')}, {len(nodes)} nodes)",
            )
        )
    except (SlurmSetupError, SlurmError) as err:
        add(CheckResult("slurm", False, str(err)))
    if not reachable:
        add(CheckResult("partition", None, "needs slurm"))
        add(CheckResult("hook", None, "needs slurm"))
    else:
        try:
            found = cli.check_setup(partitions, args.connect_timeout)
            wanted = set(partitions)
            gpus = [
                n
                for n in found
                if n.gpus > 0 and (not wanted or wanted & set(n.raw.get("partitions") or []))
            ]
            add(
                CheckResult(
                    "partition",
                    True,
                    f"{', '.join(partitions) or 'every partition'}: "
                    f"{len(gpus)} GPU nodes, {sum(n.gpus for n in gpus)} GPUs",
                )
            )
        except (SlurmSetupError, SlurmError) as err:
            add(CheckResult("partition", False, str(err)))
        add(_hook(config, args.hook_file))
    add(_state_dir(state_db))
    if heartbeat.parent != state_db.parent:
        try:
            check_private_dir(heartbeat.parent, "heartbeat directory")
            add(CheckResult("heartbeat", True, f"{heartbeat.parent} is this user's"))
        except UnsafeStatePath as err:
            add(CheckResult("heartbeat", False, str(err)))
    add(_journal(state_db))
    add(_port(args, state_db))
    failed = [r.name for r in results if r.ok is False]
    if failed:
        print(f"error: --check failed: {', '.join(failed)}", file=sys.stderr)
        return 2
    return 0


def _hook(config: dict[str, str], hook_file: str | None) -> CheckResult:
    """``JobSubmitPlugins`` loads lua, and the hook file (next to ``slurm.conf`` unless
    ``--hook-file``) carries this release's ``GPUPLAN_HOOK_VERSION``."""
    plugins = config.get("JobSubmitPlugins", "")
    if not any(p.strip().split("/")[-1] == "lua" for p in plugins.split(",")):
        return CheckResult(
            "hook",
            False,
            f"slurmctld does not load the lua hook "
            f"(JobSubmitPlugins={plugins or 'none'}; set JobSubmitPlugins=lua)",
        )
    if hook_file:
        path = Path(hook_file)
    else:
        conf = config.get("SLURM_CONF", "")
        if not conf or conf == "(null)":
            return CheckResult(
                "hook", False, "scontrol show config names no SLURM_CONF; pass --hook-file PATH"
            )
        path = Path(conf).parent / "job_submit.lua"
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        return CheckResult(
            "hook",
            False,
            f"cannot read {path}: {err.strerror} (on another host "
            "than slurmctld, pass --hook-file with a copy of its hook)",
        )
    found = hook_version(text)
    if found is None:
        return CheckResult(
            "hook",
            False,
            f"{path} has no GPUPLAN_HOOK_VERSION line (older "
            f"than gpuplan 0.1.0?); install this release's job_submit.lua",
        )
    if found != __version__:
        return CheckResult(
            "hook",
            False,
            f"{path} is gpuplan {found}'s hook, this is "
            f"{__version__}; install this release's job_submit.lua and run "
            "scontrol reconfigure",
        )
    return CheckResult("hook", True, f"{path} (gpuplan {found}), JobSubmitPlugins={plugins}")


# ---------------------------------------------------------------------------------------- unit

_SAFE = re.compile(r"[A-Za-z0-9_./:,=@+-]+")
"""What an ExecStart word may hold: no whitespace, quotes, ``%`` (systemd's specifiers), ``$``
or ``\\`` (which systemd would interpret)."""

_NOT_PASSED = {"help", "check", "hook_file", "print_systemd_unit", "controller_parser", "func"}


def _word(text: str, what: str) -> str:
    if not _SAFE.fullmatch(text):
        raise InputError(
            f"--print-systemd-unit: {what} {text[:80]!r} holds characters a unit "
            "file would interpret (only letters, digits and _./:,=@+- are "
            "written)"
        )
    return text


def _options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The options in ``args`` that differ from ``parser``'s defaults, as command-line words."""
    words: list[str] = []
    for action in parser._actions:
        if action.dest in _NOT_PASSED or not action.option_strings:
            continue
        value = getattr(args, action.dest, None)
        if value == action.default:
            continue
        flag = (
            action.option_strings[-1]
            if action.option_strings[-1].startswith("--")
            else action.option_strings[0]
        )
        if isinstance(action, argparse._StoreConstAction):
            words.append(flag)
        elif isinstance(value, list):
            words += [w for v in value for w in (flag, _word(str(v), flag))]
        else:
            text = f"{value:g}" if isinstance(value, float) else str(value)
            words += [flag, _word(text, flag)]
    return words


def _executable() -> list[str]:
    script = Path(sys.executable).parent / "gpuplan"
    if script.is_file() and os.access(script, os.X_OK):
        return [_word(str(script), "gpuplan's path")]
    return [_word(sys.executable, "python's path"), "-m", "gpuplan"]


_HARDENING = """\
# Sandbox: the controller runs Slurm's client commands and writes only its state directory
# (and the heartbeat's, when that is elsewhere); everything else is read-only or hidden.
UMask=0077
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
RestrictNamespaces=yes
LockPersonality=yes
SystemCallArchitectures=native
CapabilityBoundingSet=
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
"""


def systemd_unit(
    parser: argparse.ArgumentParser, args: argparse.Namespace, state_db: Path, heartbeat: Path
) -> str:
    """The ``gpuplan-controller.service`` (or, with ``--fail-open-check``,
    ``gpuplan-failopen.service``) unit for these options, hardened (see the module
    docstring). Raises :class:`InputError` for a path or value a unit file cannot hold."""
    if not args.fail_open_check and not args.policy:
        raise InputError("--print-systemd-unit: --policy is required (or --fail-open-check)")
    argv = [*_executable(), "slurm-controller", *_options(parser, args)]
    conf = _word(os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf", "SLURM_CONF")
    state_directory, paths = "", []
    if not args.fail_open_check:  # the watchdog writes nothing of its own
        state_dir = state_db.parent
        for path in (state_dir, heartbeat.parent):
            if not path.is_absolute():
                raise InputError(f"--print-systemd-unit: {path} must be an absolute path")
        if state_dir.is_relative_to("/var/lib") and state_dir != Path("/var/lib"):
            rel = _word(str(state_dir.relative_to("/var/lib")), "state directory")
            state_directory = f"StateDirectory={rel}\nStateDirectoryMode=0700\n"
        else:
            paths.append(_word(str(state_dir), "state directory"))
        if heartbeat.parent != state_dir:
            paths.append(_word(str(heartbeat.parent), "heartbeat directory"))
    rw = f"ReadWritePaths={' '.join(paths)}\n" if paths else ""
    exec_start = " ".join(argv)
    if args.fail_open_check:
        kind = (
            "Type=simple\nRestart=always\nRestartSec=5\n"
            if args.watch is not None
            else "Type=oneshot\n"
        )
        how = (
            "as a long-running service" if args.watch is not None else "from gpuplan-failopen.timer"
        )
        return f"""\
# gpuplan-failopen.service: written by gpuplan {__version__} (`gpuplan slurm-controller
# --print-systemd-unit --fail-open-check ...`). Run it on another host than the controller,
# {how}; see docs/controller.md § 2.
[Unit]
Description=gpuplan fail-open check (release engine-held jobs if the controller is gone)
After=network-online.target munge.service
Wants=network-online.target

[Service]
{kind}User=gpuplan
Environment=SLURM_CONF={conf}
ExecStart={exec_start}
{_HARDENING}"""
    return f"""\
# gpuplan-controller.service: written by gpuplan {__version__} (`gpuplan slurm-controller
# --print-systemd-unit ...`); see docs/controller.md § 2.
[Unit]
Description=gpuplan Slurm controller ({_word(args.policy, "--policy")})
After=network-online.target munge.service
Wants=network-online.target

[Service]
# Ready after its first completed cycle (reconcile + poll); pings the watchdog while the main
# loop is not stalled past --max-stall (sd_notify, executors/control/sdnotify.py).
Type=notify
NotifyAccess=main
WatchdogSec=120
TimeoutStartSec=300
User=gpuplan
Group=gpuplan
Environment=SLURM_CONF={conf}
ExecStart={exec_start}
# SIGTERM: finish the current step (a checkpoint-stop may take --stop-timeout), then exit.
# Jobs are Slurm's processes, not ours: stopping the service never stops a job.
KillSignal=SIGTERM
TimeoutStopSec={int(args.stop_timeout) + 60}
Restart=always
RestartSec=2
{state_directory}{rw}{_HARDENING}
[Install]
WantedBy=multi-user.target
"""


def print_unit(
    parser: argparse.ArgumentParser, args: argparse.Namespace, state_db: Path, heartbeat: Path
) -> int:
    """``--print-systemd-unit``: the unit on stdout; exit 0."""
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.write(systemd_unit(parser, args, state_db, heartbeat))
    return 0
