"""Parsing of what Slurm's commands print: hostlists, TRES/GRES strings and the job/node records
of ``squeue --json`` / ``sinfo --json``.

Why a module of its own: this is pure data handling with no processes, no environment and no
error classification — it changes when Slurm's output formats or JSON schemas change (v0.0.38 in
22.05, v0.0.39 in 23.02, data_parser v0.0.40+ later), not when the way commands are run changes.
:mod:`.cli` runs the commands and re-exports every name here, so importers keep using ``.cli``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
        "SPECIAL_EXIT",
    }
)
"""Job states after which nothing runs (the record stays in slurmctld for ``MinJobAge``)."""

ACTIVE_STATES = frozenset(
    {
        "RUNNING",
        "COMPLETING",
        "CONFIGURING",
        "SUSPENDED",
        "STAGE_OUT",
        "SIGNALING",
        "RESIZING",
    }
)
"""States in which some of the job's processes may still hold GPUs."""

NODE_BAD_STATES = frozenset(
    {
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "FAIL",
        "FAILING",
        "FUTURE",
        "UNKNOWN",
        "POWERED_DOWN",
        "POWER_DOWN",
        "INVAL",
    }
)


def _first(value: Any) -> str:
    """Slurm 22.05 gives scalar strings, later releases lists of flags: take the first."""
    if isinstance(value, list):
        return str(value[0]) if value else ""
    return "" if value is None else str(value)


def _number(value: Any) -> int | None:
    """Numbers are plain in v0.0.38 and ``{"set": .., "infinite": .., "number": ..}`` later."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def expand_hostlist(expr: str) -> list[str]:
    """``"node[1-3,5],gpu7"`` -> ``["node1", "node2", "node3", "node5", "gpu7"]``.

    A small pure-Python version of ``scontrol show hostnames`` (one bracket group per name, zero
    padding kept), so parsing ``squeue`` output costs no extra process per job.
    """
    names: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expr or ""):
        match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", item)
        if not match:
            if item:
                names.append(item)
            continue
        prefix, ranges, suffix = match.groups()
        for part in ranges.split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                width = len(lo) if lo.startswith("0") else 0
                names.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(int(lo), int(hi) + 1))
            elif part:
                names.append(f"{prefix}{part}{suffix}")
    return names


def parse_job_gpus(text: str) -> dict[str, tuple[int, ...]]:
    """The per-node GPU indices of ``scontrol show job -d`` output (see :meth:`SlurmCli.job_gpus`);
    a node line without GPU indices counts as holding none."""
    found: dict[str, tuple[int, ...]] = {}
    for match in re.finditer(r"^\s*Nodes=(\S+)\s.*?(?:GRES=(\S*))?\s*$", text, re.M):
        gres = match.group(2) or ""
        gpus: list[int] = []
        for idx in re.findall(r"gpu[^(,]*\(IDX:([^)]*)\)", gres):
            for part in idx.split(","):
                if "-" in part:
                    lo, hi = part.split("-", 1)
                    gpus.extend(range(int(lo), int(hi) + 1))
                elif part.isdigit():
                    gpus.append(int(part))
        for node in expand_hostlist(match.group(1)):
            found[node] = tuple(sorted(set(gpus)))
    return found


def compress_hostlist(names: Iterable[str]) -> str:
    """Comma-separated names; Slurm accepts this everywhere a hostlist is expected."""
    return ",".join(sorted(set(names), key=_natural_key))


def _natural_key(name: str) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def gpus_in_tres(spec: str | None) -> int:
    """GPU count in a TRES/GRES string: ``gres:gpu:a100:2`` / ``gpu:2`` / ``gres/gpu=2`` -> 2."""
    total = 0
    for part in (spec or "").split(","):
        match = re.match(r"^(?:gres[:/])?gpu(?::[^:=(]+)?[:=](\d+)", part.strip())
        if match:
            total += int(match.group(1))
    return total


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job from ``squeue --json`` (fields common to the schemas we know)."""

    job_id: int
    name: str
    state: str
    reason: str
    nodes: tuple[str, ...]
    partition: str
    comment: str
    admin_comment: str
    restart_count: int
    user_id: int | None
    priority: int | None
    tres_per_node: str
    tres_per_job: str
    exit_code: int | None
    batch_host: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def held(self) -> bool:
        """Pending with priority 0 (``scontrol hold``, ``--hold`` or the job_submit hook)."""
        return self.state == "PENDING" and (self.priority == 0 or "Held" in self.reason)

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SlurmJob:
        exit_code = raw.get("exit_code")
        if isinstance(exit_code, dict):  # 23.02+: {"status": .., "return_code": ..}
            exit_code = _number(exit_code.get("return_code"))
        else:
            exit_code = _number(exit_code)
        return cls(
            job_id=int(raw["job_id"]),
            name=str(raw.get("name") or ""),
            state=_first(raw.get("job_state")).upper(),
            reason=str(raw.get("state_reason") or ""),
            nodes=tuple(expand_hostlist(str(raw.get("nodes") or ""))),
            partition=str(raw.get("partition") or ""),
            comment=str(raw.get("comment") or ""),
            admin_comment=str(raw.get("admin_comment") or ""),
            restart_count=_number(raw.get("restart_cnt")) or 0,
            user_id=_number(raw.get("user_id")),
            priority=_number(raw.get("priority")),
            tres_per_node=str(raw.get("tres_per_node") or ""),
            tres_per_job=str(raw.get("tres_per_job") or ""),
            exit_code=exit_code,
            batch_host=str(raw.get("batch_host") or ""),
            raw=dict(raw),
        )


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One node from ``sinfo --json``."""

    name: str
    state: str
    flags: tuple[str, ...]
    gres: str
    gres_used: str
    reason: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def gpus(self) -> int:
        return gpus_in_tres(self.gres)

    @property
    def gpu_type(self) -> str | None:
        match = re.search(r"gpu:([^:(,]+):\d+", self.gres)
        return match.group(1) if match else None

    @property
    def usable(self) -> bool:
        """Can run (new or restarted) jobs: not down, drained, failed or unreachable.

        ``NOT_RESPONDING`` (``sinfo``'s ``*``) counts at once, whatever the base state: slurmctld
        keeps such a node IDLE/MIXED until ``SlurmdTimeout`` marks it DOWN, and a job placed
        there in between fails to launch (issue 16: two jobs started 88 s late)."""
        states = {self.state, *self.flags}
        return not (states & NODE_BAD_STATES or "NOT_RESPONDING" in states)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SlurmNode:
        state = raw.get("state")
        flags = raw.get("state_flags") or []
        if isinstance(state, list):  # 23.02+: a list of base state + flags
            flags = [*state[1:], *flags]
            state = state[0] if state else ""
        return cls(
            name=str(raw.get("name") or raw.get("hostname") or ""),
            state=str(state or "").upper(),
            flags=tuple(str(f).upper() for f in flags),
            gres=str(raw.get("gres") or ""),
            gres_used=str(raw.get("gres_used") or ""),
            reason=str(raw.get("reason") or ""),
            raw=dict(raw),
        )
