"""The job-level OJPP model of digest §2.6, stated once on the project's MIP layer.

Workers of a job are identical, so the model counts them: ``n[i][k]`` workers of job i on
device k, ``y[i][k]`` job i present on k, ``x[k]`` device k used; at most ``K`` devices (the
heuristic's count, a tighter bound than one GPU per worker). Constraints:

* (10) ``sum_k n[i][k] = omega_i``; links ``y <= n <= omega*y``, ``y <= x`` (the link the
  paper omits); symmetry breaking ``x[k] >= x[k+1]`` and the first job's first worker on device 0;
  first-appearance bounds: under a job order (the exact solver puts the jobs of a clique of
  mutually exclusive workers first), job i's workers only use devices below the total
  workers of the jobs up to i, and a clique job only devices after those the clique jobs
  before it need (``_first_appearance``); caps and pair exclusions
  (``_pair_exclusions``) as valid strengthening;
* (11) compute ``sum_i alpha_i n[i][k] <= 1``;
* (12) memory: for every job i, ``sum_q gamma_q n[q][k] + delta_i y[i][k] <= 1`` (the largest
  delta is that of some present job, so this is Eq. (3) without a max variable);
* (14) collision, **outer approximation in log space** (encoding A): with
  ``l_i = ln(1 - p_i)`` and ``r_i = p_i / (1 - p_i)``, tau <= tau_max iff
  ``L + ln(1 + R) >= ln(1 - tau_max)`` (``L = sum l_i n``, ``R = sum r_i n``); ``ln(1 + R)``
  is concave, so each tangent at a point rho gives a *valid relaxation*
  ``sum_i (l_i + r_i/(1+rho)) n[i][k] >= ln(1-tau_max) - ln(1+rho) + rho/(1+rho)``.
  :mod:`.exact` checks every device of a solution with Eq. (4) and adds the tangent at the
  device's own R when it collides (that tangent cuts the point off), or a no-good cut on the
  device's count vector (valid because every device rule is monotone in added workers) when a
  job with p = 1 is involved or rounding let another device rule slip; so the final answer
  meets Eq. (4) exactly;
* (15)/(16) slowdown ``E[i][k]`` of job i's workers on k, bounded by theta_max and squeezed
  into ``[m_i, M_i]`` with ``M_i - m_i <= theta_balance`` where present (big-M);
  additive: ``E = sum_q I[i][q] n[q][k] - I[i][i]``; max: a selection of the largest term
  (``I[i][q] y[q][k]`` for q != i, ``I[i][i] w[i][k]`` with ``w = [n >= 2]``).
  Multiplicative composition is not linear; the exact solvers refuse it.

``integral=True`` (CP-SAT) scales every coefficient by ``SCALE`` and rounds it to the nearest
integer: exact for data on a 1e-6 grid; off the grid the lazy checks still reject any device
that breaks a rule, but a boundary case within 1e-6 may be refused (documented).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuplan.models.ojpp import OJPP_TOL, Collision, OjppInstance, counts_slowdown

from ...mip_model import LinExpr, MipModel, Var, lin_sum

__all__ = ["SCALE", "OjppModel", "build_model", "device_violation"]

SCALE = 1_000_000
INITIAL_TANGENTS = (0.05, 0.15, 0.3, 0.6, 1.0)


def device_violation(
    inst: OjppInstance, matrix: list[list[float]], counts: dict[int, int]
) -> str | None:
    """Which device rule a GPU holding ``counts[i]`` workers of each job i breaks: "local"
    (compute, memory, slowdown), "collision", or None. Exact float arithmetic."""
    jobs = inst.jobs
    alpha = math.fsum(jobs[i].alpha * c for i, c in counts.items())
    memory = math.fsum(jobs[i].gamma * c for i, c in counts.items()) + max(
        jobs[i].delta for i in counts
    )
    theta = max(counts_slowdown(i, counts, matrix, inst.composition) for i in counts)
    if alpha > 1 + OJPP_TOL or memory > 1 + OJPP_TOL or theta > inst.theta_max + OJPP_TOL:
        return "local"
    coll = Collision()
    for i, c in counts.items():
        coll = coll.add(jobs[i].p, c)
    return "collision" if coll.tau > inst.tau_max + OJPP_TOL else None


@dataclass
class OjppModel:
    """The model and its variables, plus what the lazy loop needs to add cuts."""

    inst: OjppInstance
    model: MipModel
    integral: bool
    devices: int
    n: list[list[Var]]
    y: list[list[Var]]
    x: list[Var]
    matrix: list[list[float]] = field(default_factory=list)
    cuts: int = 0
    tangents: set[float] = field(default_factory=set)

    # ------------------------------------------------------------------ coefficients
    def coef(self, value: float) -> float:
        return float(round(value * SCALE)) if self.integral else value

    def upper(self, value: float) -> float:
        """Right-hand side of a ``<=`` row: scaled, or with the README's tolerance."""
        return float(round(value * SCALE)) if self.integral else value + OJPP_TOL

    # ------------------------------------------------------------------ collision
    def tangent(self, rho: float) -> None:
        """Add the collision tangent at ``rho`` on every device (a valid relaxation)."""
        inst = self.inst
        if inst.tau_max >= 1.0 or rho in self.tangents:
            return
        self.tangents.add(rho)
        rhs = math.log1p(-inst.tau_max) - math.log1p(rho) + rho / (1.0 + rho)
        for k in range(self.devices):
            terms: list[LinExpr] = []
            for i, job in enumerate(inst.jobs):
                if job.p >= 1.0 or job.p <= 0.0:
                    continue  # p = 1: left to no-good cuts; p = 0: coefficient 0
                c = math.log1p(-job.p) + job.p / (1.0 - job.p) / (1.0 + rho)
                cc = math.ceil(c * SCALE) if self.integral else c
                if cc:
                    terms.append(cc * self.n[i][k])
            if not terms:
                continue
            low = math.floor(rhs * SCALE) if self.integral else rhs - OJPP_TOL
            self.model.add(lin_sum(terms) >= low, f"tau_{k}_{len(self.tangents)}")
            self.cuts += 1

    def no_good(self, counts: dict[int, int]) -> None:
        """Forbid, on every device, at least ``counts[i]`` workers of each job i at once."""
        self.cuts += 1
        for k in range(self.devices):
            picks = []
            for i, c in counts.items():
                b = self.model.bool_var(f"ng_{self.cuts}_{i}_{k}")
                # b = 1 -> n[i][k] <= c - 1
                self.model.add(self.n[i][k] <= c - 1 + self.inst.jobs[i].workers * (1 - b))
                picks.append(b)
            self.model.add(lin_sum(picks) >= 1, f"nogood_{self.cuts}_{k}")


