"""Command-line wiring of ``gpuplan slurm-controller`` (the integrator calls :func:`add_subcommand`
from ``gpuplan/cli.py``; ``python -m gpuplan.executors.control.command slurm-controller ...`` runs
the same thing standalone).

Two modes, one subcommand, because they are two halves of one deployment and share every option
that must agree between them (partitions, state DB, heartbeat path):

* ``gpuplan slurm-controller --policy P ...`` — the controller daemon;
* ``gpuplan slurm-controller --fail-open-check [--watch S] ...`` — the fail-open watchdog: one
  check (for a systemd timer / cron), or a loop with ``--watch``.
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

from gpuplan.models import GpuplanError
from gpuplan.models.bounds import MAX_SEED

DEFAULT_STATE_DB = "/var/lib/gpuplan/slurm-controller.db"
DEFAULT_WAKE_FILE = Path("/run/gpuplan/wake")
"""Where the shipped ``epilog_wake.sh`` writes unless edited (see ``docs/controller.md``)."""
DEFAULT_CONNECT_TIMEOUT_S = 60.0
"""Start-up wait for slurmctld (``--connect-timeout``): a fail-over or restart of slurmctld
takes seconds; a wrong ``slurm.conf`` never answers."""
MAX_SECONDS = 7 * 86400.0
"""Largest value of any duration option (a week)."""


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line (``gpuplan <command>: error: ...``) and exit 2, like every
    other refusal of bad input; ``--help`` still prints the full usage. ``gpuplan``'s own
    parser is one of these too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _seconds(text: str) -> float:
    """A duration option: a finite number > 0 (``nan``, ``inf`` and ``-1`` would disable the
    check they configure: ``--stale-after nan`` released every held job)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds in (0, {MAX_SECONDS:g}], got {text!r}"
        )
    return value


def _seconds_or_zero(text: str) -> float:
    """``--stale-after``: like :func:`_seconds`, but 0 is allowed (fail open now)."""
    return 0.0 if text.strip() in ("0", "0.0") else _seconds(text)


def seed_arg(text: str) -> int:
    """A ``--seed``: an integer in [0, MAX_SEED] (a negative seed was silently aliased), in
    ASCII digits (``int`` reads Arabic-Indic and other Unicode digits: ``--seed`` U+0661
    silently meant seed 1)."""
    if not (text.isascii() and text.isdigit()) or len(text) > 10 or int(text) > MAX_SEED:
        raise argparse.ArgumentTypeError(
            f"must be an integer in [0, {MAX_SEED}], got {text[:30]!r}"
        )
    return int(text)


def port_arg(text: str) -> int:
    """``--http``: a TCP port in [0, 65535] in ASCII digits (0: any free port, logged)."""
    if not (text.isascii() and text.isdigit()) or len(text) > 5 or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"must be a port number in [0, 65535], got {text[:30]!r}")
    return int(text)


def address_arg(text: str) -> str:
    """``--http-bind``: an IPv4 or IPv6 address (no host name: what it binds is then plain)."""
    import ipaddress

    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an IP address, got {text[:60]!r}") from None


