"""Run a command while other processes keep the machine's cores busy (``make test-load``).

Why: a suite that is green only on a quiet machine cannot be trusted in CI. This starts
``--workers`` spinning processes (default: one per core) at normal priority, runs the command,
and always stops the spinners, whatever the command's outcome; it prints the load average before
and after so a run's log shows the load it held under. Exit status: the command's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.load", description=__doc__)
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 2,
        help="spinning processes to keep running (default: one per core)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.workers < 0:
        parser.error("give a command after --, and --workers >= 0")

    # A SIGTERM/SIGHUP (a CI timeout, a killed make) must still stop the spinners: turn it
    # into an exception so the ``finally`` below runs. The signals stay blocked until the
    # ``try`` is entered, so one that arrives while the spinners start is delivered there
    # instead of leaving them orphaned.
    def _stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    caught = {signal.SIGTERM, signal.SIGHUP}
    for sig in caught:
        signal.signal(sig, _stop)
    signal.pthread_sigmask(signal.SIG_BLOCK, caught)
    spinners: list[subprocess.Popen[bytes]] = []
    child: subprocess.Popen[bytes] | None = None
    try:
        spinners += [
            subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(args.workers)
        ]
        print(
            f"test-load: {args.workers} busy processes (pids "
            f"{' '.join(str(p.pid) for p in spinners)}); load average {os.getloadavg()}",
            flush=True,
        )
        signal.pthread_sigmask(signal.SIG_UNBLOCK, caught)
        child = subprocess.Popen(command)
        return child.wait()
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, caught)  # no second signal mid-cleanup
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=120)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        print(f"test-load: load average {os.getloadavg()}; stopping the busy processes", flush=True)
        for proc in spinners:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
