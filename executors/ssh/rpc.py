"""The transport-neutral half of talking to a node's sidecar agent: addresses, errors, results
and the JSON-lines RPC channel.

Why apart from :mod:`.pool`: the SSH pool needs asyncssh (the ``ssh`` extra), but the agent
protocol does not. The single-server executor (:mod:`gpuplan.executors.local`) runs the very
same agent as a local subprocess, so everything here must import without asyncssh. A transport
subclasses :class:`RpcChannel` with how to read a line, write a line and close its process.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class NodeAddress:
    """How to reach one node of the cluster model over SSH."""

    host: str
    port: int = 22
    username: str = "root"


class NodeUnreachable(Exception):
    """A node could not be reached or a command on it did not finish."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"{node}: {reason}")
        self.node = node
        self.reason = reason


class RemoteCommandError(Exception):
    """A remote command ran but failed (non-zero exit or unparsable output)."""


@dataclass(frozen=True)
class RemoteResult:
    exit_status: int | None
    stdout: str
    stderr: str


class RpcChannel:
    """Requests and replies as JSON lines over one agent process's stdin/stdout.

    Requests are ``{"id", "cmd", "args"}``; the server answers ``{"id", "ok", "result"}`` or
    ``{"id", "ok": false, "error"}``, possibly out of order (it may serve requests in parallel).
    When the channel breaks, every waiting call fails with :class:`NodeUnreachable`.
    Subclasses give the I/O: :meth:`_readline`, :meth:`_write`, :meth:`_close_io`, and the
    exceptions their I/O raises (``io_errors``).
    """

    io_errors: ClassVar[tuple[type[BaseException], ...]] = (OSError,)

    def __init__(self, node: str) -> None:
        self.node = node
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self.closed = False
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _readline(self) -> str | bytes:
        raise NotImplementedError

    def _write(self, line: str) -> None:
        raise NotImplementedError

    def _close_io(self) -> None:
        raise NotImplementedError

    async def _read(self) -> None:
        reason = "channel closed"
        try:
            while True:
                line = await self._readline()
                if not line:
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(message, dict):
                    continue
                future = self._pending.pop(message.get("id"), None)  # type: ignore[arg-type]
                if future is not None and not future.done():
                    future.set_result(message)
        except self.io_errors as exc:
            reason = f"channel broke: {exc!r}"
        finally:
            self.closed = True
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(NodeUnreachable(self.node, reason))
            self._pending.clear()

    async def call(self, cmd: str, args: dict[str, Any], timeout: float) -> Any:
        if self.closed:
            raise NodeUnreachable(self.node, "channel closed")
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self._write(json.dumps({"id": request_id, "cmd": cmd, "args": args}) + "\n")
            reply = await asyncio.wait_for(future, timeout=timeout)
        except self.io_errors as exc:
            raise NodeUnreachable(self.node, f"{cmd}: {exc!r}") from exc
        except TimeoutError as exc:
            raise NodeUnreachable(self.node, f"{cmd}: no reply in {timeout:.0f} s") from exc
        finally:
            self._pending.pop(request_id, None)
        if not reply.get("ok"):
            raise RemoteCommandError(f"{self.node}: {cmd}: {reply.get('error')}")
        return reply.get("result")

    def close(self) -> None:
        self.closed = True
        self._close_io()
        self._reader.cancel()
