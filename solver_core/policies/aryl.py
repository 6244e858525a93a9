"""Aryl (001 digest): two-phase allocation + grouped placement + cost-based reclaiming.

:class:`ArylPolicy` applies Alg. 2 to a live :class:`~gpuplan.models.ClusterView`:

1. **Phase 1** -- pending jobs in SJF order (T_j for inelastic jobs, T_j^max = remaining time at
   the base demand for elastic ones; ties by submission, then id). Each gets its inelastic
   demand placed on real servers or is skipped (skip-and-continue). "Fits" is checked by the
   placement itself rather than by a GPU count, so an admitted job is never left unplaceable by
   fragmentation. Free GPUs are tried first; only then may the job take GPUs of running elastic
   jobs' *flexible* workers (C^a = idle + flexible GPUs), i.e. scale them in.
2. **Phase 2** -- per pool (training servers / on-loan servers), the GPUs left plus the
   flexible GPUs not taken go to elastic jobs (running + just admitted) by the MCKP of
   :mod:`gpuplan.solver_core.aryl.mckp`: item "k extra workers" of job j weighs k * D_j GPUs and
   is worth ``T_j(w_min) - T_j(w_min + k)``, which is Alg. 2's ``T^max k / (k + w_min)`` under
   linear scaling and the profiled reduction otherwise. Each pool is its own knapsack because a
   job's workers all run on one GPU type (no heterogeneous training in the Basic scenario), so
   a job's flexible workers can only use its own pool.
3. **Placement** -- :class:`~gpuplan.solver_core.aryl.placement.ServerBook`: inelastic jobs
   prefer training servers, elastic jobs on-loan servers; base and flexible workers are kept on
   separate on-loan server groups. Running jobs never move; a shrinking elastic job gives back
   flexible workers, a growing one fills servers it already uses first.

The policy remembers which GPUs of each elastic job are flexible (``_flex``), because a
:class:`~gpuplan.models.JobAllocation` does not say. Its ``reclaimer`` attribute is the
:class:`~gpuplan.solver_core.aryl.reclaim.Reclaimer` that ``simulate`` hands to the engine
unless the caller passes another one.

Variants registered below switch the pieces on and off for the paper's ablations (Tab. 5, 6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuplan.models import ActiveJob, ClusterView, JobAllocation, Node, SolverStats

from ..aryl.mckp import MckpGroup, solve_mckp
from ..aryl.placement import ServerBook
from ..aryl.reclaim import Reclaimer
from ..policy import Decision

__all__ = ["POLICIES", "ArylConfig", "ArylPolicy"]


@dataclass(frozen=True, slots=True)
class ArylConfig:
    """Which parts of Aryl are on.

    * ``scaling``: phase 2 (elastic jobs get flexible workers); off = every job runs rigid at
      its requested size (the "capacity loaning only" rows of Tab. 5).
    * ``loaning``: use on-loan inference servers at all; off = training servers only (the
      "elastic scaling only" rows), whatever loans the engine receives.
    * ``mckp``: ``dp`` (the paper), ``greedy``, or an exact backend (``cp-sat``, ...).
    * ``grouped``: separate base / flexible on-loan server groups; ``elastic_on_loan``:
      elastic jobs prefer on-loan servers. Both off = Tab. 6's naive BFD placement.
    * ``reclaim``: ``aryl``, ``exact``, ``scf`` or ``random`` (see ``Reclaimer``).
    """

    scaling: bool = True
    loaning: bool = True
    mckp: str = "dp"
    grouped: bool = True
    elastic_on_loan: bool = True
    reclaim: str = "aryl"
    seed: int = 0
    time_limit_s: float = 1.0


def _speed(view: ClusterView, job: ActiveJob, node: Node) -> float:
    """Throughput multiplier of ``job`` on ``node``'s GPU type (T4 = 1/4 of a V100 by default)."""
    cluster = view.cluster
    profile = job.spec.throughput
    return profile.type_multiplier(node.gpu_type, cluster.gpu_type(node.gpu_type).relative_speed,
                                   cluster.gpu_type(profile.reference_gpu).relative_speed)


