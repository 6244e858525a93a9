"""Fault injection for the controller's crash-recovery tests (``GPUPLAN_FAILPOINT``).

A failpoint SIGKILLs the controller process at a precise step (after committing intents, after a
given Slurm command succeeded), so the tests exercise exactly the recovery a real crash needs.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Sequence
from typing import Any

from ..slurm.cli import SlurmCli

log = logging.getLogger(__name__)


class Failpoints:
    """Fault injection for the crash-recovery tests: ``GPUPLAN_FAILPOINT=cli.signal@1`` makes the
    process SIGKILL *itself* right after the first successful checkpoint signal.

    Names: ``intent`` (plan intents committed, nothing done), ``applied`` (plan done, outcome
    committed), ``cli.<verb>`` after a successful Slurm command (verbs: signal, requeue, release,
    update, hold, cancel). A real SIGKILL at a precise point, so the tests exercise exactly the
    recovery a crash would need; unset (production), every check is a dict lookup.
    """

    def __init__(self, spec: str | None) -> None:
        self.targets: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        for item in (spec or "").split(","):
            name, _, count = item.strip().partition("@")
            if name:
                self.targets[name] = int(count or 1)

    def hit(self, name: str) -> None:
        if name not in self.targets:
            return
        self.counts[name] = self.counts.get(name, 0) + 1
        if self.counts[name] == self.targets[name]:
            log.warning("failpoint %s@%d: SIGKILL", name, self.counts[name])
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)


def _verb(argv: Sequence[str]) -> str:
    exe = os.path.basename(argv[0])
    if exe == "scancel":
        return "signal" if any(a.startswith("--signal") for a in argv) else "cancel"
    if exe == "scontrol" and len(argv) > 1:
        return {"requeuehold": "requeue", "requeue": "requeue"}.get(argv[1], argv[1])
    return exe


class FailpointCli(SlurmCli):
    """:class:`SlurmCli` that reports each successful command to :class:`Failpoints`."""

    def __init__(self, failpoints: Failpoints, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.failpoints = failpoints
        self.commands: dict[str, int] = {}
        """Successful commands by verb (``squeue``, ``update``, ``release``...): the
        controller journals them with its cycle times."""

    def run(
        self, argv: Sequence[str], *, retry: bool = False, input_text: str | None = None
    ) -> str:
        out = super().run(argv, retry=retry, input_text=input_text)
        verb = _verb(argv)
        self.commands[verb] = self.commands.get(verb, 0) + 1
        self.failpoints.hit(f"cli.{verb}")
        return out
