"""A pool of asyncssh connections, one per GPU node, with strict host-key checking.

One connection per node carries many channels (one per remote command), so a poll of every node
or a fan-out of launches costs no new TCP/SSH handshakes. A connection that fails is dropped
and re-opened on the next use; callers see :class:`NodeUnreachable` and decide what a failure
means (the executor turns a long one into a ``NodeFailure``).

Every remote command is given as an argv list and joined with :func:`shlex.join`, so no value
(job id, path, command argument) is ever parsed by the remote shell as anything but one word.
Host keys are always verified against the given ``known_hosts`` file; there is deliberately no
way to turn that off (asyncssh would disable verification with ``known_hosts=None``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuplan.models.extras import MissingExtra

from .rpc import (
    NodeAddress,
    NodeUnreachable,
    RemoteCommandError,
    RemoteResult,
    RpcChannel,
)

try:
    import asyncssh
except ImportError as _err:  # the 'ssh' extra: a core install has no SSH executor
    raise MissingExtra("gpuplan.executors.ssh", "ssh", "asyncssh") from _err

__all__ = [
    "HostKeyRejected",
    "NodeAddress",
    "NodeUnreachable",
    "RemoteCommandError",
    "RemoteResult",
    "RpcChannel",
    "SshPool",
    "SshRpcChannel",
]


class HostKeyRejected(NodeUnreachable):
    """The node's host key is not the one in known_hosts (or is missing from it)."""


class SshPool:
    """Lazily opened, self-healing connections to ``addresses`` (node name -> address)."""

    def __init__(
        self,
        addresses: Mapping[str, NodeAddress],
        *,
        known_hosts: str | Path,
        client_keys: Sequence[str | Path],
        connect_timeout_s: float = 5.0,
        keepalive_s: float = 2.0,
        keepalive_count: int = 3,
        ssh_config: Sequence[str | Path] = (),
    ) -> None:
        if not known_hosts:
            raise ValueError("known_hosts is required: host keys are always verified")
        path = Path(known_hosts)
        if not path.is_file():
            raise ValueError(f"known_hosts file {str(path)!r} does not exist")
        if not client_keys:
            raise ValueError("client_keys: at least one private key is required")
        self.addresses = dict(addresses)
        self.known_hosts = str(path)
        self.client_keys = [str(k) for k in client_keys]
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self.keepalive_count = keepalive_count
        # Only the config files given: a site's ~/.ssh/config is not read implicitly, so tests
        # and services behave the same whoever runs them.
        self.ssh_config = [str(c) for c in ssh_config]
        self._conns: dict[str, asyncssh.SSHClientConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.connects: dict[str, int] = {}
        self.last_error: dict[str, str] = {}

    async def connection(self, node: str) -> asyncssh.SSHClientConnection:
        """The open connection to ``node``, connecting first if needed."""
        conn = self._conns.get(node)
        if conn is not None and not conn.is_closed():
            return conn
        lock = self._locks.setdefault(node, asyncio.Lock())
        async with lock:
            conn = self._conns.get(node)
            if conn is not None and not conn.is_closed():
                return conn
            addr = self.addresses.get(node)
            if addr is None:
                raise KeyError(f"no SSH address for node {node!r}")
            try:
                conn = await asyncio.wait_for(
                    asyncssh.connect(
                        addr.host,
                        port=addr.port,
                        username=addr.username,
                        known_hosts=self.known_hosts,
                        client_keys=self.client_keys,
                        config=self.ssh_config,
                        agent_path=None,
                        password=None,
                        preferred_auth="publickey",
                        keepalive_interval=self.keepalive_s,
                        keepalive_count_max=self.keepalive_count,
                        connect_timeout=self.connect_timeout_s,
                    ),
                    timeout=self.connect_timeout_s + 1.0,
                )
            except asyncssh.HostKeyNotVerifiable as exc:
                self.last_error[node] = f"host key not verifiable: {exc}"
                raise HostKeyRejected(node, self.last_error[node]) from exc
            except (TimeoutError, OSError, asyncssh.Error) as exc:
                self.last_error[node] = f"connect {addr.host}:{addr.port}: {exc!r}"
                raise NodeUnreachable(node, self.last_error[node]) from exc
            self._conns[node] = conn
            self.connects[node] = self.connects.get(node, 0) + 1
            return conn

    def drop(self, node: str) -> None:
        conn = self._conns.pop(node, None)
        if conn is not None:
            conn.abort()

    async def run(
        self,
        node: str,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = 30.0,
    ) -> RemoteResult:
        """Run ``argv`` on ``node`` (each element one shell word, via :func:`shlex.join`)."""
        command = shlex.join([str(a) for a in argv])
        conn = await self.connection(node)
        try:
            done = await asyncio.wait_for(
                conn.run(command, input=input, check=False), timeout=timeout
            )
        except (TimeoutError, OSError, asyncssh.Error) as exc:
            # A broken channel usually means a broken connection: start afresh next time.
            self.drop(node)
            self.last_error[node] = f"{argv[:3]}: {exc!r}"
            raise NodeUnreachable(node, self.last_error[node]) from exc
        out = done.stdout if isinstance(done.stdout, str) else (done.stdout or b"").decode()
        err = done.stderr if isinstance(done.stderr, str) else (done.stderr or b"").decode()
        return RemoteResult(done.exit_status, out, err)

    async def run_json(
        self,
        node: str,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = 30.0,
    ) -> Any:
        """Run a command that prints one JSON document; raise on failure."""
        result = await self.run(node, argv, input=input, timeout=timeout)
        if result.exit_status != 0:
            raise RemoteCommandError(
                f"{node}: {argv[:3]} exited {result.exit_status}: {result.stderr.strip()[-500:]}"
            )
        try:
            return json.loads(result.stdout)
        except ValueError as exc:
            raise RemoteCommandError(f"{node}: unparsable output {result.stdout[:200]!r}") from exc

    async def open_rpc(self, node: str, argv: Sequence[str]) -> RpcChannel:
        """Start ``argv`` on ``node`` as a long-running JSON-lines server (see RpcChannel)."""
        conn = await self.connection(node)
        try:
            process = await conn.create_process(
                shlex.join([str(a) for a in argv]), stderr=asyncssh.DEVNULL
            )
        except (OSError, asyncssh.Error) as exc:
            self.drop(node)
            raise NodeUnreachable(node, f"cannot start {argv[:2]}: {exc!r}") from exc
        return SshRpcChannel(node, process)

    async def close(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            with contextlib.suppress(asyncio.TimeoutError, OSError, asyncssh.Error):
                await asyncio.wait_for(conn.wait_closed(), timeout=2.0)


class SshRpcChannel(RpcChannel):
    """An :class:`~.rpc.RpcChannel` over a remote process's stdin/stdout (asyncssh)."""

    io_errors = (OSError, asyncssh.Error)

    def __init__(self, node: str, process: asyncssh.SSHClientProcess[Any]) -> None:
        self._process = process
        super().__init__(node)

    async def _readline(self) -> str | bytes:
        return await self._process.stdout.readline()

    def _write(self, line: str) -> None:
        self._process.stdin.write(line)

    def _close_io(self) -> None:
        with contextlib.suppress(OSError, asyncssh.Error):
            self._process.stdin.write_eof()
        self._process.close()
