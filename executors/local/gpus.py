"""Which of this host's GPUs the single server schedules, and how jobs are bound to them.

``--gpus`` takes a count (``4``: the first four, PCI bus order) or a list (``0,2`` or GPU
UUIDs: exactly those); without it the server uses every GPU NVML reports. With NVML the jobs
are bound by UUID; without NVML (CI, the labs, a host without the ``gpu`` extra) a count or
list is required and jobs are bound by index, said once at INFO. A count whose NVML model is a
known type runs the SSH executor's own inventory and health checks (a GPU that turns unhealthy
takes the server's node out until it is healthy again); an explicit list, or a model gpuplan
does not know, is bound by the list and not health-checked (docs/single-server.md, limits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuplan.models import InputError
from gpuplan.models.gpu import KNOWN_GPU_TYPES

from ..nvml.crosscheck import model_matches
from ..nvml.local import read_local
from ..nvml.records import NodeInventory

INVENTORY_INTERVAL_S = 10.0


@dataclass(frozen=True)
class ServerGpus:
    """The server's GPU set: ``count`` logical GPUs of ``gpu_type``; ``devices`` the
    ``CUDA_VISIBLE_DEVICES`` entry of each when bound by list (None: the executor binds)."""

    count: int
    gpu_type: str
    devices: tuple[str, ...] | None
    inventory_interval_s: float

    @property
    def bind(self) -> Callable[[str, tuple[int, ...]], list[str] | None] | None:
        devices = self.devices
        if devices is None:
            return None
        return lambda _node, gpus: [devices[g] for g in gpus]

    def describe(self) -> str:
        if self.devices is not None:
            return ",".join(self.devices)
        return f"{self.count} x {self.gpu_type}" + (
            ", NVML health checks" if self.inventory_interval_s else ", by index"
        )


def _known_type(model: str | None) -> str | None:
    return next((t for t in KNOWN_GPU_TYPES if model_matches(t, model)), None)


def choose_gpus(text: str | None, inventory: NodeInventory | None = None) -> ServerGpus:
    """The GPU set for ``--gpus text`` on this host (``inventory``: NVML's, read if None)."""
    inv = read_local() if inventory is None else inventory
    found = list(inv.gpus) if inv.nvml else []
    if text is None:
        if not found:
            raise InputError(
                f"no GPUs found through NVML ({inv.reason or 'not available'}): give --gpus N "
                "or --gpus 0,1,...",
                field="--gpus",
            )
        text = str(len(found))
    text = text.strip()
    if text.isdigit():
        count = int(text)
        if count < 1:
            raise InputError(f"{text}: at least 1 GPU", field="--gpus")
        if found and count > len(found):
            raise InputError(
                f"{count} GPUs asked for, NVML reports {len(found)} on this host", field="--gpus"
            )
        if not found:
            return ServerGpus(count, "v100", None, 0.0)
        known = _known_type(found[0].model)
        if known is not None and all(model_matches(known, g.model) for g in found[:count]):
            return ServerGpus(count, known, None, INVENTORY_INTERVAL_S)
        entries = [str(g.index) for g in found[:count]]
    else:
        entries = [e.strip() for e in text.split(",") if e.strip()]
        if not entries:
            raise InputError(f"{text!r}: no GPUs listed", field="--gpus")
        if len(set(entries)) != len(entries):
            raise InputError(f"{text!r}: a GPU is listed twice", field="--gpus")
    devices: list[str] = []
    for entry in entries:
        if entry.isdigit():
            index = int(entry)
            if found and index >= len(found):
                raise InputError(
                    f"GPU {index}: NVML reports {len(found)} GPUs on this host", field="--gpus"
                )
            uuid = found[index].uuid if found else None
            devices.append(uuid or str(index))
        elif entry.startswith(("GPU-", "MIG-")) and entry.isprintable() and "," not in entry:
            if found and entry not in {g.uuid for g in found}:
                raise InputError(f"{entry}: no such GPU UUID on this host", field="--gpus")
            devices.append(entry)
        else:
            raise InputError(f"{entry!r}: not a GPU index or UUID", field="--gpus")
    model = found[0].model if found else None
    return ServerGpus(len(devices), _known_type(model) or "v100", tuple(devices), 0.0)
