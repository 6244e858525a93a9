"""The restart gate's memory in the controller journal (``meta`` rows, no schema change).

Two keys: ``restart_gate:costs`` holds the measured change costs (per kind: samples and EWMA),
restored by the next controller run so its gate starts from what the cluster measured rather
than from the prior; ``restart_gate:run:<run id>`` holds that run's counters (changes proposed /
carried out / skipped per kind), which ``docs/results`` tables and operators read. Both are
rewritten only when they changed, once per controller cycle.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from ..engine import Engine

log = logging.getLogger(__name__)

COSTS_KEY = "restart_gate:costs"


class MetaStore(Protocol):
    """The part of :class:`~.journal.Journal` used here."""

    def meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...


def restore_gate(engine: Engine, journal: MetaStore) -> None:
    """Give the engine's gate the costs an earlier run measured (a damaged row is ignored,
    with a warning: the gate then starts from its priors)."""
    gate = engine.restart_gate
    text = journal.meta(COSTS_KEY)
    if gate is None or not text:
        return
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except ValueError as err:
        log.warning("restart gate costs in the journal unreadable (%s); using priors", err)
        return
    gate.costs.restore(data)


def save_gate(engine: Engine, journal: MetaStore, run_id: int, saved: dict[str, str]) -> None:
    """Journal the gate's counters and costs when they changed since ``saved`` (the texts last
    written, updated in place)."""
    gate = engine.restart_gate
    if gate is None:
        return
    summary: dict[str, Any] = gate.summary()
    rows = {COSTS_KEY: summary.pop("costs"), f"restart_gate:run:{run_id}": summary}
    for key, value in rows.items():
        text = json.dumps(value, sort_keys=True)
        if saved.get(key) != text:
            journal.set_meta(key, text)
            saved[key] = text
