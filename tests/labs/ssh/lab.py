"""A lab of real OpenSSH servers on loopback addresses, standing in for GPU nodes.

The SSH executor must be tested against real ``sshd`` (host keys, key-only login, sessions that
outlive their listener, process groups), not a mock. Node ``k`` is an ``sshd`` listening on
``127.0.1.k:PORT``: all of 127.0.0.0/8 is loopback on Linux, so each "node" has its own address
and the same port, like real hosts. Everything lives under one directory: host key, client key,
``authorized_keys`` per user, ``known_hosts`` (exact host keys, so the executor's strict host-key
check is exercised), one ``sshd_config`` per node, PID files and logs.

It only ever stops processes it started: listeners are found through their PID files (read
from the private root only) and checked against ``/proc/PID`` (our uid, the ``sshd``
executable, this node's config on the command line: PID reuse or a forged file), and
per-connection ``sshd`` processes only as descendants of such a listener. ``up`` is idempotent
(running nodes are kept; keys it made are reused). It installs ``openssh-server`` with apt when
``sshd`` is missing (waiting, bounded, for another apt's lock) and creates the unprivileged user
(default ``gpuuser``) if needed; both stay after ``down``.

Security (docs/ssh.md, "Threat model"): the root is private (:mod:`..labroot`). ``up`` creates
it, or accepts an existing one only when it is a real directory of the caller's that no one else
can write; every entry point (up, down, status) checks it again. Mode 0711: sshd reads each
user's ``authorized_keys`` with that user's rights, so they must traverse it, never list or
write it. A new root always gets fresh keys; in an existing one a key is reused only when it is
a regular file of ours with mode 0600 (else it is replaced), and every file is written without
following links. So a planted ``keys/id_ed25519`` can never become root's authorized key.

Needs root (binding sshd for several users, apt). CLI::

    python -m tests.labs.ssh.lab up [--dir D] [--nodes N] [--port P]
    python -m tests.labs.ssh.lab status|down [--dir D]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..labroot import apt_get, private_dir, private_root, process_is, read_file, write_file

SSHD = "/usr/sbin/sshd"
DEFAULT_DIR = "/tmp/gpuplan-sshlab"
DEFAULT_PORT = 2222
ROOT_MODE = 0o711
"""Private to its owner; others may only traverse it (sshd reads ``authorized_keys/USER`` as
USER)."""


class LabError(RuntimeError):
    """The lab could not be set up (no root, apt failed, sshd refused to start)."""


@dataclass(frozen=True)
class LabNode:
    """One lab node: its name (``node1`` ...), address and port."""

    name: str
    index: int
    host: str
    port: int


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, text=True, capture_output=True, **kw)  # type: ignore[call-overload]


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of ``pid`` from ``/proc``; None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _alive(pid: int) -> bool:
    """Running and not a zombie (PID 1 here reaps orphans slowly; ``kill -0`` is not enough)."""
    st = _proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _sshd_descendants(root: int) -> list[int]:
    """Per-connection ``sshd`` processes under the listener ``root`` (not the user's jobs)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _proc_stat(int(entry))
            if st is not None:
                children.setdefault(st[1], []).append(int(entry))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if _comm(child) == "sshd":
                found.append(child)
                stack.append(child)
    return found


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


class SshLab:
    """N ``sshd`` "nodes" on ``127.0.1.{first..first+N-1}:port`` configured under ``root``."""

    def __init__(
        self,
        root: str | Path = DEFAULT_DIR,
        nodes: int = 2,
        port: int = DEFAULT_PORT,
        user: str = "gpuuser",
        first_address: int = 1,
    ) -> None:
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        self.root = Path(os.path.abspath(root))
        self.port = port
        self.user = user
        self.nodes = [
            LabNode(f"node{k}", k, f"127.0.1.{first_address + k - 1}", port)
            for k in range(1, nodes + 1)
        ]

    # ------------------------------------------------------------------ paths
    @property
    def client_key(self) -> Path:
        return self.root / "keys" / "id_ed25519"

    @property
    def host_key(self) -> Path:
        return self.root / "keys" / "ssh_host_ed25519_key"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    def config_path(self, node: LabNode) -> Path:
        return self.root / f"sshd_config.{node.name}"

    def pid_path(self, node: LabNode) -> Path:
        return self.root / "run" / f"sshd-{node.name}.pid"

    def log_path(self, node: LabNode) -> Path:
        return self.root / "log" / f"sshd-{node.name}.log"

    def node(self, name: str) -> LabNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    # ------------------------------------------------------------------ set-up
    @staticmethod
    def install() -> None:
        """``apt-get install openssh-server`` when ``sshd`` is missing (no service is started:
        the lab runs its own daemons)."""
        if Path(SSHD).exists() and shutil.which("ssh-keygen"):
            return
        if os.geteuid() != 0:
            raise LabError("openssh-server is not installed and installing it needs root")
        guard = Path("/usr/sbin/policy-rc.d")
        made_guard = False
        if not guard.exists():  # keep the package's postinst from starting the system sshd
            guard.write_text("#!/bin/sh\nexit 101\n")
            guard.chmod(0o755)
            made_guard = True
        try:  # both wait (bounded) for another apt/dpkg holding the locks
            apt_get(["update", "-qq"], error=LabError)
            apt_get(
                [
                    "install",
                    "-y",
                    "-qq",
                    "--no-install-recommends",
                    "openssh-server",
                    "openssh-client",
                ],
                error=LabError,
            )
        finally:
            if made_guard:
                guard.unlink(missing_ok=True)

    def _ensure_user(self) -> None:
        """The lab's job user, able to log in: sshd runs every command through the account's
        shell from its home directory. An account made earlier by someone else (e.g. the Slurm
        lab's ``useradd --no-create-home --shell nologin`` for the same name) is given a shell
        and a home, or every login fails with "Could not chdir to home directory"."""
        try:
            entry = pwd.getpwnam(self.user)
        except KeyError:
            _run(["useradd", "-m", "-s", "/bin/bash", self.user])
            entry = pwd.getpwnam(self.user)
        if Path(entry.pw_shell).name in {"nologin", "false"}:
            _run(["usermod", "-s", "/bin/bash", self.user])
        home = Path(entry.pw_dir)
        if not home.is_dir():
            home.mkdir(mode=0o755, parents=True)
            os.chown(home, entry.pw_uid, entry.pw_gid)
        # useradd leaves the password field '!' (locked); with UsePAM no, sshd refuses locked
        # accounts even for key login. '*' = no password, not locked.
        _run(["usermod", "-p", "*", self.user])

    def _verify(self, create: bool) -> bool | None:
        """The root is private to the caller: True when created now (new), False when an
        existing one passed the checks, None when absent (``create`` False)."""
        return private_root(self.root, mode=ROOT_MODE, error=LabError, create=create)

    def _key_is_ours(self, key: Path) -> bool:
        """A key pair this lab made: both halves regular files of ours, the private one 0600
        and no one else can write the public one (``read_file`` refuses links and others')."""
        try:
            st = os.lstat(key)
            pub = read_file(key.with_suffix(".pub"), limit=4096, error=LabError)
        except (FileNotFoundError, LabError):
            return False
        return (
            stat.S_ISREG(st.st_mode)
            and st.st_uid == os.geteuid()
            and stat.S_IMODE(st.st_mode) == 0o600
            and pub is not None
        )

    def prepare(self) -> bool:
        """Check or create the private root and write keys, ``authorized_keys``, known_hosts
        and configs (no sshd is started); return True when the root was new (fresh keys)."""
        new = self._verify(create=True)
        for sub in ("keys", "run", "log"):
            private_dir(self.root, sub, error=LabError, mode=0o700)
        # sshd reads a user's authorized_keys with that user's rights: traversable by gpuuser.
        private_dir(self.root, "authorized_keys", error=LabError, mode=0o755)
        for key, comment in (
            (self.host_key, "gpuplan-lab-host"),
            (self.client_key, "gpuplan-lab-client"),
        ):
            if new or not self._key_is_ours(key):  # never reuse a key this lab did not make
                for stale in (key, key.with_suffix(".pub")):
                    stale.unlink(missing_ok=True)
                _run(
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)],
                    umask=0o077,
                )
        pub = (
            read_file(self.client_key.with_suffix(".pub"), limit=4096, error=LabError) or b""
        ).decode()
        for user in ("root", self.user):
            # root-owned, 0644: sshd (as USER) reads it, nobody but root can change it
            write_file(self.root / "authorized_keys" / user, pub, mode=0o644, error=LabError)
        host_raw = read_file(self.host_key.with_suffix(".pub"), limit=4096, error=LabError)
        host_pub = " ".join((host_raw or b"").decode().split()[:2])
        write_file(
            self.known_hosts,
            "".join(f"[{n.host}]:{n.port} {host_pub}\n" for n in self.nodes),
            mode=0o644,
            error=LabError,
        )
        for node in self.nodes:
            write_file(
                self.config_path(node),
                mode=0o644,
                error=LabError,
                data=f"""\
# generated by tests.labs.ssh.lab ({node.name})
ListenAddress {node.host}:{node.port}
HostKey {self.host_key}
PidFile {self.pid_path(node)}
AuthorizedKeysFile {self.root}/authorized_keys/%u
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
X11Forwarding no
AllowTcpForwarding no
AllowAgentForwarding no
PrintMotd no
MaxSessions 128
MaxStartups 64:30:128
LogLevel VERBOSE
""",
            )
        write_file(
            self.root / "lab.json",
            json.dumps(self.describe(), indent=1),
            mode=0o644,
            error=LabError,
        )
        return bool(new)

    def describe(self) -> dict[str, object]:
        """What a client needs: addresses, keys, known_hosts, user (also written to lab.json)."""
        return {
            "nodes": {n.name: {"host": n.host, "port": n.port} for n in self.nodes},
            "client_key": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            "user": self.user,
        }

    # ------------------------------------------------------------------ processes
    def listener_pid(self, node: LabNode) -> int | None:
        """PID of this lab's listener for ``node``, if it runs: the PID file is read from the
        verified private root only (no link, ours, bounded), and the process must be an
        ``sshd`` of our uid with this node's config on its command line."""
        if self._verify(create=False) is None:
            return None
        try:
            raw = read_file(self.pid_path(node), limit=64, error=LabError)
            pid = int((raw or b"").split()[0])
        except (ValueError, IndexError):
            return None
        if process_is(
            pid, exe=SSHD, uid=os.geteuid(), cmdline_contains=f"-f {self.config_path(node)} "
        ):
            return pid
        return None

    def is_up(self, node: LabNode) -> bool:
        return self.listener_pid(node) is not None

    def start_node(self, node: LabNode, timeout: float = 10.0) -> None:
        """Start ``node``'s sshd (no-op when it runs) and wait until it accepts connections."""
        if self.is_up(node):
            return
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege-separation dir
        cfg = str(self.config_path(node))
        check = subprocess.run([SSHD, "-t", "-f", cfg], capture_output=True, text=True)
        if check.returncode != 0:
            raise LabError(f"sshd -t {cfg}: {check.stderr.strip()}")
        # sshd daemonises and writes its PidFile; -E keeps its log out of syslog.
        started = subprocess.run(
            [SSHD, "-f", cfg, "-E", str(self.log_path(node))],
            capture_output=True,
            text=True,
            umask=0o022,
        )
        if started.returncode != 0:
            raise LabError(f"sshd {node.name}: {started.stderr.strip()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.is_up(node):
                try:
                    with socket.create_connection((node.host, node.port), timeout=1) as sock:
                        if sock.recv(4).startswith(b"SSH-"):
                            return
                except OSError:
                    pass
            time.sleep(0.05)
        log = self.log_path(node).read_text()[-800:] if self.log_path(node).exists() else ""
        raise LabError(f"{node.name} ({node.host}:{node.port}) did not come up: {log}")

    def stop_node(self, node: LabNode, hard: bool = False, timeout: float = 5.0) -> None:
        """Stop ``node``'s listener and the sshd processes serving its open connections.

        ``hard=True`` (SIGKILL) simulates a node dropping off the network: open connections die
        without a goodbye. Jobs started through the node run in their own sessions and survive,
        as they would on a real node whose network or sshd failed.
        """
        pid = self.listener_pid(node)
        if pid is None:
            self.pid_path(node).unlink(missing_ok=True)
            return
        sig = signal.SIGKILL if hard else signal.SIGTERM
        victims = [pid, *_sshd_descendants(pid)]
        for victim in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_alive(v) for v in victims):
            time.sleep(0.05)
        for victim in victims:
            if _alive(victim):
                os.kill(victim, signal.SIGKILL)
        self.pid_path(node).unlink(missing_ok=True)

    # ------------------------------------------------------------------ whole lab
    def up(self) -> SshLab:
        """Install if needed, write keys/configs, start every node. Idempotent."""
        if os.geteuid() != 0:
            raise LabError("the SSH lab needs root (sshd for several users, apt)")
        self._verify(create=True)
        self.install()
        self._ensure_user()
        self.prepare()
        for node in self.nodes:
            if not self.is_up(node) and not port_is_free(node.host, node.port):
                raise LabError(f"{node.host}:{node.port} is taken by another process")
            self.start_node(node)
        return self

    def down(self) -> None:
        """Stop the nodes this lab started (refused, nothing signalled, when the root is not a
        private root of the caller's)."""
        if self._verify(create=False) is None:
            return
        for node in self.nodes:
            self.stop_node(node)

    def status(self) -> dict[str, int | None]:
        return {n.name: self.listener_pid(n) for n in self.nodes}


def free_port(hosts: list[str], start: int = 22220, stop: int = 22999) -> int:
    """A port free on every address in ``hosts`` (tests run next to other labs)."""
    for port in range(start, stop):
        if all(port_is_free(h, port) for h in hosts):
            return port
    raise LabError(f"no free port in [{start}, {stop}) on {hosts}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.labs.ssh.lab")
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--user", default="gpuuser")
    args = parser.parse_args(argv)
    lab = SshLab(args.dir, args.nodes, args.port, args.user)
    try:
        if args.command == "up":
            t0 = time.monotonic()
            lab.up()
            print(json.dumps({**lab.describe(), "up_s": round(time.monotonic() - t0, 2)}, indent=1))
        elif args.command == "down":
            lab.down()
        else:
            print(json.dumps(lab.status()))
    except LabError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
