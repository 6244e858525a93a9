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
   :mod:`.mckp`: item "k extra workers" of job j weighs k * D_j GPUs and
   is worth ``T_j(w_min) - T_j(w_min + k)``, which is Alg. 2's ``T^max k / (k + w_min)`` under
   linear scaling and the profiled reduction otherwise. Each pool is its own knapsack because a
   job's workers all run on one GPU type (the Basic scenario), so a job's flexible workers can
   only use its own pool.
3. **Placement** -- :class:`~gpuplan.solver_core.policies.aryl.placement.ServerBook`: inelastic jobs
   prefer training servers, elastic jobs on-loan servers; base and flexible workers are kept on
   separate on-loan server groups. Running jobs never move; a shrinking elastic job gives back
   flexible workers, a growing one fills servers it already uses first.
4. **Heterogeneous training** (App. A; off unless ``ArylConfig.heterogeneous``) -- a job flagged
   ``JobSpec.heterogeneous`` (and not pinned to a GPU type) may span training and loaned GPUs.
   Following §5.3 / §6 (digest §2.4) such jobs are placed *last on the remaining resources*:
   one whose inelastic demand fits no single pool in its SJF turn is retried after every other
   pending job, training GPUs first, the rest on loaned servers; elastic ones keep their base on
   training servers and get their flexible workers by a last MCKP over what both pools have
   left, loaned servers first. A placement that spans GPU types runs at ``hetero_efficiency`` of
   App. A's theoretical throughput (Eq. (1) of :mod:`.hetero`), which
   the policy hands to the engine as the allocation's ``efficiency``.

The policy remembers which GPUs of each elastic job are flexible (``_flex``), because a
:class:`~gpuplan.models.JobAllocation` does not say. Its ``reclaimer`` attribute is the
:class:`~gpuplan.solver_core.policies.aryl.reclaim.Reclaimer` that ``simulate`` hands to the engine
unless the caller passes another one.

Presets declared in ``policies/__init__.py`` (``aryl-scaling``, ``aryl-sjf``, ...) switch the
pieces on and off for the paper's ablations (Tab. 5, 6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from gpuplan.models import ActiveJob, ClusterView, JobAllocation, Node, SolverStats

