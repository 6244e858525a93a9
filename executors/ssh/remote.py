"""The executor's side of the sidecar protocol: installing the sidecar, one agent per node.

:class:`SidecarNodes` uploads the (stdlib-only) sidecar script to every node — refusing an unsafe
run root, see ``docs/ssh.md`` (threat model) — keeps one sidecar-agent RPC channel per node over
the SSH pool, numbers control requests per sidecar directory, and waits out a node's fencing
time when it cannot be reached. The :class:`~.executor.SshExecutor` holds one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpuplan.models import GpuplanError, JobAllocation, JobSpec

from . import agent as sidecar_module
from .agent_bundle import agent_source
from .launchers import Launcher, no_nul, safe_name
from .rpc import NodeAddress, NodeUnreachable, RemoteCommandError, RpcChannel

if TYPE_CHECKING:  # the SSH pool needs asyncssh; the local transport has the same interface
    from .pool import SshPool
from .state import JobRun, RankRun, SshSettings

log = logging.getLogger("gpuplan.executors.ssh.executor")

SIDECAR_SOURCE = agent_source()
"""The sidecar program as shipped: the :mod:`.agent` package bundled into one script."""
SIDECAR_DIGEST = hashlib.sha256(SIDECAR_SOURCE.encode()).hexdigest()[:12]
# Installs the sidecar from stdin, atomically, only if its content changed; then renews the
# node's lease (argv[2]) and prints how old it was, as JSON.
UPLOAD_SCRIPT = (
    # Runs on the node before anything is executed from the run root: create it 0700 if
    # missing, and refuse (exit 3, one line naming path, owner and mode) a root that is a
    # symlink, not ours, or open to others, or whose ancestors others may write (unless
    # sticky, like /tmp): otherwise whoever made it first would get code run as the login
    # user (the sidecar script) or plant state files that make the sidecar signal any PID.
    "import json,os,stat,sys,time\n"
    "p=sys.argv[1];d=sys.stdin.read();r=os.path.dirname(p) or '.';u=os.getuid()\n"
    "def no(m):\n"
    "    sys.stderr.write('run root %s refused: %s\\n'%(os.path.abspath(r),m));sys.exit(3)\n"
    "a=os.path.abspath(r);c=os.path.dirname(a)\n"
    "while True:\n"
    "    s=os.stat(c) if os.path.exists(c) else None\n"
    "    if s is not None and (s.st_uid not in (0,u) or (s.st_mode&0o022 and not "
    "s.st_mode&stat.S_ISVTX)):\n"
    "        no('ancestor %s is owned by uid %d with mode %o'%(c,s.st_uid,s.st_mode&0o7777))\n"
    "    if c==os.path.dirname(c):\n"
    "        break\n"
    "    c=os.path.dirname(c)\n"
    "os.makedirs(r,mode=0o700,exist_ok=True)\n"
    "s=os.lstat(r)\n"
    "if stat.S_ISLNK(s.st_mode) or not stat.S_ISDIR(s.st_mode):\n"
    "    no('not a directory (a symlink?)')\n"
    "if s.st_uid!=u:\n"
    "    no('owned by uid %d, not by the login user (uid %d)'%(s.st_uid,u))\n"
    "if s.st_mode&0o077:\n"
    "    no('mode %o lets others in; it must be 0700'%(s.st_mode&0o777))\n"
    "old=open(p).read() if os.path.exists(p) else None\n"
    "if old!=d:\n"
    "    t='%s.%d.tmp'%(p,os.getpid())\n"
    "    f=os.fdopen(os.open(t,os.O_WRONLY|os.O_CREAT|os.O_EXCL|os.O_NOFOLLOW,0o600),'w')\n"
    "    f.write(d);f.close();os.replace(t,p)\n"
    # The lease, renewed here and not only by the agent's first request: this is the first
    # command of every (re)connection, and the agent's start-up after it would otherwise
    # count against the sidecars' lease (engine hand-over, see docs/ssh.md). Only after the
    # checks, only inside the verified root, never through a symlink.
    "l=sys.argv[2];a=None\n"
    "if os.path.dirname(l)!=r:\n"
    "    no('lease file %s outside the run root'%l)\n"
    "try:\n"
    "    a=time.time()-os.lstat(l).st_mtime\n"
    "except FileNotFoundError:\n"
    "    pass\n"
    "try:\n"
    "    f=os.open(l,os.O_WRONLY|os.O_CREAT|os.O_NOFOLLOW,0o600);os.utime(f);os.close(f)\n"
    "except OSError as e:\n"
    "    no('lease file %s: %s'%(l,e.strerror))\n"
    "print(json.dumps({'lease_age':a}))\n"
)
REMOTE_ERRORS = (NodeUnreachable, RemoteCommandError)


class UnsafeRunRoot(GpuplanError):
    """The run root on a node is not safe to execute from (another user's, a symlink, open to
    others). A configuration or security problem, not a transient failure: the run stops with
    this error instead of retrying the node."""


class SidecarNodes:
    """Sidecar agents on the nodes, reached through ``pool`` (see the module docstring).

    ``unreachable`` (node -> engine time first seen unreachable) is shared with the executor,
    which reports a node failed once it has been unreachable for ``settings.fail_after``."""

    def __init__(
        self,
        pool: SshPool,
        settings: SshSettings,
        root: str,
        clock: Callable[[], float],
        addresses: Mapping[str, NodeAddress],
    ) -> None:
        self.pool = pool
        self.addresses = addresses
        self.settings = settings
        self.root = root
        self.clock = clock
        self.sidecar_path = f"{root}/.sidecar-{SIDECAR_DIGEST}.py"
        self.seq: dict[str, int] = {}
        self.unreachable: dict[str, float] = {}
        self._uploaded: dict[str, int] = {}
        self._agents: dict[str, RpcChannel] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self.bind: Callable[[str, tuple[int, ...]], list[str] | None] = lambda _n, _g: None
        """node, planned GPU indices -> their ``CUDA_VISIBLE_DEVICES`` entries (GPU UUIDs),
        None to bind by index (set by the executor from the nodes' NVML inventory)."""
        self.lease_ages: dict[str, float | None] = {}
        """node -> how old its lease was when the last (re)connection renewed it (None: there
        was none). Older than ``lease_s``: the node's sidecars may have fenced their jobs."""

    def close_agents(self) -> None:
        """Close every agent channel (the pool's connections stay)."""
        for agent in self._agents.values():
            agent.close()
        self._agents.clear()

    def lease_file(self, node: str) -> str:
        """Per-node lease: on a shared run root (the lab, NFS) one node's renewals must not
        keep another node's sidecars from fencing."""
        return f"{self.root}/.lease-{safe_name(node)}"

    def job_dir(self, job_id: str, node: str) -> str:
        """The sidecar directory of ``job_id``'s rank on ``node``."""
        return f"{self.root}/{safe_name(job_id)}@{safe_name(node)}"

    def next_seq(self, jobdir: str) -> int:
        """The next control sequence number of a sidecar directory."""
        seq = self.seq.get(jobdir, 0) + 1
        self.seq[jobdir] = seq
        return seq

    async def ensure_uploaded(self, node: str) -> None:
        """Install the sidecar on ``node`` once per connection (atomically, if changed) and
        renew the node's lease in the same command.

        Why the lease here: a new engine (hand-over, crash) used to renew it only with the
        agent's first request, after connecting and two remote commands (this install step,
        then the agent's start-up; each an SSH session and a Python start-up on the node).
        Under load that took longer than a short lease, so the sidecars fenced
        (checkpoint-stopped) the very jobs the new engine was about to adopt. Renewing in the
        first command takes the agent's start-up out of that window. How old the lease was is
        kept in ``lease_ages`` (logged at INFO: an old lease in a reused run root is normal;
        the executor warns when it actually finds jobs fenced)."""
        await self.pool.connection(node)
        if self._uploaded.get(node) == self.pool.connects.get(node):
            return
        result = await self.pool.run(
            node,
            [
                self.settings.remote_python,
                "-c",
                UPLOAD_SCRIPT,
                self.sidecar_path,
                self.lease_file(node),
            ],
            input=SIDECAR_SOURCE,
            timeout=self.settings.command_timeout_s,
        )
        if result.exit_status != 0:
            detail = " ".join(str(result.stderr or "").split())[:500]
            if result.exit_status == 3:
                raise UnsafeRunRoot(f"{node}: {detail}")
            raise RemoteCommandError(f"{node}: cannot install the sidecar: {detail}")
        self._uploaded[node] = self.pool.connects[node]
        self._note_lease_age(node, result.stdout)

    def _note_lease_age(self, node: str, stdout: str) -> None:
        """Record (and log) how old the lease was when the install step renewed it."""
        try:
            age = json.loads(stdout.strip().splitlines()[-1])["lease_age"]
            age = None if age is None else float(age)
        except (ValueError, KeyError, IndexError, TypeError):
            log.warning(
                "%s: unreadable lease report from the install step: %r", node, stdout[-200:]
            )
            return
        self.lease_ages[node] = age
        lease_s = self.settings.lease_s
        if age is not None and lease_s > 0 and age > lease_s:
            log.info(
                "%s: lease renewed after %.1f s (lease_s %.1f s): sidecars running there "
                "have fenced their jobs",
                node,
                age,
                lease_s,
            )

    async def agent(self, node: str) -> RpcChannel:
        """The node's sidecar-agent channel (opened, after the upload, when needed). One
        opening at a time per node: concurrent first requests (status and inventory) share
        one agent instead of each opening its own."""
        lock = self._opening.setdefault(node, asyncio.Lock())
        async with lock:
            return await self._open_agent(node)

    async def _open_agent(self, node: str) -> RpcChannel:
        agent = self._agents.get(node)
        if agent is not None and not agent.closed:
            return agent
        await self.ensure_uploaded(node)
        agent = await self.pool.open_rpc(
            node,
            [
                self.settings.remote_python,
                self.sidecar_path,
                "agent",
                "--lease",
                self.lease_file(node),
            ],
        )
        self._agents[node] = agent
        return agent

    async def call(self, node: str, cmd: str, *, wait: float = 0.0, **args: Any) -> Any:
        """One sidecar-agent request on ``node`` (a broken agent or connection is replaced on
        the next call; a failure surfaces as NodeUnreachable / RemoteCommandError)."""
        agent = await self.agent(node)
        try:
            return await agent.call(
                cmd, {**args, "wait": wait}, timeout=self.settings.command_timeout_s + wait
            )
        except NodeUnreachable:
            agent.close()
            self._agents.pop(node, None)
            raise

    async def poll_node(self, node: str) -> dict[str, dict[str, Any]]:
        """Status of every sidecar of ``node``: directory -> status entry."""
        out = await self.call(node, "status", root=self.root)
        # Only this node's sidecars (a shared run root lists every node's dirs).
        return {entry["dir"]: entry for entry in out["jobs"] if entry["spec"].get("node") == node}

    async def control(
        self, node: str, rank: RankRun, control: dict[str, Any], wait: float
    ) -> dict[str, Any]:
        """Write a rank's desired state and wait up to ``wait`` s for the acknowledgement."""
        control = {**control, "seq": self.next_seq(rank.dir)}
        return await self.call(node, "control", dir=rank.dir, control=control, wait=wait)

    async def kill(self, node: str, jobdir: str) -> None:
        """Checkpoint-signal then SIGKILL whatever a sidecar dir still runs (best effort)."""
        try:
            await self.call(node, "kill", dir=jobdir, wait=self.settings.ckpt_grace_s)
        except REMOTE_ERRORS as exc:
            log.warning("kill %s on %s failed: %s", jobdir, node, exc)

    async def await_fence(self, node: str) -> None:
        """Wait until sidecars on an unreachable ``node`` must have fenced themselves."""
        since = self.unreachable.setdefault(node, self.clock())
        if self.settings.lease_s <= 0:
            log.error("node %s unreachable and fencing is disabled: its jobs may still run", node)
            return
        remaining = since + self.settings.fail_after - self.clock()
        if remaining > 0:
            log.warning(
                "node %s unreachable: waiting %.1f s for its sidecars to fence", node, remaining
            )
            await asyncio.sleep(remaining)

    # ------------------------------------------------------------------ whole runs
    async def stop_run(self, run: JobRun, keep: set[str] | frozenset[str] = frozenset()) -> None:
        """Checkpoint-stop every rank; sidecars on ``keep`` nodes stay for a restart."""

        async def one(node: str, rank: RankRun) -> None:
            action = "stop" if node in keep else "exit"
            try:
                res = await self.control(node, rank, {"action": action}, self.settings.stop_wait)
            except REMOTE_ERRORS as exc:
                log.warning("stop %s on %s: %s", rank.dir, node, exc)
                rank.sidecar_alive = False
                await self.await_fence(node)
                return
            rank.sidecar_alive = bool(res["alive"]) and action == "stop"
            if not res["ok"]:
                # Not acknowledged: the sidecar is gone (its child may be an orphan) or stuck.
                await self.kill(node, rank.dir)
                rank.sidecar_alive = False

        await asyncio.gather(*(one(n, r) for n, r in run.ranks.items()))
        run.ranks = {n: r for n, r in run.ranks.items() if n in keep and r.sidecar_alive}
        if run.state == "running":
            run.state = "stopped"

    async def read_checkpoints(
        self, job_id: str, patterns: list[str], candidates: Sequence[str]
    ) -> dict[str, float] | None:
        """Every file matching ``patterns`` (path -> its ``done``), read through the first
        reachable of ``candidates``; None when none could read them."""
        seen: set[str] = set()
        for node in candidates:
            if node in seen or node in self.unreachable:
                continue
            seen.add(node)
            try:
                out = await self.call(node, "read", paths=patterns, glob=True)
            except REMOTE_ERRORS as exc:
                log.warning("reading checkpoints of %r on %s: %s", job_id, node, exc)
                continue
            return {
                p: float(v["done"])
                for p, v in out["files"].items()
                if isinstance(v, dict) and "done" in v
            }
        return None

    async def start_ranks(
        self,
        spec: JobSpec,
        kept: Mapping[str, RankRun],
        gen: int,
        alloc: JobAllocation,
        ckpts: Mapping[str, float],
        launcher: Launcher,
    ) -> dict[str, RankRun]:
        """Start generation ``gen`` of every rank of ``spec`` on ``alloc`` (reusing the sidecars
        in ``kept``). Each rank runs from its checkpoint to its share of the remaining work
        (proportional to its GPUs)."""
        order = sorted(alloc.placement.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        nranks = len(order)
        total_gpus = alloc.gpus
        remaining = max(0.0, spec.work - sum(ckpts.values()))
        master = self.addresses[order[0][0]].host
        port = (
            20000
            + int(hashlib.sha256(spec.id.encode("utf-8", "surrogatepass")).hexdigest()[:8], 16)
            % 20000
        )
        sidecar_spec = {
            "protocol": sidecar_module.PROTOCOL,
            "job_id": spec.id,
            "lease_s": self.settings.lease_s,
            "ckpt_grace_s": self.settings.ckpt_grace_s,
            "term_grace_s": self.settings.term_grace_s,
            "checkpoint_signal": self.settings.checkpoint_signal,
        }
        new_ranks: dict[str, RankRun] = {}

        async def one(rank_idx: int, node: str, gpus: tuple[int, ...]) -> None:
            path = launcher.checkpoint_file(spec, rank_idx)
            start_done = ckpts.get(path, 0.0) if path else 0.0
            target = start_done + remaining * len(gpus) / total_gpus
            cmd = launcher.worker(spec, rank_idx, nranks, target)
            env = {
                **cmd.env,
                "GPUPLAN_JOB_ID": spec.id,
                "GPUPLAN_RANK": str(rank_idx),
                "GPUPLAN_NRANKS": str(nranks),
                "GPUPLAN_GEN": str(gen),
                "NODE_RANK": str(rank_idx),
                "NNODES": str(nranks),
                "MASTER_ADDR": master,
                "MASTER_PORT": str(port),
            }
            no_nul([*cmd.argv, *env.keys(), *env.values()], f"job {spec.id!r}")
            control = {
                "action": "run",
                "gen": gen,
                "rank": rank_idx,
                "nranks": nranks,
                "gpus": list(gpus),
                "devices": self.bind(node, gpus),
                "argv": list(cmd.argv),
                "env": env,
                "cwd": cmd.cwd,
                "files": dict(cmd.files),
            }
            rank = kept.get(node)
            res: dict[str, Any] | None = None
            if rank is None:
                rank = RankRun(node=node, rank=rank_idx, gpus=gpus, dir=self.job_dir(spec.id, node))
            try:
                if rank.sidecar_alive:
                    res = await self.control(node, rank, control, self.settings.command_timeout_s)
                    if not res["alive"]:
                        res = None
                if res is None:
                    bundle = {
                        "spec": {**sidecar_spec, "node": node, "lease_file": self.lease_file(node)},
                        "control": {**control, "seq": self.next_seq(rank.dir)},
                    }
                    res = await self.call(
                        node,
                        "launch",
                        dir=rank.dir,
                        bundle=bundle,
                        wait=self.settings.command_timeout_s,
                    )
            except REMOTE_ERRORS as exc:
                log.warning("launch of %r rank %d on %s failed: %s", spec.id, rank_idx, node, exc)
                res = {"ok": False, "alive": False}
            rank.rank, rank.gpus, rank.target = rank_idx, gpus, target
            rank.start_done, rank.files = start_done, dict(cmd.files)
            rank.sidecar_alive = bool(res.get("alive"))
            rank.startup_measured = False
            new_ranks[node] = rank

        await asyncio.gather(*(one(i, n, tuple(g)) for i, (n, g) in enumerate(order)))
        return new_ranks
