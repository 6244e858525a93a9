"""The policy's memory across controller restarts: journaled after every completed cycle when it
changed, restored into the freshly built policy before its first plan.

Why a mixin of its own: this changes with the policies' snapshot protocol
(``snapshot``/``restore``), not with the control loop.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..engine import Engine

log = logging.getLogger("gpuplan.executors.control.controller")


class PolicyMemoryMixin:
    """Mixed into :class:`.controller.SlurmController` (its ``journal``, ``settings`` and
    ``_policy_saved``)."""

    journal: Any
    settings: Any
    _policy_saved: str | None

    @property
    def _policy_key(self) -> str:
        return f"policy_state:{self.settings.policy}:{self.settings.seed}"

    def _restore_policy(self, engine: Engine) -> None:
        """Give the freshly built policy the memory the last run journaled (AFS-P's counters,
        Tiresias' stints, Themis' leases...), before its first plan: without it the first plan
        after a restart re-decides from nothing and preempts running jobs (issue 16)."""
        assert self.journal is not None
        text = self.journal.meta(self._policy_key)
        self._policy_saved = text
        if not text:
            return
        try:
            engine.policy.restore(json.loads(text))
        except Exception as err:  # a damaged or foreign snapshot: start fresh, say so
            log.warning(
                "policy memory in the journal could not be restored (%s: %s); the "
                "policy starts fresh",
                type(err).__name__,
                err,
            )
            return
        log.info(
            "restored %s's memory from the journal (%d bytes)", self.settings.policy, len(text)
        )

    def _save_policy(self, engine: Engine) -> None:
        """Journal the policy's memory when it changed (after every completed cycle)."""
        assert self.journal is not None
        try:
            text = json.dumps(engine.policy.snapshot(), sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as err:
            log.warning("policy memory is not JSON (%s); not journaled", err)
            return
        if text != self._policy_saved:
            self.journal.set_meta(self._policy_key, text)
            self._policy_saved = text
