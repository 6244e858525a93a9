"""Running one fuzz case and classifying what the command line did with it.

Why a harness of its own: a case must never take the suite down with it. In-process runs (fast:
no interpreter start-up) are guarded by an alarm (a hang costs at most ``HANG_S``) and by a
watchdog thread that stops a case whose memory grows by more than ``MEMORY_GROWTH`` bytes (the
hangs of issue 23 allocate ~50 MB/s until the machine runs out). Both raise :class:`CaseHang`,
a ``BaseException`` so no ``except Exception`` in the product can swallow it and report it as an
internal error. Input that would block or allocate inside C code, where no Python signal
handler runs (``/dev/zero`` read to the end), runs as a real subprocess with an address-space
limit instead (:func:`run_subprocess`).

Classification (:class:`Outcome`): ``clean`` (exit 0, output passes the oracle), ``refused``
(exit 2, one stderr line naming the file or option), ``accepted-nonsense`` (exit 0 with absurd
output), and the failures ``hang``, ``traceback``, ``internal`` (exit 1 or any other status),
``multi-line`` and ``unnamed`` (a refusal that does not name the file at fault).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan import cli

HANG_S = 30
"""A case running longer than this is a hang (a real case here takes well under a second;
generous because the machine this runs on may be busy)."""
MEMORY_GROWTH = 1536 << 20
"""A case whose resident memory grows by more than this is a hang (unbounded allocation)."""
SUBPROCESS_MEMORY = 4 << 30
"""Address-space limit of a subprocess case (its MemoryError is classified as a hang)."""

FAILURES = (
    "hang",
    "traceback",
    "internal",
    "multi-line",
    "unnamed",
    "accepted-nonsense",
    "wrong-outcome",
)
"""Kinds that fail a case (``accepted-nonsense`` only where the oracle or the corpus says so)."""

TALLY: dict[str, Counter[str]] = defaultdict(Counter)
"""input kind -> outcome kind -> cases, printed at the end of the session (conftest.py)."""
FAILED: list[str] = []
"""One line per failing case, for the session summary."""

Oracle = Callable[[str], str | None]
"""stdout of a clean run -> why it is nonsense, or None."""


class CaseHang(BaseException):
    """A case ran too long or grew its memory without bound."""


@dataclass
class Outcome:
    kind: str
    code: int | None
    out: str = ""
    err: str = ""
    why: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self, limit: int = 600) -> str:
        return (
            f"{self.kind} (exit {self.code}): {self.why}\nstderr: {self.err[-limit:]!r}\n"
            f"stdout: {self.out[:limit]!r}"
        )


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


@contextlib.contextmanager
def guard(seconds: int = HANG_S) -> Iterator[dict[str, str]]:
    """Alarm + memory watchdog around one in-process case; yields a dict whose ``why`` says
    which of them fired."""
    state = {"why": ""}
    main = threading.main_thread().ident
    stop = threading.Event()
    base = _rss()

    def fire(_signum: int, _frame: object) -> None:
        why = state["why"] or f"ran longer than {seconds} s"
        state["why"] = why
        raise CaseHang(why)

    def watch() -> None:
        while not stop.wait(0.25):
            grown = _rss() - base
            if grown > MEMORY_GROWTH:
                state["why"] = f"memory grew by {grown >> 20} MiB (unbounded allocation)"
                signal.pthread_kill(main, signal.SIGALRM)  # type: ignore[arg-type]
                return

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield state
    finally:
        signal.alarm(0)
        stop.set()
        watcher.join()
        signal.signal(signal.SIGALRM, previous)


def run_in_process(
    argv: Sequence[str], *, stdin: str | None = None, seconds: int = HANG_S, cwd: Path | None = None
) -> tuple[int | None, str, str, str]:
    """``gpuplan ARGV`` in this process: (exit status or None on a hang, stdout, stderr,
    why it hung). It runs in ``cwd`` (default: a private temporary folder), so a relative or
    empty path a case gives never lands in the repository."""
    if cwd is None:  # a private folder of its own, removed afterwards
        with tempfile.TemporaryDirectory(prefix="gpuplan-fuzz-") as own:
            return run_in_process(argv, stdin=stdin, seconds=seconds, cwd=Path(own))
    out, err = io.StringIO(), io.StringIO()
    code: int | None
    why = ""
    saved_stdin = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8", "surrogatepass")))
    try:
        with (
            contextlib.chdir(cwd),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                with guard(seconds):
                    try:
                        code = cli.main(list(argv))
                    except SystemExit as exit_:  # argparse
                        if isinstance(exit_.code, str):
                            err.write(exit_.code + "\n")
                            code = 1
                        else:
                            code = int(exit_.code or 0)
            except CaseHang as hang:
                code, why = None, str(hang)
            except Exception:  # escaped cli.main: a traceback for the user
                err.write(traceback.format_exc())
                code = 1
    finally:
        sys.stdin = saved_stdin
    return code, out.getvalue(), err.getvalue(), why


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (SUBPROCESS_MEMORY, SUBPROCESS_MEMORY))


def run_subprocess(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    stdin: str | None = None,
    seconds: int = HANG_S * 2,
) -> tuple[int | None, str, str, str]:
    """``python -m gpuplan ARGV`` as a real process with an address-space limit."""
    env = {k: v for k, v in os.environ.items() if k != "GPUPLAN_DEBUG"}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gpuplan", *argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=seconds,
            check=False,
            cwd=cwd,
            env=env,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired as exc:

        def text(b: bytes | str | None) -> str:
            return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")

        return None, text(exc.stdout), text(exc.stderr), f"ran longer than {seconds} s"
    why = "MemoryError: memory grew to the limit" if "MemoryError" in proc.stderr else ""
    return (None if why else proc.returncode), proc.stdout, proc.stderr, why


def classify(
    code: int | None,
    out: str,
    err: str,
    why: str = "",
    *,
    names: Sequence[str] = (),
    oracle: Oracle | None = None,
) -> Outcome:
    """What the command line did. ``names``: substrings one of which a refusal must contain
    (the file's path or name, the option); ``oracle`` judges a clean run's stdout."""
    if code is None:
        return Outcome("hang", code, out, err, why)
    if "Traceback (most recent call last)" in err or "Exception ignored" in err:
        return Outcome("traceback", code, out, err, "a Python traceback reached the user")
    if code == 0:
        bad = oracle(out) if oracle is not None else None
        if bad:
            return Outcome("accepted-nonsense", code, out, err, bad)
        return Outcome("clean", code, out, err)
    if code != 2:
        return Outcome("internal", code, out, err, f"exit status {code}")
    # "\n" only: a refusal echoing a key with \x1e or \u2028 is still one line on a terminal
    lines = [line for line in err.split("\n") if line.strip()]
    if len(lines) != 1:
        return Outcome("multi-line", code, out, err, f"{len(lines)} lines on stderr")
    line = lines[0]
    if "internal error" in line:
        return Outcome("internal", code, out, err, "an internal error with exit 2")
    if names and not any(n and n in line for n in names):
        return Outcome("unnamed", code, out, err, f"the refusal names none of {list(names)}")
    return Outcome("refused", code, out, err)


def record(kind: str, case: str, outcome: Outcome) -> None:
    TALLY[kind][outcome.kind] += 1
    if outcome.kind in FAILURES:
        FAILED.append(f"{kind}: {case}: {outcome.kind}: {outcome.why}"[:300])


def check(kind: str, case: str, outcome: Outcome) -> None:
    """Record the outcome and fail the test on a failing kind."""
    record(kind, case, outcome)
    assert outcome.kind not in FAILURES, f"{case}: {outcome.describe()}"


def fuzz_cli(
    kind: str,
    case: str,
    argv: Sequence[str],
    *,
    names: Sequence[str] = (),
    oracle: Oracle | None = None,
    stdin: str | None = None,
) -> Outcome:
    """Run ``argv`` in-process, classify, record and assert; returns the outcome."""
    outcome = classify(*run_in_process(argv, stdin=stdin), names=names, oracle=oracle)
    check(kind, case, outcome)
    return outcome


# ------------------------------------------------------------------------------ oracles
_MIN_POSITIVE_S = 1e-6
"""A positive time (JCT, queueing, makespan) below a microsecond comes from nonsense scaling."""
_MAX_CE = 1000.0
"""Cluster efficiency is a per-GPU speed-up (1 = linear); a thousand is already absurd."""


def _numbers(doc: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(doc, bool):
        return
    if isinstance(doc, (int, float)):
        yield path, float(doc)
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield from _numbers(v, f"{path}.{k}" if path else str(k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _numbers(v, f"{path}[{i}]")


def summary_oracle(out: str) -> str | None:
    """``simulate/compare --json``: finite, non-negative, utilisation <= 1, no sub-microsecond
    times, no absurd cluster efficiency."""
    try:
        doc = json.loads(out)
    except ValueError as err:
        return f"--json output is not JSON ({err})"
    rows = doc if isinstance(doc, list) else [doc]
    for row in rows:
        for where, x in _numbers(row):
            if not math.isfinite(x):
                return f"{where} = {x}"
            if x < 0:
                return f"{where} = {x} < 0"
        util = row.get("gpu_utilisation")
        if util is not None and util > 1 + 1e-6:
            return f"gpu_utilisation = {util} > 1"
        ce = row.get("mean_cluster_efficiency")
        if ce is not None and ce > _MAX_CE:
            return f"mean_cluster_efficiency = {ce:g} (absurd)"
        for key in ("avg_jct_s", "median_jct_s", "makespan_s", "p99_jct_s"):
            x = row.get(key)
            if x is not None and 0 < x < _MIN_POSITIVE_S:
                return f"{key} = {x:g} s (absurd)"
        loaning = row.get("loaning") or {}
        for key, x in loaning.items():
            if isinstance(x, float) and (
                key.endswith(("_ratio", "usage_overall", "usage_training")) and x > 1 + 1e-6
            ):
                return f"loaning.{key} = {x} > 1"
    return None


def solve_oracle(out: str) -> str | None:
    """``solve --json``: a list of rows with finite objectives of sane magnitude."""
    try:
        rows = json.loads(out)
    except ValueError as err:
        return f"--json output is not JSON ({err})"
    if not isinstance(rows, list):
        return "--json output is not a list"
    for row in rows:
        obj = row.get("objective")
        if obj is not None and (not math.isfinite(obj) or abs(obj) > 1e30):
            return f"{row.get('solver')}: objective {obj:g} (absurd)"
    return None


def plan_oracle(out: str) -> str | None:
    try:
        plan = json.loads(out)
    except ValueError as err:
        return f"plan output is not JSON ({err})"
    for job, alloc in (plan.get("allocations") or {}).items():
        if alloc.get("gpus", 1) > 0 and not alloc.get("placement"):
            return f"allocation of {job} has GPUs and no placement"
    return None


def explore(
    kind: str, strategy: Any, body: Callable[[Any], tuple[str, Outcome]], examples: int
) -> None:
    """Run ``body`` on ``examples`` deterministic draws of ``strategy`` and fail once at the end
    listing every failing case (hypothesis would stop at the first and then shrink it: a hang
    would cost its timeout once per shrink step). ``body`` returns (case label, outcome)."""
    from hypothesis import HealthCheck, Phase, given, settings

    failures: list[str] = []

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(strategy)
    def each(value: Any) -> None:
        case, outcome = body(value)
        record(kind, case, outcome)
        if outcome.kind in FAILURES:
            failures.append(f"{case}: {outcome.describe(300)}")

    each()
    assert not failures, f"{len(failures)} failing {kind} case(s):\n" + "\n\n".join(failures)