def build_model(
    inst: OjppInstance,
    devices: int,
    integral: bool,
    lower_bound: int,
    hint: list[list[int]] | None = None,
    order: list[int] | None = None,
    clique_jobs: int = 0,
) -> OjppModel:
    """The model for at most ``devices`` devices (see the module docstring); ``order`` (a
    permutation of the jobs, default by index) is the first-appearance order of the symmetry
    breaking, and its first ``clique_jobs`` jobs pairwise cannot share a device."""
    if inst.composition == "multiplicative":
        raise ValueError("multiplicative composition is not linear; use a heuristic")
    m = MipModel("ojpp")
    jobs = inst.jobs
    K = devices
    order = list(range(len(jobs))) if order is None else order
    low, reach = _first_appearance(inst, order, clique_jobs)
    n = [
        [m.int_var(0, job.workers if low[i] <= k < reach[i] else 0, f"n_{i}_{k}") for k in range(K)]
        for i, job in enumerate(jobs)
    ]
    y = [[m.bool_var(f"y_{i}_{k}") for k in range(K)] for i in range(len(jobs))]
    x = [m.bool_var(f"x_{k}") for k in range(K)]
    om = OjppModel(inst, m, integral, K, n, y, x, inst.matrix())
    one = om.upper(1.0)
    for i, job in enumerate(jobs):
        m.add(lin_sum(n[i]) == job.workers, f"all_{i}")
        for k in range(K):
            m.add(n[i][k] >= y[i][k])
            m.add(n[i][k] <= job.workers * y[i][k])
            m.add(y[i][k] <= x[k])
    for k in range(K - 1):
        m.add(x[k] >= x[k + 1], f"sym_{k}")
    if jobs:
        m.add(n[order[0]][0] >= 1, "sym_first")
    m.add(lin_sum(x) >= lower_bound, "lower_bound")
    _pair_exclusions(inst, m, n, y)
    for k in range(K):
        m.add(
            lin_sum(om.coef(job.alpha) * n[i][k] for i, job in enumerate(jobs)) <= one,
            f"compute_{k}",
        )
        base = lin_sum(om.coef(job.gamma) * n[i][k] for i, job in enumerate(jobs))
        for i, job in enumerate(jobs):
            if job.delta > 0:
                m.add(base + om.coef(job.delta) * y[i][k] <= one, f"memory_{k}_{i}")
        if not any(job.delta > 0 for job in jobs):
            m.add(base <= one, f"memory_{k}")
    for rho in INITIAL_TANGENTS:
        om.tangent(rho)
    _interference(om)
    if hint is not None:  # devices relabelled by first appearance, matching the bounds above
        labels: list[int] = []
        for i in order:
            labels.extend(k for k in range(K) if hint[i][k] and k not in labels)
        labels.extend(k for k in range(K) if k not in labels)
        hint = [[row[k] for k in labels] for row in hint]
        for k in range(K):
            m.hint(x[k], 1 if any(hint[i][k] for i in range(len(jobs))) else 0)
            for i in range(len(jobs)):
                m.hint(n[i][k], hint[i][k])
                m.hint(y[i][k], 1 if hint[i][k] else 0)
    m.minimize(lin_sum(x))
    return om