def _worker_size(job: ActiveJob, gpus: int) -> int:
    """GPUs per worker; 1 when the count is not a whole number of the job's workers."""
    d = job.spec.gpus_per_worker
    return d if gpus % d == 0 else 1


class ArylPolicy:
    """Aryl's job scheduler (see module docstring)."""

    def __init__(self, name: str = "aryl", config: ArylConfig | None = None) -> None:
        self.name = name
        self.config = config or ArylConfig()
        self.reclaimer = Reclaimer(self.config.reclaim, seed=self.config.seed,
                                   time_limit_s=self.config.time_limit_s)
        self._flex: dict[str, dict[str, tuple[int, ...]]] = {}
        self.reclaimer.flexible_source = lambda: self._flex
        # per-decision node lists (set at the start of every decide)
        self._nodes: dict[str, Node] = {}
        self._train: list[str] = []
        self._loan: list[str] = []

    def next_wakeup(self, view: ClusterView) -> float | None:
        return None

    # ------------------------------------------------------------------ helpers
    def _elastic(self, job: ActiveJob) -> bool:
        return self.config.scaling and job.spec.elastic

    def _demand(self, job: ActiveJob) -> int:
        """Inelastic demand: base (w_min) of an elastic job, the request otherwise."""
        return job.spec.min_gpus if self._elastic(job) else job.spec.requested_gpus

    def _split(self, job: ActiveJob) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """(base, flexible) GPUs of a running elastic job, repaired so base == w_min GPUs.

        The engine may have scaled the job in on a reclaim (losing base or flexible GPUs), or
        the job may be new to this policy; then flexible GPUs are promoted from the servers
        where the job has the most, or base GPUs demoted from where it has the fewest.
        """
        placement = job.allocation.placement  # type: ignore[union-attr]
        memory = self._flex.get(job.id, {})
        flex: dict[str, list[int]] = {}
        base: dict[str, list[int]] = {}
        for node, gpus in placement.items():
            mine = set(memory.get(node, ()))
            f = [g for g in gpus if g in mine]
            b = [g for g in gpus if g not in mine]
            if f:
                flex[node] = f
            if b:
                base[node] = b
        want = job.spec.min_gpus
        have = sum(len(g) for g in base.values())
        while have < want and flex:
            node = max(flex, key=lambda n: (len(flex[n]), n))
            move = flex[node][: want - have]
            flex[node] = flex[node][len(move):]
            if not flex[node]:
                del flex[node]
            base.setdefault(node, []).extend(move)
            have += len(move)
        while have > want:
            node = min(base, key=lambda n: (len(base[n]), n))
            move = base[node][: have - want]
            base[node] = base[node][len(move):]
            if not base[node]:
                del base[node]
            flex.setdefault(node, []).extend(move)
            have -= len(move)
        return base, flex

    def _pools(self, view: ClusterView, job: ActiveJob) -> list[list[str]]:
        """Candidate node lists in preference order (training / on-loan), type-filtered."""
        want = job.spec.gpu_type
        train = [n for n in self._train if want is None or view.nodes[n].gpu_type == want]
        loan = [n for n in self._loan if want is None or view.nodes[n].gpu_type == want]
        first_loan = self._elastic(job) and self.config.elastic_on_loan
        order = [loan, train] if first_loan else [train, loan]
        return [nodes for nodes in order if nodes]

    # ------------------------------------------------------------------ decision
    def decide(self, view: ClusterView) -> Decision:
        cfg = self.config
        stats: list[SolverStats] = []
        nodes = view.nodes
        self._nodes = nodes
        loan_all = [n for n in sorted(nodes) if nodes[n].pool == "inference"]
        self._train = [n for n in sorted(nodes) if nodes[n].pool != "inference"]
        self._loan = loan_all if cfg.loaning else []
        book = ServerBook(nodes, view.free, loan=loan_all, grouped=cfg.grouped)

        elastic_running: list[ActiveJob] = []
        for job in view.running.values():
            alloc = job.allocation
            if alloc is None or not alloc.placement:
                continue
            if self._elastic(job):
                base, flex = self._split(job)
                book.add(job.id, base, "base")
                book.add(job.id, flex, "flex")
                elastic_running.append(job)
            else:
                book.add(job.id, alloc.placement, "base")

        # ---- phase 1: SJF over inelastic demand, skip what does not fit
        now = view.now
        pending = []
        for job in view.pending.values():
            demand = self._demand(job)
            rate = job.spec.throughput.rate(demand)
            pending.append((job.remaining(now) / rate if rate > 0 else float("inf"),
                            job.spec.submit_time, job.id, job, demand))
        pending.sort(key=lambda t: t[:3])
        admitted: list[ActiveJob] = []
        # (relax, steal): clean groups, then any free GPU, then flexible workers' GPUs
        tries = [(False, False), (True, False)] + ([(True, True)] if cfg.scaling else [])
        for *_, job, demand in pending:
            pools = self._pools(view, job)
            if not pools:
                continue
            d = _worker_size(job, demand)
            placed = None
            for relax, steal in tries:
                for cands in pools:
                    if book.free_count(cands) + (book.soft_count(cands) if steal else 0) < demand:
                        continue
                    placed = book.place(job.id, demand // d, d, cands, "base", relax=relax,
                                        steal=steal)
                    if placed is not None:
                        break
                if placed is not None:
                    break
            if placed is not None:
                admitted.append(job)

        # ---- phase 2: MCKP per pool over the flexible demand
        if cfg.scaling:
            elastic = elastic_running + [j for j in admitted if j.spec.elastic]
            by_pool: dict[bool, list[tuple[ActiveJob, int, Node]]] = {True: [], False: []}
            for job in elastic:
                # the pool of its base workers (all of a job's workers share one GPU type)
                home = next((n for n, held in book.hard.items() if job.id in held),
                            next(iter(book.holdings(job.id))))
                d = _worker_size(job, job.spec.min_gpus)
                by_pool[nodes[home].pool == "inference"].append((job, d, nodes[home]))
            for on_loan, members in by_pool.items():
                if not members:
                    continue
                pool_nodes = loan_all if on_loan else self._train
                capacity = book.free_count(pool_nodes) + book.soft_count(pool_nodes)
                groups, offers = self._groups(view, members)
                result = solve_mckp(groups, capacity, cfg.mckp,
                                    **({} if cfg.mckp in ("dp", "greedy")
                                       else {"time_limit_s": cfg.time_limit_s}))
                if result.stats is not None:
                    stats.append(result.stats.model_copy(
                        update={"stage": f"mckp-{'loan' if on_loan else 'train'}"}))
                targets = {key: (offers[key][idx] if idx >= 0 else 0)
                           for key, idx in result.choice.items()}
                self._place_flexible(book, members, targets, pool_nodes)

        # ---- plan
        placements: dict[str, JobAllocation] = {}
        shares: dict[str, int] = {}
        flex_memory: dict[str, dict[str, tuple[int, ...]]] = {}
        for job in [*view.running.values(), *admitted]:
            held = book.holdings(job.id)
            if not held:
                continue
            alloc = job.allocation
            tup = {n: tuple(g) for n, g in held.items()}
            if alloc is not None and alloc.placement == tup:
                placements[job.id] = alloc
            else:
                placements[job.id] = JobAllocation.fast(job.id, tup)
            shares[job.id] = sum(len(g) for g in tup.values())
            soft = book.soft_gpus(job.id)
            if soft:
                flex_memory[job.id] = {n: tuple(sorted(g)) for n, g in soft.items()}
        self._flex = flex_memory
        return Decision(shares=shares, placements=placements, stats=stats)

    def _groups(self, view: ClusterView, members: list[tuple[ActiveJob, int, Node]]
                ) -> tuple[list[MckpGroup], dict[str, list[int]]]:
        """MCKP groups: per elastic job, one item per allowed size above w_min (whole workers).

        Value = T(w_min) - T(w_min + k) on the pool's GPU type, with T from the job's remaining
        work and throughput profile: Alg. 2's T^max k/(k + w_min) when scaling is linear.
        """
        groups = []
        offers: dict[str, list[int]] = {}
        now = view.now
        for job, d, node in members:
            spec = job.spec
            base = spec.min_gpus
            speed = _speed(view, job, node)
            left = job.remaining(now)
            t_base = left / (spec.throughput.rate(base) * speed)
            items = []
            extras = []
            for count in spec.allowed_counts():
                extra = count - base
                if extra <= 0 or extra % d:
                    continue
                t = left / (spec.throughput.rate(count) * speed)
                items.append((extra, t_base - t))
                extras.append(extra)
            groups.append(MckpGroup(job.id, tuple(items)))
            offers[job.id] = extras
        return groups, offers

    def _place_flexible(self, book: ServerBook, members: list[tuple[ActiveJob, int, Node]],
                        targets: dict[str, int], pool_nodes: list[str]) -> None:
        """Shrink first (release GPUs), then grow, largest workers first."""
        grow = []
        for job, d, _ in members:
            want = targets.get(job.id, 0)
            soft = book.soft_gpus(job.id)
            have = sum(len(g) for g in soft.values())
            if have > want:
                extra = have - want
                for node in sorted(soft, key=lambda n: (len(soft[n]), n)):
                    if extra <= 0:
                        break
                    give = min(extra, len(soft[node]))
                    book.release(job.id, node, give)
                    extra -= give
            elif want > have:
                grow.append((job, d, want - have, list(soft)))
        nodes = self._nodes
        for job, d, need, prefer in sorted(grow, key=lambda t: (-t[1], -t[2], t[0].id)):
            want = job.spec.gpu_type
            cands = [n for n in pool_nodes if want is None or nodes[n].gpu_type == want]
            book.place(job.id, need // d, d, cands, "flex", partial=True, prefer=prefer)
            # a partial placement may end between allowed counts (e.g. powers of two): trim
            allowed = set(job.spec.allowed_counts())
            soft = book.soft_gpus(job.id)
            total = job.spec.min_gpus + sum(len(g) for g in soft.values())
            if total not in allowed:
                extra = total - max(a for a in allowed if a <= total)
                for node in sorted(soft, key=lambda n: (len(soft[n]), n)):
                    if extra <= 0:
                        break
                    give = min(extra, len(soft[node]))
                    book.release(job.id, node, give)
                    extra -= give


def _make(name: str, **kw: object) -> Callable[[], ArylPolicy]:
    return lambda: ArylPolicy(name, ArylConfig(**kw))  # type: ignore[arg-type]


POLICIES: dict[str, tuple[Callable[[], ArylPolicy], str]] = {
    "aryl": (_make("aryl"),
             "Aryl: capacity loaning + elastic scaling (SJF + MCKP DP, grouped BFD, "
             "cost-greedy reclaim)"),
    "aryl-scaling": (_make("aryl-scaling", loaning=False),
                     "Aryl elastic scaling only: two-phase allocation on training servers"),
    "aryl-loaning": (_make("aryl-loaning", scaling=False),
                     "Aryl capacity loaning only: rigid SJF on training + on-loan servers, "
                     "cost-greedy reclaim"),
    "aryl-loaning-scf": (_make("aryl-loaning-scf", scaling=False, reclaim="scf"),
                         "capacity loaning only, Smallest-Count-First reclaim"),
    "aryl-loaning-random": (_make("aryl-loaning-random", scaling=False, reclaim="random"),
                            "capacity loaning only, random reclaim (seed 0)"),
    "aryl-loaning-exact": (_make("aryl-loaning-exact", scaling=False, reclaim="exact"),
                           "capacity loaning only, exact (CP-SAT) reclaim"),
    "aryl-exact": (_make("aryl-exact", reclaim="exact"),
                   "Aryl with the exact (CP-SAT) reclaim instead of the greedy"),
    "aryl-cpsat": (_make("aryl-cpsat", mckp="cp-sat"),
                   "Aryl with phase 2 solved by CP-SAT instead of DP"),
    "aryl-greedy": (_make("aryl-greedy", mckp="greedy"),
                    "Aryl with phase 2 solved by the marginal-gain greedy"),
    "aryl-naive": (_make("aryl-naive", grouped=False, elastic_on_loan=False),
                   "Aryl with naive BFD placement (no server groups; Tab. 6 ablation)"),
    "aryl-sjf": (_make("aryl-sjf", scaling=False, loaning=False),
                 "SJF with skip (Aryl phase 1 alone): no loaning, no scaling"),
}