from ...hooks import Memories
from ...limits import SolveLimits
from ...params import Params
from ...placement.best_fit import best_fit_placement
from ...policy import Decision, Demand, StagedPolicy
from ...registry import PolicyDef
from .hetero import ADVANCED_EFFICIENCY, mixed_efficiency
from .mckp import MckpGroup, solve_mckp
from .placement import Placement, ServerBook
from .reclaim import Reclaimer

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
    * ``heterogeneous``: jobs flagged ``JobSpec.heterogeneous`` may span GPU types (App. A);
      ``hetero_efficiency``: their throughput on mixed types as a fraction of App. A's
      theoretical one (0.7 = the paper's Advanced scenario, 1.0 = Ideal).
    """

    scaling: bool = True
    loaning: bool = True
    mckp: str = "dp"
    grouped: bool = True
    elastic_on_loan: bool = True
    reclaim: str = "aryl"
    seed: int = 0
    work_limit_s: float = 1.0
    """Deterministic budget of every exact solve (MCKP, reclaim), in CP-SAT deterministic
    seconds; node limits on MIP backends (``solver_core/limits.py``)."""
    heterogeneous: bool = False
    hetero_efficiency: float = ADVANCED_EFFICIENCY

    def __post_init__(self) -> None:
        if not 0 < self.hetero_efficiency <= 1:
            raise ValueError(f"hetero_efficiency must be in (0, 1], got {self.hetero_efficiency!r}")


def _speed(view: ClusterView, job: ActiveJob, node: Node) -> float:
    """Throughput multiplier of ``job`` on ``node``'s GPU type (T4 = 1/4 of a V100 by default)."""
    cluster = view.cluster
    profile = job.spec.throughput
    return profile.type_multiplier(
        node.gpu_type,
        cluster.gpu_type(node.gpu_type).relative_speed,
        cluster.gpu_type(profile.reference_gpu).relative_speed,
    )


def _gpu_speeds(
    view: ClusterView, job: ActiveJob, placement: dict[str, tuple[int, ...]]
) -> list[float]:
    """One throughput multiplier per GPU of ``placement``."""
    return [
        m for n, gpus in placement.items() for m in [_speed(view, job, view.nodes[n])] * len(gpus)
    ]


def _worker_size(job: ActiveJob, gpus: int) -> int:
    """GPUs per worker; 1 when the count is not a whole number of the job's workers."""
    d = job.spec.gpus_per_worker
    return d if gpus % d == 0 else 1


def _move_gpus(
    src: dict[str, list[int]],
    dst: dict[str, list[int]],
    count: int,
    pick: Callable[..., str],
) -> int:
    """Move up to ``count`` GPUs of one server from ``src`` to ``dst`` (both node -> GPU
    indices) and say how many moved; ``pick`` (``max`` or ``min``) chooses the server by how
    many GPUs it has in ``src``, ties by name. :meth:`ArylPolicy._split` promotes flexible GPUs from
    the server with the most and demotes base GPUs from the one with the fewest."""
    node = pick(src, key=lambda n: (len(src[n]), n))
    move = src[node][:count]
    src[node] = src[node][len(move) :]
    if not src[node]:
        del src[node]
    dst.setdefault(node, []).extend(move)
    return len(move)


def _single_node(job: ActiveJob) -> bool:
    """The job's GPUs must all be on one server (``node_shape.max_nodes == 1``): Aryl places
    its base workers on one server and its flexible workers only beside them, instead of
    leaving the shape guard to drop a split placement (which starved such jobs)."""
    shape = job.spec.node_shape
    return shape is not None and shape.max_nodes == 1


class ArylPolicy(Memories):
    """Aryl's job scheduler (see module docstring). It is the policy's memory, and its
    reclaimer's (the random method's generator) is one of its parts."""

    def __init__(self, name: str = "aryl", config: ArylConfig | None = None) -> None:
        self.name = name
        self.config = config or ArylConfig()
        self.reclaimer = Reclaimer(
            self.config.reclaim,
            seed=self.config.seed,
            limits=SolveLimits.deterministic_budget(self.config.work_limit_s),
        )
        self._flex: dict[str, dict[str, tuple[int, ...]]] = {}
        self.reclaimer.flexible_source = lambda: self._flex
        # per-decision node lists (set at the start of every decide)
        self._nodes: dict[str, Node] = {}
        self._train: list[str] = []
        self._loan: list[str] = []

    def allocate(self, view: ClusterView, stats: list[SolverStats]) -> dict[str, Demand]:
        """Aryl as an allocation stage: its joint decision as pre-placed demands, so the
        policy runs through :class:`~..policy.StagedPolicy` like every other (and keeps every
        wrapper: one that changes a count drops the placement and lets the placement stage
        place it)."""
        decision = self.decide(view)
        stats.extend(decision.stats)
        return {
            j: Demand(gpus=a.gpus, share=a.share, placement=a)
            for j, a in decision.placements.items()
        }

    def staged(self) -> StagedPolicy:
        """The registered form: allocation = :meth:`allocate`, Aryl's reclaim choice, and this
        object as the policy's memory (which of each elastic job's GPUs are flexible)."""
        return StagedPolicy(
            self.name, self.allocate, best_fit_placement, reclaimer=self.reclaimer, memory=self
        )

    @property
    def parts(self) -> tuple[Reclaimer]:
        return (self.reclaimer,)

    def snapshot(self) -> dict[str, Any]:
        """Each elastic job's flexible GPUs (node -> indices): reclaim releases those first;
        and the reclaimer's memory when it keeps one (random reclaim's generator)."""
        state: dict[str, Any] = {
            "flexible": {
                j: {n: list(g) for n, g in nodes.items()} for j, nodes in self._flex.items()
            }
        }
        if reclaimer := self.reclaimer.snapshot():
            state["reclaimer"] = reclaimer
        return state

    def restore(self, state: dict[str, Any]) -> None:
        self.reclaimer.restore(state.get("reclaimer", {}))
        self._flex = {
            str(j): {str(n): tuple(int(x) for x in g) for n, g in nodes.items()}
            for j, nodes in state.get("flexible", {}).items()
        }

    # ------------------------------------------------------------------ helpers
    def _elastic(self, job: ActiveJob) -> bool:
        return self.config.scaling and job.spec.elastic

    def _hetero(self, job: ActiveJob) -> bool:
        """May this job's workers span GPU types right now? (flag on, type not pinned)."""
        spec = job.spec
        return self.config.heterogeneous and spec.heterogeneous and spec.gpu_type is None

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
            have += _move_gpus(flex, base, want - have, max)
        while have > want:
            have -= _move_gpus(base, flex, have - want, min)
        return base, flex

    def _pools(self, view: ClusterView, job: ActiveJob) -> list[list[str]]:
        """Candidate node lists in preference order (training / on-loan), type-filtered."""
        want = job.spec.gpu_type
        train = [n for n in self._train if want is None or view.nodes[n].gpu_type == want]
        loan = [n for n in self._loan if want is None or view.nodes[n].gpu_type == want]
        # a heterogeneous elastic job keeps its base on training servers (digest §2.4)
        first_loan = self._elastic(job) and self.config.elastic_on_loan and not self._hetero(job)
        order = [loan, train] if first_loan else [train, loan]
        return [nodes for nodes in order if nodes]

    # ------------------------------------------------------------------ decision
    def decide(self, view: ClusterView) -> Decision:  # noqa: C901 (a named exception to the complexity gate)
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
            pending.append(
                (
                    job.remaining(now) / rate if rate > 0 else float("inf"),
                    job.spec.submit_time,
                    job.id,
                    job,
                    demand,
                )
            )
        pending.sort(key=lambda t: t[:3])
        admitted: list[ActiveJob] = []
        deferred: list[tuple[ActiveJob, int]] = []
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
                    placed = book.place(
                        job.id,
                        demand // d,
                        d,
                        cands,
                        "base",
                        relax=relax,
                        steal=steal,
                        one_node=_single_node(job),
                    )
                    if placed is not None:
                        break
                if placed is not None:
                    break
            if placed is not None:
                admitted.append(job)
            elif self._hetero(job) and len(pools) > 1:
                deferred.append((job, demand))
        # heterogeneous jobs that fit no single pool: last, on what both pools have left
        for job, demand in deferred:
            for relax, steal in tries:
                if self._place_mixed(book, job, demand, relax, steal) is not None:
                    admitted.append(job)
                    break

        # ---- phase 2: MCKP per pool over the flexible demand
        if cfg.scaling:
            elastic = elastic_running + [j for j in admitted if j.spec.elastic]
            by_pool: dict[str, list[tuple[ActiveJob, int, Node]]] = {
                "loan": [],
                "train": [],
                "mixed": [],
            }
            for job in elastic:
                # the pool of its base workers (a job's workers share one GPU type unless it
                # is heterogeneous: those get the last, two-pool knapsack)
                home = next(
                    (n for n, held in book.hard.items() if job.id in held),
                    next(iter(book.holdings(job.id))),
                )
                d = _worker_size(job, job.spec.min_gpus)
                pool = (
                    "mixed"
                    if self._hetero(job)
                    else "loan"
                    if nodes[home].pool == "inference"
                    else "train"
                )
                by_pool[pool].append((job, d, nodes[home]))
            # heterogeneous jobs last, on what both pools have left (digest §2.4)
            for pool, members in by_pool.items():
                if not members:
                    continue
                pool_nodes = {
                    "train": self._train,
                    "loan": loan_all,
                    "mixed": self._train + self._loan,
                }[pool]
                mine = {job.id for job, _, _ in members}
                capacity = book.free_count(pool_nodes) + sum(
                    len(g) for n in pool_nodes for j, g in book.soft[n].items() if j in mine
                )
                if pool == "mixed":
                    groups, offers = self._groups(view, members, book)
                    order = [self._loan, self._train]  # flexible workers: loaned servers first
                else:
                    groups, offers = self._groups(view, members)
                    order = [pool_nodes]
                result = solve_mckp(
                    groups,
                    capacity,
                    cfg.mckp,
                    **(
                        {}
                        if cfg.mckp in ("dp", "greedy")
                        else {"limits": SolveLimits.deterministic_budget(cfg.work_limit_s)}
                    ),
                )
                if result.stats is not None:
                    stats.append(result.stats.model_copy(update={"stage": f"mckp-{pool}"}))
                targets = {
                    key: (offers[key][idx] if idx >= 0 else 0) for key, idx in result.choice.items()
                }
                self._place_flexible(book, members, targets, order)

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
                placements[job.id] = alloc  # same GPUs: no action, so the efficiency cannot change
            else:
                efficiency = self._efficiency(view, job, tup)
                placements[job.id] = JobAllocation.fast(job.id, tup, efficiency=efficiency)
            shares[job.id] = sum(len(g) for g in tup.values())
            soft = book.soft_gpus(job.id)
            if soft:
                flex_memory[job.id] = {n: tuple(sorted(g)) for n, g in soft.items()}
        self._flex = flex_memory
        return Decision(shares=shares, placements=placements, stats=stats)

    def _place_mixed(
        self, book: ServerBook, job: ActiveJob, demand: int, relax: bool, steal: bool
    ) -> Placement | None:
        """Inelastic demand of a heterogeneous job over both pools, all or nothing: as many
        workers as fit on training servers, the rest on loaned servers (base group)."""
        d = _worker_size(job, demand)
        workers = demand // d
        train, loan = self._train, self._loan
        if not train or not loan:
            return None

        on_train = min(workers, book.worker_slots(train, d, relax=relax, steal=steal))
        if on_train + book.worker_slots(loan, d, relax=relax, steal=steal) < workers:
            return None
        placed = book.place(job.id, on_train, d, train, "base", relax=relax, steal=steal) or {}
        rest = workers - sum(len(g) for g in placed.values()) // d
        more = book.place(job.id, rest, d, loan, "base", relax=relax, steal=steal)
        if more is None:  # cannot happen: the slot count above is what ``place`` packs
            raise RuntimeError(f"mixed placement of {job.id} failed after the room check")
        return {**placed, **more}

    def _efficiency(
        self, view: ClusterView, job: ActiveJob, placement: dict[str, tuple[int, ...]]
    ) -> float:
        """1.0, or for a heterogeneous job whose GPUs span types the efficiency that makes the
        engine run it at ``hetero_efficiency`` x App. A's theoretical throughput."""
        if len({view.nodes[n].gpu_type for n in placement}) <= 1 or not self._hetero(job):
            return 1.0
        return mixed_efficiency(_gpu_speeds(view, job, placement), self.config.hetero_efficiency)

    def _groups(
        self,
        view: ClusterView,
        members: list[tuple[ActiveJob, int, Node]],
        book: ServerBook | None = None,
    ) -> tuple[list[MckpGroup], dict[str, list[int]]]:
        """MCKP groups: per elastic job, one item per allowed size above w_min (whole workers).

        Value = T(w_min) - T(w_min + k) on the pool's GPU type, with T from the job's remaining
        work and throughput profile: Alg. 2's T^max k/(k + w_min) when scaling is linear.

        With ``book`` the members are heterogeneous jobs (the "mixed" pool): T runs at
        ``hetero_efficiency`` whenever the job would span GPU types (:meth:`_mixing`), and items
        that do not pay are left out.
        """
        eff = self.config.hetero_efficiency
        loan = set(self._loan)
        groups = []
        offers: dict[str, list[int]] = {}
        now = view.now
        for job, d, home in members:
            spec = job.spec
            base = spec.min_gpus
            speed = _speed(view, job, home)
            left = job.remaining(now)
            base_mixed, extra_mixed = (
                (False, None) if book is None else self._mixing(view, book, job, loan)
            )
            t_base = left / (spec.throughput.rate(base) * speed * (eff if base_mixed else 1.0))
            items = []
            extras = []
            for count in spec.allowed_counts():
                extra = count - base
                if extra <= 0 or extra % d:
                    continue
                mixed = extra_mixed is not None and extra_mixed(extra, d)
                t = left / (spec.throughput.rate(count) * speed * (eff if mixed else 1.0))
                if book is not None and t_base - t <= 0:
                    continue
                items.append((extra, t_base - t))
                extras.append(extra)
            groups.append(MckpGroup(job.id, tuple(items)))
            offers[job.id] = extras
        return groups, offers

    def _mixing(
        self, view: ClusterView, book: ServerBook, job: ActiveJob, loan: set[str]
    ) -> tuple[bool, Callable[[int, int], bool]]:
        """Whether a heterogeneous job's base already spans GPU types, and a rule telling
        whether ``extra`` flexible GPUs (workers of ``d``) would make it span them.

        Flexible workers go to loaned servers first, so a job with its base on training servers
        becomes mixed as soon as loaned room is left for one of its workers (and stays
        homogeneous when there is none); one based on loaned servers becomes mixed when its k
        extra GPUs exceed that room. Items that do not pay (mixing can cost more than k workers
        add: 8 -> 0.7 x 10) are left out. The allocation's efficiency is then computed from where
        the workers really land."""
        nodes = view.nodes
        base_nodes = [n for n, held in book.hard.items() if job.id in held]
        base_mixed = len({nodes[n].gpu_type for n in base_nodes}) > 1
        base_on_loan = all(n in loan for n in base_nodes)
        room = book.free_count(loan) + sum(
            len(g) for n, g in book.soft_gpus(job.id).items() if n in loan
        )

        def extra_mixed(extra: int, d: int) -> bool:
            return base_mixed or (extra > room if base_on_loan else room >= d)

        return base_mixed, extra_mixed

    def _place_flexible(
        self,
        book: ServerBook,
        members: list[tuple[ActiveJob, int, Node]],
        targets: dict[str, int],
        order: list[list[str]],
    ) -> None:
        """Shrink first (release GPUs), then grow, largest workers first, filling the node
        lists of ``order`` one after the other (one pool; loaned then training servers for
        heterogeneous jobs)."""
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
            workers = need // d
            for pool_nodes in order:
                if workers <= 0:
                    break
                cands = [n for n in pool_nodes if want is None or nodes[n].gpu_type == want]
                if _single_node(job):  # flexible workers only beside its base ones
                    base = book.holdings(job.id)
                    cands = [n for n in cands if n in base]
                got = book.place(job.id, workers, d, cands, "flex", partial=True, prefer=prefer)
                workers -= sum(len(g) for g in (got or {}).values()) // d
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


class ArylParams(Params):
    scaling: bool = Field(True, description="phase 2: elastic jobs get flexible workers")
    loaning: bool = Field(True, description="use on-loan inference servers")
    mckp: Literal["dp", "greedy", "cp-sat", "scip", "highs", "cbc", "pulp-cbc"] = Field(
        "dp", description="phase-2 multiple-choice knapsack solver"
    )
    grouped: bool = Field(True, description="separate base / flexible on-loan server groups")
    elastic_on_loan: bool = Field(True, description="elastic jobs prefer on-loan servers")
    reclaim: Literal["aryl", "exact", "scf", "random"] = Field(
        "aryl", description="which on-loan servers to give back"
    )
    work_limit_s: float = Field(
        1.0, gt=0, le=3600, description="deterministic budget of every exact solve"
    )
    heterogeneous: bool = Field(False, description="flagged jobs may span GPU types (App. A)")
    hetero_efficiency: float = Field(
        ADVANCED_EFFICIENCY, gt=0, le=1, description="mixed-type throughput vs App. A's theory"
    )


def _build(name: str) -> Callable[[ArylParams, int], StagedPolicy]:
    def build(p: ArylParams, seed: int) -> StagedPolicy:
        return ArylPolicy(name, ArylConfig(**p.model_dump(), seed=seed)).staged()

    return build


POLICIES = [PolicyDef("aryl", _build("aryl"), ArylParams)]
"""Aryl's presets (``aryl-scaling``, ``aryl-sjf``, ...) are declared in ``__init__.py``."""
