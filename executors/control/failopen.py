"""Fail-open: the controller's heartbeat file and the watchdog that releases held jobs.

The controller writes a heartbeat while its loop completes cycles; :func:`fail_open_check` (a
timer on the Slurm controller host, or ``--fail-open-check --watch``) hands every engine-held job
to Slurm's own scheduler once the heartbeat is older than ``--stale-after``, so a dead or wedged
controller never leaves jobs held for ever (``docs/controller.md``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import stat
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..slurm.cli import InvalidJobId, JobNotPending, SlurmCli, SlurmError, SlurmJob
from .markers import FAILOPEN, is_managed, with_marker_state

log = logging.getLogger(__name__)


def write_heartbeat(path: Path, info: Mapping[str, Any]) -> None:
    """Replace the heartbeat file atomically (a watchdog never reads half a file); 0600, and
    the temporary file is created exclusively without following a planted symlink."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # left by a process that died between create and rename
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({**info, "time": time.time()}))
    os.replace(tmp, path)


HEARTBEAT_MAX_BYTES = 4096
"""A heartbeat is one small JSON object (~150 bytes); anything longer is not one."""


class BadHeartbeat(ValueError):
    """The heartbeat path holds something that is not a heartbeat the controller wrote."""


def read_heartbeat(path: Path) -> dict[str, Any] | None:
    """The heartbeat's JSON object, or None when there is no file.

    Read bounded and without following links, because whoever can put something at ``path``
    must not be able to kill the watchdog (the one component that fails held jobs open): the
    file is opened ``O_NOFOLLOW | O_NONBLOCK`` (a symlink or a FIFO does not block or
    redirect), must be a regular file not writable by group or others (``fstat`` of what was
    opened), and at most :data:`HEARTBEAT_MAX_BYTES` are read. ``/dev/zero`` in its place once
    grew the watchdog to a MemoryError. Anything else raises :class:`BadHeartbeat`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        # ELOOP: the last component is a symlink.
        raise BadHeartbeat("a symlink" if err.errno == errno.ELOOP else err.strerror) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadHeartbeat("not a regular file")
        if st.st_mode & 0o022:
            raise BadHeartbeat(f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")
        chunks: list[bytes] = []
        size = 0
        while size <= HEARTBEAT_MAX_BYTES:
            chunk = os.read(fd, HEARTBEAT_MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > HEARTBEAT_MAX_BYTES:
        raise BadHeartbeat(f"larger than {HEARTBEAT_MAX_BYTES} bytes")
    try:
        info = json.loads(b"".join(chunks).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadHeartbeat("not a JSON heartbeat") from None
    if not isinstance(info, dict):
        raise BadHeartbeat("not a JSON object")
    return info


def heartbeat_age(path: Path, now: float | None = None) -> float:
    """Seconds since the controller last wrote its heartbeat; ``inf`` (stale) when it is
    missing or bad. A controller that never ran is as absent as a dead one, and a heartbeat
    that is not one the controller wrote (a symlink, a device, a huge or foreign file, no
    finite ``time``) is stale too: one warning line names the problem, and the watchdog goes
    on (fails open) instead of dying or trusting it."""
    try:
        info = read_heartbeat(path)
        if info is None:
            return float("inf")
        stamp = info.get("time")
        if (
            isinstance(stamp, bool)
            or not isinstance(stamp, (int, float))
            or not math.isfinite(stamp)
        ):
            raise BadHeartbeat("no finite 'time'")
    except BadHeartbeat as err:
        log.warning("heartbeat %s is not usable (%s): treated as stale", path, err)
        return float("inf")
    except OSError as err:
        log.warning("heartbeat %s cannot be read (%s): treated as stale", path, err.strerror)
        return float("inf")
    return max(0.0, (time.time() if now is None else now) - float(stamp))


def fail_open_check(
    cli: SlurmCli, heartbeat: Path, stale_after_s: float, partitions: Sequence[str] = ()
) -> list[int]:
    """Release engine-held jobs to Slurm's own scheduler if the controller's heartbeat is stale.

    Each held managed job gets ``AdminComment=gpuplan:failopen;...`` (so a returning controller
    and operators can tell), its engine-chosen ``NodeList`` cleared (Slurm may place it
    anywhere), ``StartTime=now`` (a requeued job would otherwise wait ``cred_expire``), and is
    released. Returns the Slurm ids released (empty while the heartbeat is fresh).
    """
    age = heartbeat_age(heartbeat)
    if age <= stale_after_s:
        log.debug("heartbeat %s is %.1f s old: controller alive", heartbeat, age)
        return []
    released: list[int] = []
    for sj in cli.jobs(all_states=False):
        if sj.state != "PENDING" or not sj.held or not is_managed(sj, partitions):
            continue
        try:
            release_to_slurm(cli, sj, FAILOPEN)
        except (JobNotPending, InvalidJobId) as err:
            log.info("fail-open: job %d changed meanwhile (%s)", sj.job_id, err)
            continue
        except SlurmError as err:
            # Still held and still marked "held": the next pass tries it again. One failure
            # must not strand the jobs after it.
            log.error("fail-open: releasing job %d failed (%s); next pass retries", sj.job_id, err)
            continue
        released.append(sj.job_id)
    if released:
        log.warning(
            "controller heartbeat %s is %s: released %d held job(s) to Slurm: %s",
            heartbeat,
            "missing" if age == float("inf") else f"{age:.0f} s old",
            len(released),
            " ".join(map(str, released)),
        )
    return released


def release_to_slurm(cli: SlurmCli, sj: SlurmJob, state: str) -> None:
    """Hand a held job to Slurm's own scheduler, then mark it ``state``.

    The engine-chosen ``NodeList`` is cleared (Slurm may place it anywhere) and ``StartTime``
    set to now (a requeued job would otherwise wait ``cred_expire``) before the release. The
    marker changes only after the release succeeded: a job whose release failed keeps its
    ``held`` marker, so the next pass (fail-open) or poll (rejection) tries again instead of
    skipping a job that is marked but still held.
    """
    cli.update_job(sj.job_id, NodeList="", StartTime="now")
    cli.release(sj.job_id)
    cli.update_job(sj.job_id, AdminComment=with_marker_state(sj.admin_comment, state))


def watch_fail_open(
    cli: SlurmCli,
    heartbeat: Path,
    stale_after_s: float,
    every_s: float,
    partitions: Sequence[str] = (),
    stop: threading.Event | None = None,
) -> None:
    """:func:`fail_open_check` every ``every_s`` seconds until ``stop`` is set."""
    stop = stop or threading.Event()
    while not stop.is_set():
        try:
            fail_open_check(cli, heartbeat, stale_after_s, partitions)
        except SlurmError as err:
            log.warning("fail-open check failed: %s", err)
        stop.wait(every_s)
