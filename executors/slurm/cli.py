"""A typed adapter around Slurm's command-line tools (sbatch, squeue, sinfo, scontrol, scancel).

Why the CLI and not a library: pyslurm binds exactly one Slurm major release (25.11 today) and
cannot be built against a site's 22.05, while the commands and their ``--json`` output exist on
every release we target. Everything here goes through one place, :meth:`SlurmCli.run`, which

* runs a command as an **argument list** (``shell=False``; nothing the engine passes — job names,
  commands, comments — is ever parsed by a shell on the engine side),
* passes ``SLURM_CONF`` and friends through an explicit environment (tests point it at the lab),
* turns a non-zero exit into a typed :class:`SlurmError` subclass chosen from Slurm's own failure
  message, so callers can react (retry while the controller restarts, ignore "already pending",
  replan when a node is down) without string matching of their own.

JSON is parsed defensively: Slurm's OpenAPI schema changes between releases (v0.0.38 in 22.05,
v0.0.39 in 23.02, data_parser v0.0.40+ later), so fields are read with fallbacks and the parsed
records keep the raw dictionary for anything not modelled.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuplan.models import GpuplanError

from .cli_parsing import (  # noqa: F401  (re-exported: importers use this module's path)
    ACTIVE_STATES,
    NODE_BAD_STATES,
    TERMINAL_STATES,
    SlurmJob,
    SlurmNode,
    _first,
    _natural_key,
    _number,
    compress_hostlist,
    expand_hostlist,
    gpus_in_tres,
    parse_job_gpus,
)

# ---------------------------------------------------------------------------------------- errors


class SlurmError(GpuplanError):
    """A Slurm command failed. ``argv``, ``returncode`` and ``stderr`` say which and how."""

    def __init__(
        self,
        message: str,
        *,
        argv: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(message)


class ControllerUnavailable(SlurmError):
    """slurmctld cannot be reached (down, restarting, or the command timed out): retry later."""


class InvalidJobId(SlurmError):
    """The job does not exist (never did, or it aged out of slurmctld after ``MinJobAge``)."""


class JobNotPending(SlurmError):
    """The change is only allowed for pending jobs (e.g. ``TresPerNode`` of a running job)."""


class JobPending(SlurmError):
    """The operation needs a started job (e.g. signalling a job that is still pending)."""


class JobFinished(SlurmError):
    """The job already completed (signal/cancel of a finished job)."""


class AccessDenied(SlurmError):
    """Slurm (or the site's job_submit hook) refused the caller: not owner/operator."""


class NodeDown(SlurmError):
    """A node named in the request is unknown, down, drained or otherwise unusable."""


class InvalidNodeCount(SlurmError):
    """Node count specification invalid (e.g. ``NumNodes=2`` for a ``-N1`` job: use ``2-2``)."""


class JobBusy(SlurmError):
    """The job is in a transition (completing, DB index being set): retry shortly."""


class SubmitRejected(SlurmError):
    """sbatch refused the job (bad options, no such partition, hook rejection, ...)."""


class SlurmSetupError(SlurmError):
    """The Slurm set-up cannot work at all: no client installed, no usable configuration,
    slurmctld unreachable for the whole start-up wait, or an unknown partition. Found by
    :meth:`SlurmCli.check_setup` before a daemon creates anything; not worth a retry loop."""


# Order matters: the first pattern that matches Slurm's stderr decides the class.
_PATTERNS: tuple[tuple[re.Pattern[str], type[SlurmError]], ...] = tuple(
    (re.compile(p, re.IGNORECASE), cls)
    for p, cls in (
        (
            r"unable to contact slurm controller|connection refused|socket timed out|"
            r"slurm_receive_msg|zero bytes were transmitted|communication connection failure|"
            r"controller is not responding|slurmctld.*not responding",
            ControllerUnavailable,
        ),
        (r"access/permission denied|access denied|not authorized|permission denied", AccessDenied),
        (r"invalid job id|job id .* not found|no such job|unknown job", InvalidJobId),
        (r"no longer pending|job is not pending", JobNotPending),
        (r"job is pending execution|job is still pending", JobPending),
        (
            r"already completing or completed|job has already finished|job is already finished|"
            r"already complete",
            JobFinished,
        ),
        (
            r"db index is being set|job update not available right now|"
            r"presently disabled|try again later|resource temporarily unavailable",
            JobBusy,
        ),
        (r"node count specification invalid", InvalidNodeCount),
        (
            r"invalid node name|node .* (is )?down|requested node configuration is not available|"
            r"required node not available|nodes? required for job are down",
            NodeDown,
        ),
        (r"batch job submission failed|sbatch: error", SubmitRejected),
    )
)


def classify(stderr: str) -> type[SlurmError]:
    """The :class:`SlurmError` subclass for a Slurm failure message (``SlurmError`` if unknown)."""
    for pattern, cls in _PATTERNS:
        if pattern.search(stderr):
            return cls
    return SlurmError


# ---------------------------------------------------------------------------------------- records
# Hostlists, TRES strings and the squeue/sinfo JSON records live in .cli_parsing (imported above).


def one_line(text: str, limit: int = 300) -> str:
    """Slurm's multi-line complaints as one line (for one-line refusals), bounded."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


CLIENT_COMMANDS = ("sinfo", "squeue", "scontrol", "scancel")
"""The Slurm client commands a controller needs (sbatch only submits, which it never does)."""


# ---------------------------------------------------------------------------------------- adapter


class SlurmCli:
    """Runs Slurm commands for one cluster.

    ``env`` is merged over ``os.environ`` for every command (``SLURM_CONF`` selects the cluster).
    ``timeout`` bounds one command; a command that times out is reported as
    :class:`ControllerUnavailable` (a hung RPC is what a dying controller looks like).
    ``unavailable_retry_s`` > 0 makes *idempotent* calls retry that long while the controller is
    unreachable (sbatch is never retried here: the caller must first check whether the lost
    submission went through).
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        timeout: float = 30.0,
        unavailable_retry_s: float = 0.0,
        bindir: str | Path | None = None,
    ) -> None:
        self.env = dict(os.environ)
        if env:
            self.env.update(env)
        self.timeout = timeout
        self.unavailable_retry_s = unavailable_retry_s
        self.bindir = Path(bindir) if bindir else None
        self.calls = 0

    # ------------------------------------------------------------------ plumbing
    def _exe(self, name: str) -> str:
        return str(self.bindir / name) if self.bindir else name

    def run(
        self, argv: Sequence[str], *, retry: bool = False, input_text: str | None = None
    ) -> str:
        """Run ``argv`` (a list: never a shell string) and return stdout; raise on failure."""
        if isinstance(argv, str):  # a string here would be a bug: refuse rather than split it
            raise TypeError("SlurmCli.run takes an argument list, not a string")
        argv = [self._exe(argv[0]), *argv[1:]]
        deadline = time.monotonic() + (self.unavailable_retry_s if retry else 0.0)
        delay = 0.25
        while True:
            try:
                return self._run_once(argv, input_text)
            except ControllerUnavailable:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _run_once(self, argv: list[str], input_text: str | None) -> str:
        self.calls += 1
        try:
            proc = subprocess.run(
                argv,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                input=input_text,
                stdin=None if input_text is not None else subprocess.DEVNULL,
                shell=False,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ControllerUnavailable(
                f"{argv[0]} timed out after {self.timeout:g} s", argv=argv
            ) from exc
        except FileNotFoundError as exc:
            raise SlurmError(
                f"{argv[0]} not found: is Slurm's client installed?", argv=argv
            ) from exc
        if proc.returncode != 0:
            stderr = (proc.stderr or proc.stdout or "").strip()
            cls = classify(stderr)
            raise cls(
                f"{' '.join(argv[:2])} failed ({proc.returncode}): {stderr}",
                argv=argv,
                returncode=proc.returncode,
                stderr=stderr,
            )
        # Some scontrol failures exit 0 but print the error (e.g. per-job errors in a list).
        if proc.stderr and classify(proc.stderr) is not SlurmError and argv[0].endswith("scontrol"):
            stderr = proc.stderr.strip()
            cls = classify(stderr)
            raise cls(f"{' '.join(argv[:2])}: {stderr}", argv=argv, returncode=0, stderr=stderr)
        return proc.stdout

    def run_json(self, argv: Sequence[str]) -> dict[str, Any]:
        """Run a ``--json`` command and return the document.

        22.05's squeue/sinfo exit 0 even when slurmctld is unreachable: they print a document
        with an ``errors`` list and *no jobs/nodes*. Taking that at face value would make every
        job look gone, so a non-empty ``errors`` list is raised as :class:`ControllerUnavailable`
        (and retried like any other unavailability).
        """
        deadline = time.monotonic() + self.unavailable_retry_s
        delay = 0.25
        while True:
            try:
                out = self.run(argv)
                try:
                    data = json.loads(out or "{}")
                except ValueError as exc:
                    raise SlurmError(
                        f"{argv[0]} printed invalid JSON: {exc}", argv=list(argv)
                    ) from exc
                errors = data.get("errors") or []
                if errors:
                    text = "; ".join(
                        str(e.get("description") or e.get("error") or e)
                        for e in errors
                        if isinstance(e, dict)
                    ) or str(errors)
                    raise ControllerUnavailable(
                        f"{argv[0]} reported errors: {text}", argv=list(argv), stderr=text
                    )
                return data
            except ControllerUnavailable:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    # ------------------------------------------------------------------ queries
    def ping(self) -> bool:
        """True when slurmctld answers."""
        try:
            out = self._run_once([self._exe("scontrol"), "ping"], None)
        except SlurmError:
            return False
        return "UP" in out

    def jobs(
        self, job_ids: Iterable[int] | None = None, *, all_states: bool = True
    ) -> list[SlurmJob]:
        """Jobs from ``squeue --json`` (finished ones too while slurmctld remembers them)."""
        argv = ["squeue", "--json"]
        ids = sorted(set(job_ids)) if job_ids is not None else None
        if ids is not None:
            if not ids:
                return []
            argv.append("--jobs=" + ",".join(str(i) for i in ids))
        if all_states:
            argv.append("--states=all")
        try:
            data = self.run_json(argv)
        except InvalidJobId:
            # squeue --jobs fails when *every* listed job has aged out; report none.
            return []
        jobs = [SlurmJob.from_json(j) for j in data.get("jobs") or []]
        if ids is not None:  # 22.05's --json ignores some filters: apply them ourselves
            wanted = set(ids)
            jobs = [j for j in jobs if j.job_id in wanted]
        return jobs

    def job(self, job_id: int) -> SlurmJob | None:
        found = self.jobs([job_id])
        return found[0] if found else None

    def job_gpus(self, job_id: int) -> dict[str, tuple[int, ...]]:
        """node -> GPU indices Slurm actually assigned to a running job (``scontrol show job
        -d``: ``Nodes=n1 ... GRES=gpu:a100:2(IDX:0-1)``); empty when it runs nowhere. The only
        source of an uneven split's per-node counts: ``squeue --json`` gives nodes only."""
        out = self.run([self._exe("scontrol"), "show", "job", "-d", str(job_id)])
        return parse_job_gpus(out)

    def nodes(self) -> list[SlurmNode]:
        """Nodes from ``sinfo --json`` (one record per node, deduplicated across partitions)."""
        data = self.run_json(["sinfo", "--json"])
        seen: dict[str, SlurmNode] = {}
        for raw in data.get("nodes") or []:
            node = SlurmNode.from_json(raw)
            seen.setdefault(node.name, node)
        return sorted(seen.values(), key=lambda n: _natural_key(n.name))

    def partitions(self) -> dict[str, tuple[str, ...]]:
        """Partition name -> its nodes, from ``scontrol show partition --oneliner`` (also
        partitions without nodes, which ``sinfo`` leaves out)."""
        out = self.run(["scontrol", "show", "partition", "--oneliner"])
        found: dict[str, tuple[str, ...]] = {}
        for line in out.splitlines():
            name = re.search(r"(?:^|\s)PartitionName=(\S+)", line)
            if name is None:
                continue
            nodes = re.search(r"(?:^|\s)Nodes=(\S+)", line)
            value = nodes.group(1) if nodes else ""
            found[name.group(1)] = tuple(expand_hostlist(value)) if value != "(null)" else ()
        return found

    def missing_commands(self, names: Iterable[str] = CLIENT_COMMANDS) -> list[str]:
        """Which of ``names`` cannot be run (not in ``bindir``, or not on this client's
        ``PATH``)."""
        if self.bindir is not None:
            return [n for n in names if not os.access(self.bindir / n, os.X_OK)]
        path = self.env.get("PATH", os.defpath)
        return [n for n in names if shutil.which(n, path=path) is None]

    def check_setup(
        self,
        partitions: Sequence[str] = (),
        wait_s: float = 60.0,
        stop: threading.Event | None = None,
    ) -> list[SlurmNode]:
        """Fail fast on a set-up that cannot work, before a daemon creates any state.

        1. every :data:`CLIENT_COMMANDS` is installed;
        2. ``sinfo --json`` answers within ``wait_s`` (slurmctld restarting or failing over is
           waited for; the last attempt may run up to ``timeout`` past ``wait_s`` — Slurm's
           client retries its connect for 10 to 20 s by itself; a client error that is not
           "cannot reach the controller", such as a missing ``slurm.conf`` or munge failure,
           is refused at once);
        3. each of ``partitions`` exists and together they hold at least one GPU node (with
           no partitions: the cluster has a GPU node).

        Returns the nodes; raises :class:`SlurmSetupError` (one line) otherwise. ``stop``
        (when set) ends the wait early."""
        missing = self.missing_commands()
        if missing:
            raise SlurmSetupError(
                f"Slurm client not found: {', '.join(missing)} not on PATH "
                "(install Slurm's client commands, e.g. the slurm-client "
                "package, or fix PATH)"
            )
        stop = stop or threading.Event()
        deadline = time.monotonic() + wait_s
        delay = 0.5
        while True:
            try:
                nodes = self.nodes()
                break
            except ControllerUnavailable as err:
                if time.monotonic() + delay > deadline or stop.is_set():
                    # 22.05's sinfo says no more than "Unspecified error": name the config.
                    conf = self.env.get("SLURM_CONF")
                    where = f"; SLURM_CONF={conf}" if conf else ""
                    raise SlurmSetupError(
                        f"slurmctld unreachable: no answer to sinfo --json within {wait_s:g} s "
                        f"(--connect-timeout{where}): {one_line(err.stderr or str(err))}"
                    ) from None
                stop.wait(delay)
                delay = min(delay * 2, 5.0)
            except SlurmSetupError:
                raise
            except SlurmError as err:
                raise SlurmSetupError(
                    f"Slurm client cannot work: {one_line(err.stderr or str(err))}"
                ) from None
        wanted = list(dict.fromkeys(partitions))
        if wanted:
            try:
                known = self.partitions()
            except SlurmError as err:
                raise SlurmSetupError(
                    f"cannot list partitions: {one_line(err.stderr or str(err))}"
                ) from None
            unknown = [p for p in wanted if p not in known]
            if unknown:
                raise SlurmSetupError(
                    f"unknown partition{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(map(repr, unknown))} (slurmctld has: "
                    f"{one_line(', '.join(sorted(known)) or 'none', 200)})"
                )
        gpu_nodes = [
            n
            for n in nodes
            if n.gpus > 0 and (not wanted or set(wanted) & set(n.raw.get("partitions") or []))
        ]
        if not gpu_nodes:
            where = (
                f"partition{'s' if len(wanted) > 1 else ''} {', '.join(wanted)}"
                if wanted
                else "the cluster"
            )
            raise SlurmSetupError(f"no GPU node in {where} (no node with Gres=gpu:N)")
        return nodes

    def show_config(self) -> dict[str, str]:
        """``scontrol show config`` as a dict (keys as Slurm prints them)."""
        out = self.run(["scontrol", "show", "config"], retry=True)
        result: dict[str, str] = {}
        for line in out.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                result[key.strip()] = value.strip()
        return result

    # ------------------------------------------------------------------ actions
    def sbatch(
        self,
        script: str | Path | None,
        script_args: Sequence[str] = (),
        options: Sequence[str] = (),
    ) -> int:
        """Submit ``script`` with ``options``; return the job id.

        ``script_args`` reach the batch script as its argv, byte for byte: sbatch stops option
        parsing at the script path, and no shell sees them. ``script=None`` is for options that
        carry the script themselves (``--wrap``).
        """
        if script is None and script_args:
            raise ValueError("script_args need a script")
        tail = [str(script), *script_args] if script is not None else []
        out = self.run(["sbatch", "--parsable", *options, *tail])
        first = out.strip().splitlines()[-1] if out.strip() else ""
        match = re.match(r"^(\d+)", first)
        if not match:
            raise SlurmError(f"sbatch printed no job id: {out!r}", argv=["sbatch"])
        return int(match.group(1))

    def signal(self, job_id: int, signal: str = "USR1", *, full: bool = True) -> None:
        """Send ``signal`` to the job's processes (``--full``: the batch step and its children
        too; plain ``scancel -s`` would skip the batch step, which is where a single-process job
        such as the stand-in runs)."""
        argv = ["scancel", f"--signal={signal}"]
        if full:
            argv.append("--full")
        self.run([*argv, str(job_id)], retry=True)

    def cancel(self, job_id: int) -> None:
        self.run(["scancel", str(job_id)], retry=True)

    def requeue(self, job_id: int, *, hold: bool = True) -> None:
        """Back to PENDING under the same job id (``requeuehold`` keeps it held)."""
        self.run(["scontrol", "requeuehold" if hold else "requeue", str(job_id)], retry=True)

    def hold(self, job_id: int) -> None:
        self.run(["scontrol", "hold", str(job_id)], retry=True)

    def release(self, job_id: int) -> None:
        self.run(["scontrol", "release", str(job_id)], retry=True)

    def update_job(self, job_id: int, **fields: str | int) -> None:
        """``scontrol update JobId=J Key=Value ...``; each pair is one argv element."""
        if not fields:
            return
        pairs = [f"{k}={v}" for k, v in fields.items()]
        for pair in pairs:
            if "\n" in pair:
                raise ValueError(f"newline in scontrol field {pair!r}")
        self.run(["scontrol", "update", f"JobId={job_id}", *pairs], retry=True)

    def update_node(
        self, names: str | Sequence[str], state: str, reason: str | None = None
    ) -> None:
        node_list = names if isinstance(names, str) else compress_hostlist(names)
        argv = ["scontrol", "update", f"NodeName={node_list}", f"State={state}"]
        if reason is not None:
            argv.append(f"Reason={reason}")
        self.run(argv, retry=True)
