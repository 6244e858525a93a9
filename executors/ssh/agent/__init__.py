"""SideCar: the per-job, per-node wrapper that stops and restarts a training process on request.

Why a wrapper (SideCar paper, 004 digest §4.4): changing a job's GPUs means checkpoint, stop,
change ``CUDA_VISIBLE_DEVICES``, restart. Doing that from the engine over SSH for every step
would make the engine the parent of nothing and the owner of every race. The sidecar is the
training process's parent on the node: it starts the command in its own process group with the
planned GPUs, reaps it (so its exit code is known and it never lingers as a zombie), turns a stop
request into "checkpoint signal -> wait -> SIGTERM the group -> SIGKILL the group", and restarts
it on a new GPU set while the wrapper itself stays. Everything it knows is in files, so an engine
that restarts can reconcile by reading them.

This package is **stdlib-only**: the SSH executor bundles its modules into one self-contained
script (``gpuplan.executors.ssh.agent_bundle``; this text is its docstring), uploads that to each
node and runs it with the node's ``python3``; nothing of gpuplan needs to be installed there.
The modules, in the bundle's order: ``files`` (atomic JSON, the event log, ``/proc`` liveness),
``sidecar`` (the daemon), ``commands`` (the client commands), ``nvml_reader`` (GPU inventory),
``program`` (the command line and the agent's JSON-lines server). On the engine host the package
is imported (the NVML reader, tests) and ``python -m gpuplan.executors.ssh.agent`` is the same
program.

Per job and node there is one directory ``DIR`` (under the executor's run root):

``spec.json``     static: job id, node, lease file and its timeout, grace periods.
``control.json``  desired state, written by the engine: ``{"seq", "action": run|stop|exit,
                  "in_place", "gen", "rank", "nranks", "gpus", "devices", "argv", "env", "cwd",
                  "files"}``; ``devices`` (GPU UUIDs, when the engine knows them) is what
                  ``CUDA_VISIBLE_DEVICES`` gets, else the ``gpus`` indices.
``state.json``    actual state, written by the sidecar (atomic): ``phase`` (idle, running,
                  stopping, stopped, completed, failed, fenced, exited), ``seq`` = the last
                  control it finished applying (the ack), sidecar and child PIDs with their
                  ``/proc`` start times, GPUs, exit code, restart count, last stop timings.
``events.jsonl``  append-only history: child start/exit (with GPUs and times), stop requests,
                  fencing. Tests use it to prove no GPU ever ran two jobs at once.
``train.log``     the training command's stdout+stderr.
``resize.json``   ``{"gpus"}``: the GPU set of an in-place resize (a ``run`` control with
                  ``in_place: true`` and only ``gpus``, ``gen``, ``rank``, ``files``), read by
                  the training process on SIGUSR2 (``$GPUPLAN_RESIZE_FILE``). Not acknowledged
                  within the checkpoint grace: the sidecar checkpoint-restarts the run on the
                  new GPUs instead. The state's ``resizes`` history has each request's times.

A stop is requested by writing ``control.json`` (the ``control`` subcommand also sends SIGHUP to
wake the sidecar) or by a signal to the sidecar: SIGUSR1 = checkpoint-stop the job and stay,
SIGTERM/SIGINT = checkpoint-stop and exit. A child that exits after a stop request has stopped
(whatever its code); one that exits on its own with 0 has completed (the sidecar then exits);
any other exit is a failure (the sidecar stays and waits for a restart or exit order).

**Lease (fencing).** Every engine command touches ``<root>/.lease``. If it is older than
``lease_s``, the engine has lost this node (network, sshd, engine crash): the sidecar
checkpoint-stops its job and exits with phase ``fenced``. The engine reports the node failed only
after ``lease_s`` plus the stop grace times, so when it restarts the job elsewhere the old copy has
checkpointed and stopped — a job never runs twice and nothing is lost beyond the checkpoint.

Subcommands (all print one JSON document)::

    sidecar.py agent   [--lease F]                  # JSON-lines RPC on stdin/stdout (below)
                                                    # (+ "inventory": raw NVML answers)
    sidecar.py launch  DIR [--lease F] [--wait S]   # stdin {"spec", "control"}; start the daemon
    sidecar.py control DIR [--lease F] [--wait S]   # stdin: control; wake the daemon; wait for ack
    sidecar.py status  ROOT [--lease F]             # every job dir under ROOT, liveness, files
    sidecar.py read    PATH... [--glob]             # JSON files (checkpoints) by path/pattern
    sidecar.py kill    DIR [--wait S]               # clean up a dead/stuck sidecar and its job
    sidecar.py serve   DIR                          # the daemon itself (started by launch)

The engine normally keeps one ``agent`` per node on one SSH channel and sends it requests
``{"id", "cmd", "args"}`` (the same commands as above, arguments as JSON); it answers
``{"id", "ok", "result" | "error"}``. That avoids one SSH exec — and the remote login shell's
start-up — per operation.
"""

from __future__ import annotations

from .commands import cmd_control, cmd_kill, cmd_launch, cmd_read, cmd_status
from .files import (
    ACK_POLL_S,
    PROTOCOL,
    append_event,
    parse_proc_stat,
    pid_alive,
    proc_info,
    read_json,
    touch,
    write_json_atomic,
)
from .nvml_reader import XID_KEEP_S, NvmlReader
from .program import NVML, dispatch, main, serve_agent
from .sidecar import HISTORY, LOOP_S, Sidecar

__all__ = [
    "ACK_POLL_S",
    "HISTORY",
    "LOOP_S",
    "NVML",
    "PROTOCOL",
    "XID_KEEP_S",
    "NvmlReader",
    "Sidecar",
    "append_event",
    "cmd_control",
    "cmd_kill",
    "cmd_launch",
    "cmd_read",
    "cmd_status",
    "dispatch",
    "main",
    "parse_proc_stat",
    "pid_alive",
    "proc_info",
    "read_json",
    "serve_agent",
    "touch",
    "write_json_atomic",
]
