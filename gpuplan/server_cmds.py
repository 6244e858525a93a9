"""``gpuplan server``, ``submit``, ``cancel`` and ``status --server``: the single-server
commands (executors/local; docs/single-server.md). Registering them loads no executor code:
a client command imports only the socket client, the daemon everything else when it starts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

from gpuplan.models import InputError


def _state_dir(args: argparse.Namespace) -> Path:
    from gpuplan.executors.local.statedir import default_state_dir

    given = getattr(args, "server", None) or getattr(args, "state_dir", None)
    return Path(given) if given else default_state_dir()


def cmd_server(args: argparse.Namespace) -> int:
    from gpuplan.executors.local.gpus import choose_gpus
    from gpuplan.executors.local.server import Server, ServerOptions
    from gpuplan.solver_core.registry import make_policy

    if args.poll <= 0 or args.lease < 0 or args.ckpt_grace <= 0:
        bad = "--poll" if args.poll <= 0 else "--lease" if args.lease < 0 else "--ckpt-grace"
        raise InputError("must be positive", field=bad)
    if not 0 < args.keep_finished <= 36500:  # NaN and infinity fail too
        raise InputError(f"{args.keep_finished}: days, in (0, 36500]", field="--keep-finished")
    make_policy(args.policy, args.seed)  # an unknown policy is refused here, in one line
    options = ServerOptions(
        state_dir=_state_dir(args),
        gpus=choose_gpus(args.gpus),
        policy=args.policy,
        seed=args.seed,
        poll_s=args.poll,
        lease_s=args.lease,
        ckpt_grace_s=args.ckpt_grace,
        restart_gate=args.restart_gate,
        keep_finished_s=args.keep_finished * 86400.0,
    )
    # Logging only once the options are accepted: a refusal stays one line.
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    Server(options).run()
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from gpuplan.executors.local.wire import request

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InputError(
            "no command to run: gpuplan submit --gpus N -- CMD ARGS...", field="command"
        )
    lo = args.min if args.min is not None else args.gpus
    hi = args.max if args.max is not None else args.gpus
    if lo > hi:
        raise InputError(f"--min {lo} is more than --max {hi}", field="--min")
    for flag, value in (("--work", args.work), ("--duration", args.duration)):
        if value is not None and not value > 0:
            raise InputError(f"{value}: must be positive", field=flag)
    for flag, value in (("--memory", args.memory), ("--compute", args.compute)):
        if value is not None and not 0 < value <= 1:
            raise InputError(f"{value}: a fraction of one GPU, in (0, 1]", field=flag)
    result = request(
        _state_dir(args),
        "submit",
        {
            "argv": command,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "gpus": args.gpus,
            "min_gpus": lo,
            "max_gpus": hi,
            "name": args.name or "",
            "work": args.work,
            "duration": args.duration,
            "memory": args.memory,
            "compute": args.compute,
        },
    )
    print(result["id"])
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from gpuplan.executors.local.wire import request

    result = request(_state_dir(args), "cancel", {"id": args.job})
    print(f"{result['id']}: {result['state']}")
    return 0


def server_status(state_dir: str | None, as_json: bool) -> int:
    """``gpuplan status --server [DIR]``: the running server's jobs."""
    from gpuplan.executors.local.statedir import default_state_dir
    from gpuplan.executors.local.wire import request

    data = request(Path(state_dir) if state_dir else default_state_dir(), "status", {})
    if as_json:
        print(json.dumps(data, indent=2))
        return 0
    srv = data["server"]
    print(
        f"gpuplan server pid {srv['pid']}: {srv['gpus']} GPU(s) ({srv['devices']}), "
        f"policy {srv['policy']}, state {srv['state_dir']}"
    )
    print(
        f"{'JOB':<8} {'STATE':<10} {'GPUS':>4} {'RANGE':>6} {'DONE':>12} "
        f"{'PLACEMENT':<16} NAME/COMMAND"
    )
    for job in data["jobs"]:
        work = job["work"]
        done = f"{job['done']:.0f}/{work:.0f}" if work else "-"
        label = job["name"] or " ".join(job["argv"])[:60]
        state = job["state"] + (
            "*" if job["cancel_requested"] and job["state"] != "cancelled" else ""
        )
        print(
            f"{job['id']:<8} {state:<10} {job['gpus']:>4} "
            f"{str(job['min_gpus']) + '-' + str(job['max_gpus']):>6} {done:>12} "
            f"{job['placement'] or '-':<16} {label}"
            + (f"  ({job['reason']})" if job["reason"] else "")
        )
    return 0


