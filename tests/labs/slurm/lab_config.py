"""The Slurm lab's configuration: its shape, location and ports (see :mod:`.lab`).

Kept apart from the lab's process management so the shape of a lab can be checked and printed
without touching any daemon. Ports follow the root: the default root keeps the documented
6917 (slurmctld) and 17101.. (slurmd); any other root gets ports derived from its path, so two
labs on one machine (a developer's and a test run's, or two test runs) never share a port.
Every derived port stays below Linux's ephemeral range (32768+): a port in that range can be
taken at any moment by some process's outgoing connection, and the lab would then fail to start
for a reason no log names.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gpuplan.models import GpuplanError

__all__ = ["DEFAULT_ROOT", "JOB_ID_BAND", "PACKAGES", "LabConfig", "LabError"]

PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client", "slurm-wlm-basic-plugins")
"""Debian packages the lab needs (``slurm-wlm-basic-plugins`` has gres_gpu, cons_tres, lua)."""


DEFAULT_ROOT = Path("/tmp/gpuplan-slurmlab")
"""Where the lab lives unless told otherwise (its ports are the documented 6917 / 17101+)."""


JOB_ID_BAND = 90_000
"""Job ids per lab root: slot k numbers its jobs from ``1 + k * JOB_ID_BAND`` and wraps within its
band (``MaxJobId``), so no two labs on a machine ever run jobs with the same id (the
:data:`ROOT_SLOTS` slots fit under Slurm's largest job id, 67,043,328)."""

ROOT_SLOTS = 243
"""Slots for roots other than the default (slot 0): slot k's slurmd ports are
``17101 + 64 k ..`` (64 nodes at most), so slot 243's last port, 32,716, is still below the
ephemeral range."""


class LabError(GpuplanError):
    """The lab could not be installed, configured or started; the message says which step."""


@dataclass(frozen=True, slots=True)
class LabConfig:
    """Shape and location of the lab cluster."""

    root: Path = field(default_factory=lambda: DEFAULT_ROOT)
    nodes: int = 4
    gpus_per_node: int = 4
    gpu_type: str = "a100"
    node_prefix: str = "node"
    cpus_per_node: int = 16
    memory_mb: int = 64000
    ctld_port: int | None = None
    """slurmctld's port; None: 6917 for the default root, else one derived from the root, so
    two labs under different roots on one machine never share a port."""
    slurmd_port0: int | None = None
    """First slurmd port (one per node); None: derived like ``ctld_port``."""
    first_job_id: int | None = None
    """The first Slurm job id; None: 1 for the default root, else a band of
    :data:`JOB_ID_BAND` ids derived from the root like the ports. Why: with cgroup process
    tracking every lab on a machine shares ``/sys/fs/cgroup/<ctl>/slurm_<node>/uid_<u>/job_<id>``;
    two labs that both number from 1 and both have a ``node1`` would put two jobs in one cgroup,
    and the end of one kills the other (seen: a benchmark's job SIGKILLed by another lab's)."""
    cred_expire_s: int = 10
    """``AuthInfo=cred_expire``: also how long a requeued job must wait before it may start
    again unless the executor sets ``StartTime=now`` (Slurm's default is 120 s)."""
    job_submit_lua: bool | str = False
    """True: install the shipped ``job_submit.lua`` (``JobSubmitPlugins=lua``); a path: that
    file instead."""
    engine_partition: str = "gpuplan"
    """A second partition over the same nodes; the hook treats jobs submitted to it as
    engine-managed (opt-in by partition)."""
    cgroup: Literal["auto", "v1", "off"] = "auto"
    """``v1``: proctrack/cgroup + ConstrainDevices (real-site semantics, nothing escapes a
    killed job). ``off``: proctrack/pgid. ``auto``: v1 when its controllers are writable."""
    priority: Literal["basic", "multifactor"] = "basic"
    """Slurm's job priority plugin. ``basic``: submission order (Slurm's default). ``multifactor``:
    the weighting operators use, age plus job size with small jobs favoured
    (``PriorityWeightAge``/``PriorityWeightJobSize``, ``PriorityFavorSmall``): the second fair
    baseline of the Slurm benchmark."""
    install: bool = True
    """Install missing Debian packages (needs root and the Debian archive)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))
        slot = (
            0 if self.root == DEFAULT_ROOT else 1 + zlib.crc32(str(self.root).encode()) % ROOT_SLOTS
        )
        if self.ctld_port is None:
            object.__setattr__(self, "ctld_port", 6917 + 4 * slot)
        if self.slurmd_port0 is None:
            object.__setattr__(self, "slurmd_port0", 17101 + 64 * slot)
        if self.first_job_id is None:
            object.__setattr__(self, "first_job_id", 1 + JOB_ID_BAND * slot)
        if not 1 <= self.nodes <= 64:
            raise LabError(f"nodes must be 1..64, not {self.nodes}")
        if not 1 <= self.gpus_per_node <= 64:
            raise LabError(f"gpus_per_node must be 1..64, not {self.gpus_per_node}")