def _first_appearance(
    inst: OjppInstance, order: list[int], clique_jobs: int
) -> tuple[list[int], list[int]]:
    """Per job, the devices ``[low, reach)`` its workers may use. Label the devices of any
    solution in the order the jobs of ``order`` first touch them: the jobs up to and
    including job i use at most their workers' total of devices, so job i stays below that
    total (``reach``). The first ``clique_jobs`` jobs share no device with each other, so
    each one's devices are all new and come after the devices of the clique jobs before it:
    at least one each, or all its workers when two of them cannot share (``low``). Valid with
    ``x[k] >= x[k+1]`` (the used labels are a prefix) and with ``sym_first``."""
    low = [0] * len(inst.jobs)
    reach = [0] * len(inst.jobs)
    total = used = 0
    matrix = inst.matrix()
    for t, i in enumerate(order):
        total += inst.jobs[i].workers
        reach[i] = total
        if t < clique_jobs:
            low[i] = used
            alone = inst.jobs[i].workers >= 2 and device_violation(inst, matrix, {i: 2})
            used += inst.jobs[i].workers if alone else 1
    return low, reach


def _pair_exclusions(
    inst: OjppInstance, m: MipModel, n: list[list[Var]], y: list[list[Var]]
) -> None:
    """Valid strengthening (every device rule is monotone in added workers): a job's count on
    a device is capped by what fits of it alone, and two jobs whose single workers cannot
    share a device never meet. Far tighter than the big-M rows alone."""
    matrix = inst.matrix()
    jobs = inst.jobs
    K = len(n[0]) if n else 0
    for i, job in enumerate(jobs):
        cap = 0
        while cap < job.workers and device_violation(inst, matrix, {i: cap + 1}) is None:
            cap += 1
        if cap < job.workers:
            for k in range(K):
                m.add(n[i][k] <= cap * y[i][k], f"cap_{i}_{k}")
        for q in range(i + 1, len(jobs)):
            if device_violation(inst, matrix, {i: 1, q: 1}) is not None:
                for k in range(K):
                    m.add(y[i][k] + y[q][k] <= 1, f"pair_{i}_{q}_{k}")


def _interference(om: OjppModel) -> None:
    """(15) and (16): slowdown bound and balance, additive or max composition."""
    inst, m, n, y, K = om.inst, om.model, om.n, om.y, om.devices
    jobs = inst.jobs
    matrix = inst.matrix()
    c = [[om.coef(v) for v in row] for row in matrix]
    if inst.composition == "additive":
        big = max(
            (sum(c[i][q] * jobs[q].workers for q in range(len(jobs))) for i in range(len(jobs))),
            default=0.0,
        )
    else:
        big = max((max(row) for row in c), default=0.0)
    theta = om.upper(inst.theta_max)
    spread = om.upper(inst.theta_balance)
    bound = big + theta + 1.0
    for i, job in enumerate(jobs):
        balance = job.workers >= 2
        if balance:
            if om.integral:
                hi, lo = m.int_var(0, bound, f"M_{i}"), m.int_var(0, bound, f"m_{i}")
            else:
                hi, lo = m.num_var(0, bound, f"M_{i}"), m.num_var(0, bound, f"m_{i}")
            m.add(hi - lo <= spread, f"balance_{i}")
        for k in range(K):
            e: LinExpr | Var
            if inst.composition == "additive":
                e = lin_sum(c[i][q] * n[q][k] for q in range(len(jobs))) - c[i][i]
                slack = big + c[i][i]
            else:
                e = _max_term(om, c, i, k, big)
                slack = big
            gate = (1 - y[i][k]) * (slack + bound)
            m.add(e <= theta + gate, f"theta_{i}_{k}")
            if balance:
                m.add(e <= hi + gate)
                m.add(e >= lo - gate)


def _max_term(om: OjppModel, c: list[list[float]], i: int, k: int, big: float) -> Var:
    """E = the largest of ``c[i][q] y[q][k]`` (q != i), ``c[i][i] w`` (w: two or more of
    job i's workers on k) and 0, through a selection of one term."""
    m, n, y, jobs = om.model, om.n, om.y, om.inst.jobs
    w = m.bool_var(f"w_{i}_{k}")
    m.add(2 * w <= n[i][k])
    m.add(n[i][k] - 1 <= max(jobs[i].workers - 1, 0) * w)
    terms: list[LinExpr] = [c[i][q] * y[q][k] for q in range(len(jobs)) if q != i]
    terms.append(c[i][i] * w)
    e = m.int_var(0, big, f"E_{i}_{k}") if om.integral else m.num_var(0, big, f"E_{i}_{k}")
    picks = []
    for t, term in enumerate(terms):
        m.add(e >= term)
        s = m.bool_var(f"s_{i}_{k}_{t}")
        m.add(e <= term + big * (1 - s))
        picks.append(s)
    zero = m.bool_var(f"s0_{i}_{k}")
    m.add(e <= big * (1 - zero))
    picks.append(zero)
    m.add(lin_sum(picks) == 1)
    return e
