"""The single server's socket: one JSON request line, one JSON reply line, same user only.

Requests ``{"cmd": "submit" | "cancel" | "status", "args": {...}}``; replies ``{"ok": true,
"result": ...}`` or ``{"ok": false, "error": "one line"}``. The socket lives in the private
state dir (0700) and is itself 0600; on top of that the server asks the kernel who connected
(``SO_PEERCRED``) and answers nobody but its own uid, and the client checks the server is its
own uid too (threat model in docs/single-server.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuplan.models import InputError

from .statedir import check_private, socket_path

MAX_REQUEST = 16 * 1024 * 1024
"""Longest request accepted (a submission carries the submitter's environment)."""
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket (from the kernel)."""
    _pid, uid, _gid = _CRED.unpack(
        conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    )
    return uid


def _read_line(conn: socket.socket) -> bytes:
    data = bytearray()
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError(f"message longer than {MAX_REQUEST} bytes")
    return bytes(data)


class SocketServer:
    """Accepts connections on ``state_dir``'s socket in a thread; ``handle(cmd, args)`` answers
    (raise InputError/ValueError for a refusal, shown to the client as one line)."""

    def __init__(self, state_dir: Path, handle: Callable[[str, dict[str, Any]], Any]) -> None:
        self.path = socket_path(state_dir)
        self.handle = handle
        self.refused: list[int] = []
        """uids refused (tests read it)."""
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)  # a previous server's (the lock says none runs now)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self.sock.listen(16)
        self._thread = threading.Thread(
            target=self._serve, name="gpuplan-server-socket", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30.0)
            try:
                uid = peer_uid(conn)
                if uid != os.geteuid():
                    self.refused.append(uid)
                    reply: dict[str, Any] = {
                        "ok": False,
                        "error": f"uid {uid} may not use this server (it serves uid "
                        f"{os.geteuid()} only)",
                    }
                else:
                    request = json.loads(_read_line(conn))
                    if not isinstance(request, dict) or not isinstance(request.get("args"), dict):
                        raise ValueError("malformed request")
                    result = self.handle(str(request.get("cmd")), request["args"])
                    reply = {"ok": True, "result": result}
            except (InputError, ValueError) as err:
                reply = {"ok": False, "error": " ".join(str(err).split())}
            except Exception as err:  # the server must answer and live on
                reply = {"ok": False, "error": f"server error: {type(err).__name__}: {err}"}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(reply).encode() + b"\n")


def request(state_dir: Path, cmd: str, args: dict[str, Any], timeout_s: float = 60.0) -> Any:
    """Send one request to the server of ``state_dir``; its result, or InputError (one line)."""
    state_dir = Path(os.path.abspath(state_dir))
    if not os.path.lexists(state_dir):
        raise InputError(
            "no gpuplan server is running here (no state dir; start one with `gpuplan server`)",
            source=str(state_dir),
            field="server",
        )
    check_private(state_dir)
    path = socket_path(state_dir)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise InputError(
            "no gpuplan server is running here (start one with `gpuplan server`)",
            source=str(state_dir),
            field="server",
        ) from None
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.geteuid():
        raise InputError(
            "the server socket is not a socket of yours; refusing it",
            source=str(path),
            field="server",
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        try:
            conn.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            raise InputError(
                "no gpuplan server is running here (a stale socket; start one with "
                "`gpuplan server`)",
                source=str(state_dir),
                field="server",
            ) from None
        if peer_uid(conn) != os.geteuid():
            raise InputError(
                "the process on the server socket is not yours; refusing it",
                source=str(path),
                field="server",
            )
        try:
            conn.sendall(json.dumps({"cmd": cmd, "args": args}).encode() + b"\n")
            line = _read_line(conn)
        except OSError as err:
            raise InputError(
                f"the server did not answer: {err}", source=str(path), field="server"
            ) from None
    try:
        reply = json.loads(line)
    except ValueError:
        raise InputError(
            "the server closed the connection without an answer", source=str(path), field="server"
        ) from None
    if not reply.get("ok"):
        raise InputError(str(reply.get("error")), field=cmd)
    return reply.get("result")
