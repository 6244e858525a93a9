"""The program's front door: the command line, and the agent's JSON-lines server.

Why apart: this is the only part the engine talks to directly (``<script> agent`` on each
node, or one ``<script> COMMAND`` per SSH exec), so the protocol — command names, arguments,
replies — is decided here in one place and maps onto :mod:`.commands`, the
:class:`~.sidecar.Sidecar` daemon and the :class:`~.nvml_reader.NvmlReader`. Stdlib-only, like
the whole package.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .commands import cmd_control, cmd_kill, cmd_launch, cmd_read, cmd_status
from .files import touch
from .nvml_reader import NvmlReader
from .sidecar import Sidecar

NVML = NvmlReader()


def dispatch(request: dict[str, Any], lease: str | None) -> dict[str, Any]:
    """Run one agent request ``{"cmd", "args"}``. Every request renews the node's lease."""
    touch(lease)
    cmd, args = request.get("cmd"), request.get("args") or {}
    wait = float(args.get("wait", 60.0))
    if cmd == "status":
        return cmd_status(Path(args["root"]))
    if cmd == "launch":
        return cmd_launch(Path(args["dir"]), args["bundle"], wait)
    if cmd == "control":
        return cmd_control(Path(args["dir"]), args["control"], wait)
    if cmd == "read":
        return cmd_read([str(p) for p in args["paths"]], bool(args.get("glob")))
    if cmd == "kill":
        return cmd_kill(Path(args["dir"]), wait)
    if cmd == "ping":
        return {"pid": os.getpid(), "time": time.time()}
    if cmd == "inventory":
        return NVML.answers()
    raise ValueError(f"unknown command {cmd!r}")


def serve_agent(lease: str | None) -> int:
    """JSON-lines request/response on stdin/stdout, one thread per request.

    One agent per node and engine connection replaces one SSH exec (fork, login shell, Python
    start-up) per operation. It holds no job state: it ends when its channel closes, and the
    sidecars it started live on in their own sessions.
    """
    lock = threading.Lock()

    def handle(request: dict[str, Any]) -> None:
        try:
            reply = {"id": request.get("id"), "ok": True, "result": dispatch(request, lease)}
        except Exception as exc:  # the agent must answer every request
            reply = {"id": request.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        with lock:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()

    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            request = {"id": None, "cmd": "invalid", "args": {}, "error": str(exc)}
        threading.Thread(target=handle, args=(request,), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sidecar.py")
    parser.add_argument(
        "command", choices=["agent", "launch", "control", "status", "read", "kill", "serve"]
    )
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--lease", default=None, help="touch this lease file first")
    parser.add_argument("--wait", type=float, default=60.0, help="seconds to wait for an ack")
    parser.add_argument("--glob", action="store_true", help="read: paths are glob patterns")
    args = parser.parse_args(argv)
    if args.command == "agent":
        return serve_agent(args.lease)
    if not args.paths:
        parser.error(f"{args.command} needs a path")
    first = Path(args.paths[0])
    if args.command == "serve":
        return Sidecar(first).serve()
    touch(args.lease)
    if args.command == "launch":
        out = cmd_launch(first, json.load(sys.stdin), args.wait)
    elif args.command == "control":
        out = cmd_control(first, json.load(sys.stdin), args.wait)
    elif args.command == "status":
        out = cmd_status(first)
    elif args.command == "read":
        out = cmd_read(args.paths, args.glob)
    else:
        out = cmd_kill(first, args.wait)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0
