"""The local transport: the SSH executor's node connection, for the one node that is this host.

:class:`~gpuplan.executors.ssh.executor.SshExecutor` reaches a node's sidecar agent through a
pool with four operations (open a connection, run one command with stdin, start a long-running
JSON-lines server, close). :class:`LocalTransport` has those operations over plain local
subprocesses (argv lists through ``execve``, never a shell), so the single server runs the SSH
executor's own code for process management, two-phase plans, checkpoint/resume and crash
recovery, with neither sshd nor asyncssh. The agent is started with this interpreter
(``sys.executable`` by default) and inherits the daemon's user: jobs run as the daemon's user.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from ..ssh.rpc import NodeUnreachable, RemoteResult, RpcChannel

LINE_LIMIT = 64 * 1024 * 1024
"""Longest reply line read from the agent (a status of many jobs is one line)."""


class LocalRpcChannel(RpcChannel):
    """An :class:`~gpuplan.executors.ssh.rpc.RpcChannel` over a local subprocess's pipes."""

    io_errors = (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError)

    def __init__(self, node: str, process: asyncio.subprocess.Process) -> None:
        self._process = process
        super().__init__(node)

    async def _readline(self) -> bytes:
        assert self._process.stdout is not None
        return await self._process.stdout.readline()

    def _write(self, line: str) -> None:
        assert self._process.stdin is not None
        if self._process.stdin.is_closing():
            raise BrokenPipeError("agent's stdin is closed")
        self._process.stdin.write(line.encode())

    def _close_io(self) -> None:
        # EOF on stdin ends the agent; the sidecars it started live on in their own sessions.
        with contextlib.suppress(OSError, RuntimeError):
            if self._process.stdin is not None:
                self._process.stdin.close()


class LocalTransport:
    """The pool interface of :class:`~gpuplan.executors.ssh.pool.SshPool` for this host.

    ``connects`` counts "connections" per node as the SSH pool does (the executor re-installs
    the sidecar once per connection); here there is one per transport."""

    def __init__(self) -> None:
        self.connects: dict[str, int] = {}
        self.last_error: dict[str, str] = {}
        self._agents: list[asyncio.subprocess.Process] = []

    async def connection(self, node: str) -> None:
        self.connects.setdefault(node, 1)

    def drop(self, node: str) -> None:
        """Nothing to drop: a failed local command is its own failure."""

    async def run(
        self,
        node: str,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = 30.0,
    ) -> RemoteResult:
        """Run ``argv`` here, ``input`` on its stdin; its exit status and output."""
        await self.connection(node)
        try:
            proc = await asyncio.create_subprocess_exec(
                *[str(a) for a in argv],
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            self.last_error[node] = f"{list(argv[:2])}: {exc!r}"
            raise NodeUnreachable(node, self.last_error[node]) from exc
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(None if input is None else input.encode()), timeout=timeout
            )
        except TimeoutError as exc:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise NodeUnreachable(node, f"{list(argv[:2])}: no answer in {timeout} s") from exc
        return RemoteResult(proc.returncode, out.decode(errors="replace"), err.decode("replace"))

    async def open_rpc(self, node: str, argv: Sequence[str]) -> RpcChannel:
        """Start the agent (``argv``) as a child process speaking JSON lines."""
        await self.connection(node)
        try:
            proc = await asyncio.create_subprocess_exec(
                *[str(a) for a in argv],
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                limit=LINE_LIMIT,
            )
        except OSError as exc:
            raise NodeUnreachable(node, f"cannot start {list(argv[:2])}: {exc!r}") from exc
        self._agents.append(proc)
        return LocalRpcChannel(node, proc)

    async def close(self) -> None:
        """End the agents (EOF on their stdin) and reap them."""
        for proc in self._agents:
            with contextlib.suppress(OSError, RuntimeError):
                if proc.stdin is not None:
                    proc.stdin.close()
        for proc in self._agents:
            try:
                await asyncio.wait_for(proc.wait(), timeout=5.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        self._agents.clear()
