"""NVML answers -> typed GPU records and a health verdict (a pure function, no NVML needed).

The answers are the JSON the SSH agent's ``inventory`` request returns
(:class:`gpuplan.executors.ssh.agent.nvml_reader.NvmlReader`): ``{"nvml": false, "reason"}`` on a
node without NVML, else ``{"nvml": true, "driver", "time", "gpus": [...]}`` with, per GPU, ``index,
uuid, name, memory_total`` (bytes), ``mig`` ([current, pending] MIG mode), the health counters
``ecc_uncorrected_volatile, retired_pages_dbe, retired_pending, remapped_rows`` ([corrected,
uncorrected, pending, failure]), ``throttle_reasons`` (bit mask), ``xids`` (recent Xid critical
errors ``{"xid", "time"}``) and ``error: "GPU_IS_LOST"`` for a GPU fallen off the bus. A counter
a GPU does not support is ``null`` and says nothing.

The answers come from the node (see docs/ssh.md, threat model): a malformed answer raises
:class:`BadInventory` (the caller falls back to the declared inventory with a warning) instead
of being half-trusted.

Verdicts, the reason always says which signal decided:

* ``unhealthy`` (taken out of use): GPU lost; a hardware Xid (:data:`HARDWARE_XIDS`: memory
  double-bit errors, row-remap events, NVLink, fallen off the bus, contained/uncontained ECC);
  volatile uncorrected ECC errors; a page retirement or row remap pending (needs a GPU reset);
  a row-remap failure.
* ``degraded`` (kept in use, reported): other Xids (mostly application faults such as Xid 13/31),
  hardware slowdown/thermal/power-brake clock throttling, retired pages without a pending one.
* ``healthy``.

A GPU in MIG mode is healthy but not usable as a whole GPU (gpuplan plans whole GPUs):
:attr:`GpuRecord.usable` is false with that reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["healthy", "degraded", "unhealthy"]

HARDWARE_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
"""Xids that mean the GPU itself is failing (NVIDIA's Xid catalogue): 48 double-bit ECC,
63/64 row-remap event/failure, 74 NVLink error, 79 fallen off the bus, 92 high single-bit ECC
rate, 94/95 contained/uncontained ECC error, 119/120 GSP errors."""

THROTTLE_HW = {
    0x8: "hardware slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power-brake slowdown",
}
"""Clock-throttle bits (``nvmlClocksThrottleReason*``) that point at the hardware."""


class BadInventory(ValueError):
    """An inventory answer that does not have the documented shape."""


@dataclass(frozen=True, slots=True)
class Health:
    verdict: Verdict
    reasons: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "healthy"


@dataclass(frozen=True, slots=True)
class GpuRecord:
    """One GPU as NVML reports it."""

    index: int
    uuid: str | None
    model: str | None
    memory_mib: int | None
    mig_enabled: bool
    health: Health

    @property
    def usable(self) -> bool:
        """Whether a whole-GPU job may run on it."""
        return self.health.verdict != "unhealthy" and not self.mig_enabled

    @property
    def unusable_reason(self) -> str | None:
        if self.health.verdict == "unhealthy":
            return self.health.reason
        if self.mig_enabled:
            return "MIG mode enabled (gpuplan plans whole GPUs, not MIG slices)"
        return None


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """What NVML says about one node; ``nvml`` false (and no GPUs) where it cannot be read."""

    nvml: bool
    gpus: tuple[GpuRecord, ...] = ()
    driver: str | None = None
    reason: str | None = None
    """Why NVML was not read (``nvml`` false)."""


def _int(gpu: dict[str, Any], key: str, where: str) -> int | None:
    value = gpu.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadInventory(f"{where}: {key} must be a non-negative integer, not {value!r}")
    return value


def _str(gpu: dict[str, Any], key: str, where: str) -> str | None:
    value = gpu.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 256:
        raise BadInventory(f"{where}: {key} must be a short string, not {value!r:.80}")
    return value


def _ints(gpu: dict[str, Any], key: str, length: int, where: str) -> list[int] | None:
    value = gpu.get(key)
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != length
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise BadInventory(f"{where}: {key} must be a list of {length} integers")
    return value


def judge(gpu: dict[str, Any], where: str = "gpu") -> Health:
    """The health verdict of one GPU's answers (see the module doc for the rules)."""
    if gpu.get("error") == "GPU_IS_LOST":
        return Health("unhealthy", ("GPU is lost (NVML_ERROR_GPU_IS_LOST: fallen off the bus)",))
    bad: list[str] = []
    soft: list[str] = []
    xids = gpu.get("xids") or []
    if not isinstance(xids, list):
        raise BadInventory(f"{where}: xids must be a list")
    for event in xids:
        xid = event.get("xid") if isinstance(event, dict) else None
        if isinstance(xid, bool) or not isinstance(xid, int):
            raise BadInventory(f"{where}: an xid event without an integer xid")
        (bad if xid in HARDWARE_XIDS else soft).append(f"Xid {xid}")
    ecc = _int(gpu, "ecc_uncorrected_volatile", where)
    if ecc:
        bad.append(f"{ecc} volatile uncorrected ECC error(s)")
    if gpu.get("retired_pending") is True:
        bad.append("page retirement pending (GPU reset needed)")
    rows = _ints(gpu, "remapped_rows", 4, where)
    if rows is not None:
        if rows[3]:
            bad.append("row remapping failed")
        elif rows[2]:
            bad.append("row remap pending (GPU reset needed)")
    retired = _int(gpu, "retired_pages_dbe", where)
    if retired:
        soft.append(f"{retired} page(s) retired for double-bit ECC errors")
    mask = _int(gpu, "throttle_reasons", where) or 0
    soft += [text for bit, text in THROTTLE_HW.items() if mask & bit]
    if bad:
        return Health("unhealthy", tuple(dict.fromkeys(bad + soft)))
    if soft:
        return Health("degraded", tuple(dict.fromkeys(soft)))
    return Health("healthy")


def parse_gpu(gpu: Any, position: int) -> GpuRecord:
    where = f"gpu {position}"
    if not isinstance(gpu, dict):
        raise BadInventory(f"{where}: not an object")
    index = _int(gpu, "index", where)
    if index is None:
        raise BadInventory(f"{where}: no index")
    memory = _int(gpu, "memory_total", where)
    mig = _ints(gpu, "mig", 2, where)
    return GpuRecord(
        index=index,
        uuid=_str(gpu, "uuid", where),
        model=_str(gpu, "name", where),
        memory_mib=None if memory is None else memory // (1 << 20),
        mig_enabled=bool(mig and mig[0] == 1),
        health=judge(gpu, where),
    )


def parse_inventory(answers: Any) -> NodeInventory:
    """Turn one node's ``inventory`` answers into records (raises :class:`BadInventory`)."""
    if not isinstance(answers, dict) or not isinstance(answers.get("nvml"), bool):
        raise BadInventory("inventory: not an object with a boolean 'nvml'")
    if not answers["nvml"]:
        reason = answers.get("reason")
        return NodeInventory(nvml=False, reason=str(reason)[:200] if reason else None)
    gpus = answers.get("gpus")
    if not isinstance(gpus, list) or len(gpus) > 1024:
        raise BadInventory("inventory: 'gpus' must be a list")
    records = tuple(parse_gpu(g, i) for i, g in enumerate(gpus))
    if len({r.index for r in records}) != len(records):
        raise BadInventory("inventory: two GPUs with one index")
    uuids = [r.uuid for r in records if r.uuid is not None]
    if len(set(uuids)) != len(uuids):
        raise BadInventory("inventory: two GPUs with one UUID")
    driver = answers.get("driver")
    t = answers.get("time")
    if t is not None and not (isinstance(t, int | float) and math.isfinite(t)):
        raise BadInventory("inventory: 'time' must be a number")
    return NodeInventory(
        nvml=True,
        gpus=tuple(sorted(records, key=lambda r: r.index)),
        driver=driver if isinstance(driver, str) else None,
    )