def add_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``slurm-controller`` on an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "slurm-controller",
        help="schedule hook-held Slurm jobs with a gpuplan policy (daemon), or run the "
        "fail-open watchdog",
        description="Run the gpuplan controller for a Slurm cluster: adopt the jobs the "
        "job_submit hook holds, plan with POLICY, apply plans through "
        "scontrol/scancel, journal every action, and recover after any crash. "
        "See docs/controller.md.",
    )
    p.add_argument(
        "--policy", help="allocation policy (gpuplan policies); required unless --fail-open-check"
    )
    p.add_argument(
        "--partition",
        action="append",
        default=[],
        metavar="NAME",
        help="manage jobs and nodes of this partition (repeat or comma-separate); "
        "default: every job the hook marked, every GPU node",
    )
    p.add_argument(
        "--state-db",
        default=DEFAULT_STATE_DB,
        metavar="PATH",
        help=f"SQLite journal (default {DEFAULT_STATE_DB}); keep it on a local disk",
    )
    p.add_argument(
        "--seed", type=seed_arg, default=0, help="seed of the policy's random choices (default 0)"
    )
    p.add_argument(
        "--interval",
        type=_seconds,
        default=2.0,
        metavar="S",
        help="seconds between squeue/sinfo polls (default 2)",
    )
    p.add_argument(
        "--wake-file",
        default=str(DEFAULT_WAKE_FILE),
        metavar="PATH",
        help="file the shipped EpilogSlurmctld hook (epilog_wake.sh) rewrites when a "
        "job ends: the controller polls at once when it changes (default "
        f"{DEFAULT_WAKE_FILE}; 'none': poll every --interval only)",
    )
    p.add_argument(
        "--arrival-check",
        type=_seconds_or_zero,
        default=0.25,
        metavar="S",
        help="between polls, look this often at slurmctld's count of submitted jobs "
        "(sdiag) and poll at once when it moved, so new jobs are decided on "
        "without waiting for the next poll (default 0.25; 0: no look)",
    )
    p.add_argument(
        "--heartbeat",
        default=None,
        metavar="PATH",
        help="heartbeat file (default: STATE_DB.heartbeat); the watchdog must read the same file",
    )
    p.add_argument(
        "--default-duration",
        type=_seconds,
        default=3600.0,
        metavar="S",
        help="work estimate for jobs with neither work=/duration= in their comment "
        "nor a time limit (default 3600)",
    )
    p.add_argument(
        "--stop-timeout",
        type=_seconds,
        default=60.0,
        metavar="S",
        help="time a job gets to checkpoint and exit after the signal (default 60)",
    )
    p.add_argument(
        "--max-stall",
        type=_seconds,
        default=600.0,
        metavar="S",
        help="withhold the heartbeat when the main loop is stuck this long (default 600)",
    )
    p.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        metavar="S",
        help="at start-up, wait at most S seconds for slurmctld to answer, then exit "
        f"2 (default {DEFAULT_CONNECT_TIMEOUT_S:g}); once running, the "
        "controller waits for slurmctld indefinitely",
    )
    p.add_argument(
        "--fail-open-check",
        action="store_true",
        help="watchdog mode: if the heartbeat is older than --stale-after, release "
        "every engine-held job to Slurm's own scheduler",
    )
    p.add_argument(
        "--stale-after",
        type=_seconds_or_zero,
        default=120.0,
        metavar="S",
        help="watchdog: heartbeat age that counts as 'controller down' (default 120)",
    )
    p.add_argument(
        "--watch",
        type=_seconds,
        default=None,
        metavar="S",
        help="watchdog: repeat the check every S seconds instead of once",
    )
    p.add_argument(
        "--no-restart-gate",
        dest="restart_gate",
        action="store_false",
        help="carry out every change the policy plans, even one whose restart costs "
        "more than it gains (default: the restart gate skips those)",
    )
    p.add_argument(
        "--http",
        type=port_arg,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics (/metrics), the live page (/) and its data "
        "(/state.json) on this port (needs the 'slurm' extra; default: off)",
    )
    p.add_argument(
        "--http-bind",
        type=address_arg,
        default="127.0.0.1",
        metavar="ADDR",
        help="address --http listens on (default 127.0.0.1: this host only)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="check the deployment instead of running: Slurm reachable, partitions, "
        "the job_submit.lua hook loaded and of this release, state directory "
        "private, journal schema, the --http port free; one line per check, "
        "exit 2 if any fails",
    )
    p.add_argument(
        "--hook-file",
        default=None,
        metavar="PATH",
        help="--check: the hook file to compare (default: job_submit.lua next to "
        "the slurm.conf slurmctld reports)",
    )
    p.add_argument(
        "--print-systemd-unit",
        action="store_true",
        help="print a hardened systemd unit that runs these options (the "
        "controller, or the watchdog with --fail-open-check) and exit",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="controller log verbosity (default INFO)",
    )
    p.set_defaults(func=run, controller_parser=p)
    return p


def _partitions(values: list[str]) -> tuple[str, ...]:
    return tuple(p for v in values for p in v.split(",") if p)


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code (2: bad usage, 1: could not run)."""
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Imported here, not at module level, so that `gpuplan --help` does not load the Slurm stack.
    from gpuplan.executors.slurm.cli import SlurmCli

    from .controller import ControllerSettings, SlurmController, fail_open_check, watch_fail_open
    from .journal import JournalError, UnsafeStatePath

    state_db = Path(args.state_db)
    heartbeat = (
        Path(args.heartbeat) if args.heartbeat else state_db.with_name(state_db.name + ".heartbeat")
    )
    partitions = _partitions(args.partition)
    if args.check or args.print_systemd_unit:
        from . import deploy

        try:
            if args.print_systemd_unit:
                return deploy.print_unit(args.controller_parser, args, state_db, heartbeat)
            return deploy.run_checks(args, partitions, state_db, heartbeat)
        except GpuplanError as err:
            print(f"error: {_one_line(err)}", file=sys.stderr)
            return 2
    if args.fail_open_check:
        cli = SlurmCli(timeout=30.0)
        stop = threading.Event()

        def finish(_signum: int, _frame: object) -> None:
            stop.set()

        previous = {sig: signal.signal(sig, finish) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if args.watch is None:
                fail_open_check(cli, heartbeat, args.stale_after, partitions)
            else:
                watch_fail_open(cli, heartbeat, args.stale_after, args.watch, partitions, stop)
        except GpuplanError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0
    if not args.policy:
        print("error: --policy is required (or --fail-open-check)", file=sys.stderr)
        return 2
    try:
        if args.http is not None:  # a missing extra: one line, before anything is touched
            from . import metrics_export  # noqa: F401
        settings = ControllerSettings(
            policy=args.policy,
            state_db=state_db,
            partitions=partitions,
            interval_s=args.interval,
            heartbeat=heartbeat,
            default_duration_s=args.default_duration,
            stop_timeout_s=args.stop_timeout,
            max_stall_s=args.max_stall,
            seed=args.seed,
            restart_gate=args.restart_gate,
            arrival_check_s=args.arrival_check,
            http_port=args.http,
            http_bind=args.http_bind,
            wake_file=None if args.wake_file.lower() == "none" else Path(args.wake_file),
        )
        return SlurmController(settings, connect_timeout_s=args.connect_timeout).run()
    except UnsafeStatePath as err:  # a set-up error, found before anything was created
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return 2
    except JournalError as err:  # an existing journal that cannot be used (docs § 3)
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return 1
    except GpuplanError as err:  # bad options, no Slurm client, slurmctld or partition
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return 2


def _one_line(err: Exception) -> str:
    """A refusal is one line, whatever Slurm or the OS put into the message."""
    return " ".join(str(err).split())


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="gpuplan")
    add_subcommand(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