def add_subcommands(sub: Any) -> None:
    """Register ``server``, ``submit`` and ``cancel`` on the CLI's subparsers."""
    srv = sub.add_parser("server", help="run the single-server daemon (jobs on this host's GPUs)")
    srv.add_argument(
        "--gpus",
        default=None,
        help="a count (first N GPUs) or a list of indices/UUIDs (0,2 or GPU-...); default: "
        "every GPU NVML reports",
    )
    srv.add_argument("--policy", required=True, help="allocation policy (gpuplan policies)")
    srv.add_argument(
        "--state-dir",
        default=None,
        help="private state dir (default $XDG_RUNTIME_DIR/gpuplan-server or "
        "~/.local/state/gpuplan/server)",
    )
    srv.add_argument("--seed", type=int, default=0, help="seed of the policy's random choices")
    srv.add_argument("--poll", type=float, default=0.5, help="seconds between job polls")
    srv.add_argument(
        "--lease",
        type=float,
        default=30.0,
        help="jobs checkpoint-stop when no server has polled them for this long (0: never)",
    )
    srv.add_argument(
        "--ckpt-grace", type=float, default=30.0, help="seconds a job has to checkpoint and exit"
    )
    srv.add_argument(
        "--keep-finished",
        type=float,
        default=7.0,
        metavar="DAYS",
        help="days an ended job stays in the journal, its files and checkpoints in the state "
        "dir (default 7); then both are removed",
    )
    srv.add_argument(
        "--no-restart-gate",
        dest="restart_gate",
        action="store_false",
        help="carry out every change the policy plans, even one whose restart costs more "
        "than it gains (default: the restart gate skips those)",
    )
    srv.set_defaults(func=cmd_server)

    sm = sub.add_parser("submit", help="submit a job to the single server; prints its id")
    sm.add_argument("--gpus", type=int, required=True, help="GPUs wanted")
    sm.add_argument("--min", type=int, default=None, help="fewest GPUs it can run on (elastic)")
    sm.add_argument("--max", type=int, default=None, help="most GPUs it can use (elastic)")
    sm.add_argument("--name", default=None, help="a label shown by status")
    sm.add_argument(
        "--work",
        type=float,
        default=None,
        help="iterations: the command follows the job protocol (checkpoints in "
        "$GPUPLAN_STATE_DIR/$GPUPLAN_JOB_ID.ckpt) and the server accounts its progress",
    )
    sm.add_argument("--duration", type=float, default=None, help="estimated seconds at --gpus")
    sm.add_argument(
        "--memory",
        type=float,
        default=None,
        help="fraction of one GPU's memory each worker needs (0-1]: the job may share GPUs "
        "under an OJPP policy (fifo-ojpp)",
    )
    sm.add_argument(
        "--compute",
        type=float,
        default=None,
        help="fraction of one GPU's compute each worker uses (0-1], default 1 (OJPP's alpha)",
    )
    sm.add_argument("--server", default=None, help="the server's state dir")
    sm.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    sm.set_defaults(func=cmd_submit)

    cn = sub.add_parser("cancel", help="cancel a job of the single server")
    cn.add_argument("job", help="the job id (jN)")
    cn.add_argument("--server", default=None, help="the server's state dir")
    cn.set_defaults(func=cmd_cancel)
