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
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                        help="spinning processes to keep running (default: one per core)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.workers < 0:
        parser.error("give a command after --, and --workers >= 0")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                 start_new_session=True) for _ in range(args.workers)]
    print(f"test-load: {args.workers} busy processes; load average {os.getloadavg()}",
          flush=True)
    try:
        return subprocess.call(command)
    finally:
        print(f"test-load: load average {os.getloadavg()}; stopping the busy processes",
              flush=True)
        for proc in spinners:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
