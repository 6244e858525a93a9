"""Raw NVML answers for the agent's ``inventory`` request (:class:`NvmlReader`).

Why apart: it is the one part of the program that talks to the GPU driver, and the engine host
uses the same reader for its own GPUs (``gpuplan.executors.nvml.local``), so it must import alone
without the sidecar daemon. Stdlib-only: nvidia-ml-py's ``pynvml`` is imported lazily, only if
the node has it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
XID_KEEP_S = 600.0
"""How long an Xid critical event stays in the answers: the engine keeps the GPU out that long
after its last one (an Xid is an event, not a state NVML can be asked for)."""


class NvmlReader:
    """Raw NVML answers for every GPU of this node (the ``inventory`` request).

    Only gathers what NVML says, as plain JSON values (the engine turns them into records and a
    health verdict: ``gpuplan.executors.nvml.records``); this file stays stdlib-only, so
    nvidia-ml-py's ``pynvml`` is imported here only if the node has it, and a node without it,
    without the NVML library or without GPUs answers ``{"nvml": false, "reason"}``. One reader
    per agent process: it keeps an NVML event set open, so Xid critical errors that happen
    between two requests are drained at the next one and kept ``XID_KEEP_S`` seconds.
    """

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml
        self._ready = False
        self._events: Any = None
        self._xids: dict[str, list[dict[str, float]]] = {}
        self._lock = threading.Lock()

    def _start(self) -> str | None:
        """Import and initialise NVML once; the reason it is not usable, or None."""
        if self._ready:
            return None
        if self._nvml is None:
            try:
                import pynvml  # type: ignore[import-not-found]
            except ImportError:
                return "pynvml (nvidia-ml-py) is not installed on the node"
            self._nvml = pynvml
        try:
            self._nvml.nvmlInit()
        except Exception as exc:  # NVMLError: no library, no driver, no GPU
            return f"NVML not usable: {exc}"
        self._ready = True
        return None

    def _call(self, name: str, *args: Any) -> Any:
        """One NVML call; None when this GPU does not support it. A lost GPU raises."""
        fn = getattr(self._nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            code = getattr(exc, "value", None)
            if code == NVML_ERROR_GPU_IS_LOST:
                raise
            return None

    def _drain_xids(self, handles: list[Any], now: float) -> None:
        nv = self._nvml
        if self._events is None:
            try:
                self._events = nv.nvmlEventSetCreate()
                for handle in handles:
                    with contextlib.suppress(Exception):  # not every GPU supports events
                        nv.nvmlDeviceRegisterEvents(
                            handle, nv.nvmlEventTypeXidCriticalError, self._events
                        )
            except Exception:
                self._events = False  # no events on this node: the other signals still count
        if self._events:
            wait = getattr(nv, "nvmlEventSetWait_v2", None) or nv.nvmlEventSetWait
            for _ in range(1000):
                try:
                    data = wait(self._events, 0)
                except Exception:
                    break  # NVML_ERROR_TIMEOUT: nothing (more) pending
                try:
                    uuid = _text(nv.nvmlDeviceGetUUID(data.device))
                except Exception:
                    uuid = "?"
                self._xids.setdefault(uuid, []).append({"xid": int(data.eventData), "time": now})
        for uuid in list(self._xids):
            kept = [x for x in self._xids[uuid] if now - x["time"] <= XID_KEEP_S]
            self._xids[uuid] = kept
            if not kept:
                del self._xids[uuid]

    def answers(self) -> dict[str, Any]:
        with self._lock:
            reason = self._start()
            if reason is not None:
                return {"nvml": False, "reason": reason}
            nv = self._nvml
            now = time.time()
            try:
                count = int(nv.nvmlDeviceGetCount())
                handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            except Exception as exc:
                return {"nvml": False, "reason": f"NVML device list failed: {exc}"}
            self._drain_xids(handles, now)
            gpus = [self._gpu(i, h) for i, h in enumerate(handles)]
            driver = self._call("nvmlSystemGetDriverVersion")
            return {
                "nvml": True,
                "time": now,
                "driver": _text(driver) if driver else None,
                "gpus": gpus,
            }

    def _gpu(self, index: int, handle: Any) -> dict[str, Any]:
        gpu: dict[str, Any] = {"index": index}
        try:
            gpu["uuid"] = _text(self._call("nvmlDeviceGetUUID", handle))
            gpu["name"] = _text(self._call("nvmlDeviceGetName", handle))
            memory = self._call("nvmlDeviceGetMemoryInfo", handle)
            gpu["memory_total"] = int(memory.total) if memory is not None else None
            mig = self._call("nvmlDeviceGetMigMode", handle)
            gpu["mig"] = [int(m) for m in mig] if mig is not None else None
            gpu["ecc_uncorrected_volatile"] = self._call(
                "nvmlDeviceGetTotalEccErrors", handle, 1, 0
            )  # UNCORRECTED, VOLATILE_ECC
            pages = self._call("nvmlDeviceGetRetiredPages", handle, 1)  # double-bit ECC
            gpu["retired_pages_dbe"] = len(pages) if pages is not None else None
            pending = self._call("nvmlDeviceGetRetiredPagesPendingStatus", handle)
            gpu["retired_pending"] = bool(pending) if pending is not None else None
            rows = self._call("nvmlDeviceGetRemappedRows", handle)
            gpu["remapped_rows"] = [int(r) for r in rows] if rows is not None else None
            gpu["throttle_reasons"] = self._call(
                "nvmlDeviceGetCurrentClocksThrottleReasons", handle
            )
        except Exception as exc:
            if getattr(exc, "value", None) != NVML_ERROR_GPU_IS_LOST:
                raise
            gpu["error"] = "GPU_IS_LOST"
        gpu["xids"] = list(self._xids.get(str(gpu.get("uuid")), []))
        return gpu


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
