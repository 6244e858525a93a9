"""Verify mode for the view's change set (``ClusterView.changed``, issue 13 round 4).

Stages that keep per-job state across decisions (``RunningOrder``, ``RankedQueue``) read only
the jobs a view's change set names. With :data:`VERIFY` on they also do the full pass they
replace and raise :class:`ChangeSetMissed` when the set left a written job out, so a new
writer of job fields that forgets to report (``Executor.touched``) fails the tests instead of
silently changing results. Read as ``change_verify.VERIFY`` at each use, so tests can set it.
"""

from __future__ import annotations

import os

VERIFY = os.environ.get("GPUPLAN_VERIFY_CHANGES", "") not in ("", "0")
"""On: every change-set sync also runs the full pass (``GPUPLAN_VERIFY_CHANGES=1`` at import,
or set by tests). It costs the full pass, so it is off outside tests."""


class ChangeSetMissed(RuntimeError):
    """A job was written (started, stopped, re-rated...) but the view's change set did not
    name it."""


def missed(what: str, jobs: list[str]) -> ChangeSetMissed:
    """The error naming the first few jobs the change set left out."""
    return ChangeSetMissed(
        f"{len(jobs)} {what} job(s) written but not in the view's change set, e.g. "
        f"{sorted(jobs)[:5]}: a writer of ActiveJob progress/lifecycle fields must add the "
        "job to Executor.touched (see executors/change_log.py)"
    )
