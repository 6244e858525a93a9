"""Plan application for :class:`~.executor.SshExecutor`: turning an ``AllocationPlan`` into stops,
adoptions, in-place resizes and launches on the nodes.

Why a separate module: this is the executor's two-phase "stop everything, read checkpoints,
then start" protocol (and eviction), which changes together and apart from the executor's
event loop, polling and failure handling. It is a mixin so that the methods keep their names
on ``SshExecutor`` and share its state (``_runs``, ``_jobs``, ``nodes``, ...), which
:mod:`.executor` owns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from gpuplan.models import Action, ActiveJob, AllocationPlan, JobAllocation, placement_rate

from .inplace import in_place_blocker, resize_in_place
from .state import FoundJob, JobRun, run_from_found

log = logging.getLogger("gpuplan.executors.ssh.executor")


class PlanApplier:
    """Mixin of :class:`~.executor.SshExecutor`: applies plans and evictions (see module doc)."""

    # State and helpers provided by SshExecutor.
    _runs: dict[str, JobRun]
    _jobs: dict[str, ActiveJob]
    _found: dict[str, FoundJob]
    _outstanding: set[str]
    _claims_open: bool
    action_log: list[dict[str, Any]]
    resize_log: list[dict[str, Any]]
    in_place_pauses: list[float]
    adopted: set[str]

    # ------------------------------------------------------------------ plans
    def _log_action(self, now: float, action: Action) -> None:
        self.action_log.append(
            {
                "t": now,
                "kind": action.kind,
                "job": action.job_id,
                "before": action.gpus_before,
                "after": action.gpus_after,
                "before_placement": dict(action.before.placement) if action.before else {},
                "after_placement": dict(action.after.placement) if action.after else {},
            }
        )

    async def _apply(self, plan: AllocationPlan, jobs: Mapping[str, ActiveJob]) -> None:  # noqa: C901 (a named exception to the complexity gate)
        await self._ensure_started()
        now = plan.time
        stops: dict[str, tuple[JobRun, set[str]]] = {}
        launches: list[tuple[ActiveJob, JobAllocation]] = []
        adopt: list[tuple[ActiveJob, FoundJob]] = []
        in_place: list[tuple[ActiveJob, JobRun, JobAllocation, int]] = []
        for action in plan.actions:
            if action.kind == "keep":
                continue
            job = jobs[action.job_id]
            self._jobs[job.id] = job
            self._outstanding.add(job.id)
            self._log_action(now, action)
            run = self._runs.get(job.id)
            if action.kind == "start":
                assert action.after is not None
                found = self._found.pop(job.id, None)
                if found is not None and found.kind == "completed":
                    self._runs[job.id] = JobRun(
                        spec=job.spec, gen=found.gen, state="completed_unreported", adopted=True
                    )
                    self.adopted.add(job.id)
                    continue
                if found is not None and found.placement == dict(action.after.placement):
                    adopt.append((job, found))
                    continue
                if found is not None:
                    stops[job.id] = (run_from_found(found, job.spec), set())
                if run is not None and run.ranks:
                    stops[job.id] = (run, set())
                launches.append((job, action.after))
            elif action.kind == "preempt":
                if run is not None:
                    stops[job.id] = (run, set())
            else:  # resize / migrate
                assert action.after is not None
                blocker = (
                    in_place_blocker(run, action, self.launcher, self.settings)
                    if job.id not in self._found
                    else "found at start-up"
                )
                if blocker is None and run is not None:
                    grow = action.gpus_after - action.gpus_before
                    in_place.append((job, run, action.after, grow))
                    continue
                if self.capabilities.resize == "in_place":
                    mode, cost = self.capabilities.resize_cost(in_place_possible=False)
                    log.warning(
                        "job %r: %s by %s (~%.2f s), not in place: %s",
                        job.id,
                        action.kind,
                        mode,
                        cost,
                        blocker,
                    )
                    self.resize_log.append(
                        {
                            "t": now,
                            "job": job.id,
                            "kind": action.kind,
                            "mode": mode,
                            "pause_s": None,
                            "why": blocker,
                        }
                    )
                before = set(action.before.placement) if action.before else set()
                keep = before & set(action.after.placement)
                if run is not None:
                    stops[job.id] = (run, keep)
                launches.append((job, action.after))
        if self._claims_open:
            await self._close_claims(stops)
        wall = time.time()
        for run, _ in stops.values():
            run.restart_t0 = wall
        await asyncio.gather(*(self.nodes.stop_run(run, keep) for run, keep in stops.values()))
        t_stopped = time.time()
        starting = {job.id: list(alloc.placement) for job, alloc in launches}
        read_for = {job_id for job_id in stops if job_id in self._jobs} | set(starting)
        specs = {j: (self._jobs[j].spec) for j in read_for}
        found_ckpts = await asyncio.gather(
            *(self._read_ckpts(specs[j], starting.get(j, [])) for j in sorted(read_for))
        )
        ckpts = dict(zip(sorted(read_for), found_ckpts, strict=True))
        for job_id, (run, _) in stops.items():
            job = self._jobs.get(job_id)
            if job_id not in starting and job is not None:  # preempted: progress = checkpoints
                run.state = "stopped"
                self._set_done(run, job, ckpts.get(job_id, {}))
                job.rate = 0.0
        for job, found in adopt:
            run = run_from_found(found, job.spec)
            run.ckpt = await self._read_ckpts(job.spec, list(found.ranks))
            self._runs[job.id] = run
            self.adopted.add(job.id)
            job.rate = placement_rate(job.spec, self.cluster, job.allocation)
            job.resume_time = now
            self._measure(run, found.ranks, now)
        for job, _ in launches:
            self._runs.setdefault(job.id, JobRun(spec=job.spec)).restart_t0 = (
                wall if job.id in stops else None
            )
        # In-place shrinks before grows, both before launches: a GPU changes hands only after
        # its previous user acknowledged it no longer uses it.
        for shrink in (True, False):
            batch = [x for x in in_place if (x[3] < 0) == shrink]
            await asyncio.gather(
                *(self._resize_in_place(job, run, alloc, now) for job, run, alloc, _ in batch)
            )
        t_read = time.time()
        await asyncio.gather(
            *(self._launch(job, alloc, ckpts.get(job.id, {})) for job, alloc in launches)
        )
        log.debug(
            "plan at %.2f: %d stops %.3f s, checkpoints %.3f s, %d launches %.3f s",
            now,
            len(stops),
            t_stopped - wall,
            t_read - t_stopped,
            len(launches),
            time.time() - t_read,
        )

    async def _resize_in_place(
        self, job: ActiveJob, run: JobRun, alloc: JobAllocation, now: float
    ) -> None:
        """One in-place resize (see :mod:`.inplace`) and its accounting."""
        result = await resize_in_place(self.nodes, run, alloc, self.settings)
        self.resize_log.append(
            {
                "t": now,
                "job": job.id,
                "kind": "resize",
                "mode": result.mode,
                "pause_s": result.pause_s,
                "why": None,
            }
        )
        job.rate = placement_rate(job.spec, self.cluster, alloc)
        if result.mode == "in_place":
            self.in_place_pauses.append(result.pause_s)
            job.resume_time = now + result.pause_s
            return
        log.warning(
            "job %r: in-place resize %s after %.2f s",
            job.id,
            "fell back to a checkpoint-restart" if result.mode == "restart" else "got no answer",
            result.pause_s,
        )
        if result.mode == "restart":
            ckpts = await self._read_ckpts(job.spec, list(alloc.placement))
            for rank in run.ranks.values():
                rank.start_done = ckpts.get(rank.files.get("checkpoint", ""), rank.start_done)
            job.resume_time = now + self._startup_estimate()

    async def _evict(self, job: ActiveJob) -> None:
        await self._ensure_started()
        self._jobs[job.id] = job
        run = self._runs.get(job.id)
        self.action_log.append(
            {
                "t": self.now(),
                "kind": "evict",
                "job": job.id,
                "before": job.gpus,
                "after": 0,
                "before_placement": {},
                "after_placement": {},
            }
        )
        if run is None:
            return
        await self.nodes.stop_run(run)
        run.state = "stopped"
        self._set_done(run, job, await self._read_ckpts(job.spec, []))
        job.rate = 0.0
