"""This machine's GPUs from NVML, for callers that run on a GPU host (the single-server case,
a Slurm node's cross-check, the device test). The reading itself is the SSH agent's
:class:`~gpuplan.executors.ssh.agent.nvml_reader.NvmlReader` (one NVML reader for nodes and
this host); no nvidia-ml-py, no NVML library or no GPU is not an error: the declared inventory
is used and that is said once, at INFO."""

from __future__ import annotations

import logging
from typing import Any

from ..ssh.agent.nvml_reader import NvmlReader
from .records import NodeInventory, parse_inventory

log = logging.getLogger(__name__)
_said: set[str] = set()


def read_local(nvml: Any = None) -> NodeInventory:
    """NVML's view of this machine (``nvml``: a ``pynvml``-like module, default the real
    one if installed). Without NVML: ``NodeInventory(nvml=False, reason=...)``."""
    inventory = parse_inventory(NvmlReader(nvml).answers())
    if not inventory.nvml:
        note_no_nvml("this host", inventory.reason)
    return inventory


def note_no_nvml(where: str, reason: str | None) -> None:
    """Say once per place, at INFO, that the declared inventory is used there."""
    if where in _said:
        return
    _said.add(where)
    log.info("%s: no NVML (%s): using the declared GPU inventory", where, reason or "not available")
