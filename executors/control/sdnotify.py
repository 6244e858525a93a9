"""systemd's readiness and watchdog protocol (``sd_notify``), with the standard library only.

Why: under ``Type=notify`` systemd counts the controller as started only once it says
``READY=1`` — after its first completed cycle (reconcile and a poll), not merely after the
process exists — and with ``WatchdogSec=`` it restarts a controller whose ``WATCHDOG=1``
pings stop. The controller pings from its heartbeat thread only while the main loop is not
stalled (the same rule as the fail-open heartbeat), so a loop stuck past ``--max-stall`` is
restarted by systemd as well as failed open by the watchdog service.

The protocol is one datagram per message on the ``AF_UNIX`` socket named by ``NOTIFY_SOCKET``
(a path, or ``@name`` in the abstract namespace); ``WATCHDOG_USEC`` (and optionally
``WATCHDOG_PID``, which must be this process) gives the watchdog period. Without
``NOTIFY_SOCKET`` (not under systemd) every call is a no-op. A send never blocks; one that fails
is logged once and never raised: systemd's view of the service must not be able to stop or
stall the controller.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


def notify_address(env: Mapping[str, str] | None = None) -> str | None:
    """The socket address in ``NOTIFY_SOCKET`` (abstract names start with NUL), or None when
    unset or not an ``AF_UNIX`` address (``vsock:`` is not supported)."""
    value = (os.environ if env is None else env).get("NOTIFY_SOCKET", "")
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def watchdog_period_s(env: Mapping[str, str] | None = None) -> float | None:
    """The watchdog period systemd asked for (``WATCHDOG_USEC``), or None when there is none
    or it is meant for another process (``WATCHDOG_PID``)."""
    env = os.environ if env is None else env
    pid = env.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 1e6 if usec > 0 else None


class Notifier:
    """Sends ``sd_notify`` messages to the socket in ``NOTIFY_SOCKET`` (read once, when made)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.address = notify_address(env)
        self.watchdog_s = watchdog_period_s(env) if self.address else None
        self.ready_sent = False
        self._warned = False

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, message: str) -> bool:
        """Send one message (``KEY=VALUE`` lines); True when it was sent."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                # Never wait: a receiver whose queue is full (a datagram socket holds only
                # net.unix.max_dgram_qlen messages) must not stall the heartbeat thread, or
                # the signal handler that says STOPPING; the message is dropped instead.
                sock.setblocking(False)
                sock.connect(self.address)
                sock.sendall(message.encode("utf-8", "replace"))
        except OSError as err:
            if not self._warned:
                log.warning(
                    "sd_notify to %r failed (%s); systemd may not see this controller "
                    "as ready or alive",
                    self.address.replace("\0", "@"),
                    err,
                )
                self._warned = True
            return False
        return True

    def ready(self, status: str = "") -> bool:
        """``READY=1`` (once; later calls only update ``STATUS``)."""
        status_line = f"\nSTATUS={' '.join(status.split())}" if status else ""
        if self.ready_sent:
            return bool(status_line) and self.send(status_line.lstrip("\n"))
        self.ready_sent = self.send(f"READY=1{status_line}")
        return self.ready_sent

    def alive(self) -> bool:
        """``WATCHDOG=1``: the main loop is making progress."""
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        """``STOPPING=1``: a clean shutdown has begun."""
        return self.send("STOPPING=1")
