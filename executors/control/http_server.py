"""The controller's HTTP endpoint (``--http PORT``): ``/metrics``, ``/`` and ``/state.json``.

Why this shape:

* **One thread that never blocks the control loop.** It serves one request at a time from the
  latest :class:`~.live_state.LiveSnapshot` the loop published (a reference read, no lock) and
  never touches the journal or Slurm; each connection has a :data:`REQUEST_TIMEOUT_S` socket
  timeout, so a slow or idle client (or many) can hold up only this thread, never a cycle,
  and the number of threads stays one. Requests are paced (:data:`MIN_REQUEST_GAP_S`), so a
  flood cannot take the process's CPU from the loop either.
* **Bounded, read-only, nothing to inject.** GET only (every other method: 405); three
  paths (anything else: 404); request lines and headers are bounded by the standard library's
  parser, bodies are never read; responses are bounded by the snapshot's bounds
  (:data:`~.live_state.MAX_JOBS`, :data:`~.live_state.MAX_TEXT`). The page is static
  (:mod:`.live_page`), every response carries a ``default-src 'none'`` Content-Security-Policy
  (the page's own allows exactly its inline script and style), ``nosniff``, ``no-referrer``,
  ``no-store`` and ``frame-ancestors 'none'``.
* **Loopback by default** (``--http-bind 127.0.0.1``): the job names, users and reasons it
  shows are the cluster's business. Against DNS rebinding (a web page in the operator's
  browser resolving its own name to 127.0.0.1 to read ``/state.json``), the ``Host`` header
  must name an IP address, ``localhost`` or this host (its hostname or FQDN); anything else is
  421. There is no authentication: bind it to an address only those who may see the queue
  reach (or put an authenticating proxy in front).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from gpuplan.models import GpuplanError

from . import live_page
from .live_state import LiveSnapshot
from .metrics_export import CONTENT_TYPE, exposition, make_registry

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 5.0
"""Socket timeout of one connection (reading the request, writing the answer)."""
JSON_CSP = "default-src 'none'; frame-ancestors 'none'"
MIN_REQUEST_GAP_S = 0.05
"""Least time between two requests (at most 20 a second; the page asks every 2 s)."""


def _allowed_hosts() -> frozenset[str]:
    names = {"localhost"}
    with contextlib.suppress(OSError):
        names.add(socket.gethostname().lower())
    with contextlib.suppress(OSError):
        names.add(socket.getfqdn().lower())
    return frozenset(n for n in names if n)


def host_allowed(header: str | None, names: frozenset[str]) -> bool:
    """Whether a request's ``Host`` header names this server: an IP literal (with or without
    a port, IPv6 in brackets), ``localhost`` or one of ``names`` (case-insensitive)."""
    if not header:
        return False
    host = header.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return False
        literal, rest = host[1:end], host[end + 1 :]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return False
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            return False
        return True
    name, _, port = host.partition(":")
    if port and not port.isdigit():
        return False
    with contextlib.suppress(ValueError):
        ipaddress.IPv4Address(name)
        return True
    return name.rstrip(".") in names


class _Handler(BaseHTTPRequestHandler):
    """One request; the server object carries the snapshot source and the registry."""

    server: LiveHttpServer
    timeout = REQUEST_TIMEOUT_S
    server_version = "gpuplan"
    sys_version = ""
    protocol_version = "HTTP/1.0"  # one request per connection: nothing stays open

    def do_GET(self) -> None:
        self.server.pace()
        if not host_allowed(self.headers.get("Host"), self.server.hosts):
            self._send(421, b"unknown Host\n", "text/plain; charset=utf-8", JSON_CSP)
            return
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        if path == "/metrics":
            self._send(200, exposition(self.server.registry), CONTENT_TYPE, JSON_CSP)
        elif path in ("/", "/index.html"):
            self._send(200, live_page.PAGE, "text/html; charset=utf-8", live_page.CSP)
        elif path == "/state.json":
            self._send(200, self.server.state_json(), "application/json", JSON_CSP)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8", JSON_CSP)

    def _not_allowed(self) -> None:
        self._send(405, b"GET only\n", "text/plain; charset=utf-8", JSON_CSP, {"Allow": "GET"})

    def __getattr__(self, name: str) -> Any:
        # Every method but GET (HEAD, POST, PUT, OPTIONS, any made-up verb) is refused alike.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _send(
        self, code: int, body: bytes, ctype: str, csp: str, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", csp)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s: " + format, self.address_string(), *args)


class LiveHttpServer(HTTPServer):
    """The server (bound at construction: a port in use is refused before the controller
    creates anything); :meth:`start` serves in a daemon thread, :meth:`stop` ends it."""

    allow_reuse_address = True

    def __init__(
        self, bind: str, port: int, source: Callable[[], LiveSnapshot | None], **collector: Any
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self.source = source
        self.registry = make_registry(source, **collector)
        self.hosts = _allowed_hosts()
        self._thread: threading.Thread | None = None
        self._last_request = 0.0
        self._json: tuple[LiveSnapshot | None, bytes] | None = None
        try:
            super().__init__((bind, port), _Handler)
        except (OSError, OverflowError) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise GpuplanError(f"--http: cannot listen on {bind}:{port}: {why}") from None

    def pace(self) -> None:
        """At most one request per :data:`MIN_REQUEST_GAP_S`: a client flooding the endpoint
        waits here, in this thread, and cannot take the controller's CPU (its GIL) from the
        control loop."""
        wait = self._last_request + MIN_REQUEST_GAP_S - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self._last_request = time.monotonic()

    def state_json(self) -> bytes:
        """``/state.json`` of the latest snapshot, encoded once per snapshot."""
        snap = self.source()
        cached = self._json
        if cached is not None and cached[0] is snap:
            return cached[1]
        doc: dict[str, Any] = snap.to_json() if snap is not None else {"starting": True}
        # < > & only occur inside JSON strings: escaped, no byte of it reads as markup
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=True)
        body = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()
        self._json = (snap, body)
        return body

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.5}, name="http", daemon=True
        )
        self._thread.start()
        log.info(
            "serving metrics and the live page on http://%s/ (GET /metrics, /, /state.json)",
            _url_host(self.server_address),
        )

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=REQUEST_TIMEOUT_S + 1)
        self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that disconnects or times out is not the controller's error: one line.
        log.debug("http request from %s failed", client_address, exc_info=True)


def _url_host(address: tuple[Any, ...]) -> str:
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
