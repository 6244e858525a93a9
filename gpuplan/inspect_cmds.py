"""``gpuplan status`` and ``gpuplan explain``: what the scheduler decided and why.

Why one module: both read the same two sources and format reasons
(:mod:`gpuplan.models.reasons`) for people, in 80 columns:

* a running Slurm controller's journal (``--journal PATH``), opened read-only through
  SQLite's ``mode=ro`` URI (WAL gives a consistent snapshot while the controller writes; a
  reader never migrates nor locks). The journal tells who waits and why, so it is refused in
  one line (exit 2) unless it is a regular file, not a symlink, owned by the user running the
  command and writable by nobody else: a file another user planted there could feed an
  operator forged reasons and terminal escapes;
* a simulation's ``--out`` folder (``--run DIR``): its ``decisions.jsonl``, one
  :class:`~gpuplan.models.reasons.DecisionRecord` a line, which :func:`decisions_file` writes.

Every text from a journal or a record is printed without markup and with control characters
replaced (job ids come from users).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from gpuplan.executors.control import cycle_times
from gpuplan.executors.control.failopen import heartbeat_age
from gpuplan.executors.control.journal import Journal, JournalError
from gpuplan.models import InputError
from gpuplan.models.reasons import DecisionRecord, Reason

DECISIONS = "decisions.jsonl"
WIDTH = 80


def clean(text: object, limit: int = 200) -> str:
    """One printable line: control characters (terminal escapes) replaced, cut at ``limit``."""
    out = re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", str(text))
    return out if len(out) <= limit else out[: limit - 3] + "..."


def wrap(head: str, text: str, indent: int) -> list[str]:
    """``head`` then ``text`` wrapped to :data:`WIDTH` columns, continued at ``indent``."""
    words, lines, line = clean(text, 1000).split(), [], head
    for w in words:
        if len(line) + 1 + len(w) > WIDTH and line.strip():
            lines.append(line)
            line = " " * indent + w
        else:
            line = f"{line} {w}" if line and not line.endswith(" ") else line + w
    lines.append(line)
    return lines


# ---------------------------------------------------------------------------- simulation
@contextmanager
def decisions_file(out: Path) -> Iterator[Callable[[DecisionRecord], None]]:
    """A sink writing ``out/decisions.jsonl``: into a private temporary file created
    exclusively in ``out``, renamed into place when the run ends (a planted link at the name
    is replaced, never written through); removed if the run fails."""
    fd, tmp = tempfile.mkstemp(prefix=".gpuplan-", suffix=".jsonl", dir=out)
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)  # as the run's other outputs (mkstemp makes it 0600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:

            def sink(record: DecisionRecord) -> None:
                fh.write(record.model_dump_json())
                fh.write("\n")

            yield sink
        os.replace(tmp, out / DECISIONS)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def read_decisions(folder: str) -> Iterator[tuple[int, DecisionRecord]]:
    """``folder/decisions.jsonl``'s records with their line numbers; a bad line is an
    :class:`InputError` naming the file and the row."""
    path = Path(folder) / DECISIONS
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise InputError(
            "no decisions.jsonl: run `gpuplan simulate --out DIR` first", source=str(path)
        ) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", source=str(path)) from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError("not a regular file (a symlink?)", source=str(path))
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as fh:
        for row, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield row, DecisionRecord.model_validate_json(line)
            except ValueError as err:
                first = str(err).splitlines()
                raise InputError(
                    f"not a decision record ({first[1] if len(first) > 1 else err})",
                    source=str(path),
                    row=row,
                ) from None


def explain_run(folder: str, job: str) -> list[str]:
    """The lines of ``explain JOB --run DIR``: every decision that touched the job, with its
    reason, and each change of its waiting reason."""
    lines: list[str] = []
    seen = False
    last_wait = ""
    for _, rec in read_decisions(folder):
        for a in rec.actions:
            if a.job_id != job:
                continue
            seen = True
            mark = "" if a.carried else " skipped"
            lines += wrap(
                f"t={rec.time:>10.1f}  [{a.gpus_before}->{a.gpus_after} GPUs{mark}] ",
                a.reason.text,
                14,
            )
            lines += _terms(a.reason, 14)
        wait = rec.pending.get(job)
        if wait is not None and wait.text != last_wait:
            seen = True
            last_wait = wait.text
            lines += wrap(f"t={rec.time:>10.1f}  waiting: ", wait.text, 14)
            lines += _terms(wait, 14)
    if not seen:
        raise InputError(
            f"job {clean(job, 60)!r} is not in this run's decisions",
            source=str(Path(folder) / DECISIONS),
            field="job",
        )
    return [f"job {clean(job, 75)}", f"run {clean(folder, 75)}", *lines]


def _terms(reason: Reason, indent: int) -> list[str]:
    if not reason.terms:
        return []
    text = ", ".join(f"{k}={_fmt(v)}" for k, v in reason.terms.items())
    return wrap(" " * indent + "terms: ", text, indent + 7)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return clean(v, 60)


# ---------------------------------------------------------------------------- journal
def open_journal(path: str) -> Journal:
    """The journal at ``path``, read-only, after the ownership checks (module docstring)."""
    p = Path(path)
    try:
        info = os.lstat(p)
    except FileNotFoundError:
        raise InputError("no journal here", source=path, field="journal") from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", source=path, field="journal") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        raise InputError(
            "not a regular file (a symlink?); refusing to read it", source=path, field="journal"
        )
    if info.st_uid != os.geteuid():
        raise InputError(
            f"owned by uid {info.st_uid}, not by you (uid {os.geteuid()}); refusing to read it",
            source=path,
            field="journal",
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InputError(
            "writable by group or others; refusing to read it", source=path, field="journal"
        )
    try:
        return Journal(p, writer=False)
    except JournalError as err:
        raise InputError(clean(err), field="journal") from None


def _reason(text: str) -> Reason | None:
    return Reason.from_journal(text)


def _placement(p: dict[str, int]) -> str:
    return ",".join(f"{clean(n, 30)}:{g}" for n, g in sorted(p.items())) or "-"


def _order_key(row: Any) -> tuple[int, float, str]:
    """The controller's queue order: running jobs first, then waiting ones by their rank in
    the policy's order (the ``rank`` term of their reason), then submit time."""
    if row.state == "running":
        return (0, row.submit_time, row.engine_id)
    if row.state == "rejected":
        return (2, row.submit_time, row.engine_id)
    r = _reason(row.waiting)
    rank = r.terms.get("rank") if r is not None else None
    ahead = r.terms.get("ahead") if r is not None else None
    key = ahead if isinstance(ahead, int) else rank if isinstance(rank, int) else math.inf
    return (1, float(key), row.engine_id)


def status_data(path: str) -> dict[str, Any]:
    """What ``gpuplan status`` shows, as data (``--json``)."""
    journal = open_journal(path)
    try:
        rows = journal.jobs(["pending", "running", "rejected"])
        runs = journal.runs()
        run = runs[-1] if runs else None
        times = cycle_times.load(journal.meta(cycle_times.meta_key(run.run_id))) if run else []
        failopen = len(journal.jobs(["failopen"]))
    finally:
        journal.close()
    queue = []
    usage: dict[str, int] = {}
    for row in sorted(rows.values(), key=_order_key):
        # A refused job (a comment outside the grammar...) stays held and is shown last;
        # other rejected jobs went to Slurm's own scheduler and are not the engine's.
        if row.state == "rejected" and not row.reason.startswith("refused"):
            continue
        r = _reason(row.waiting)
        state = "refused" if row.state == "rejected" else row.state
        queue.append(
            {
                "job": row.engine_id,
                "slurm_id": row.slurm_id,
                "state": state,
                "gpus": row.gpus,
                "placement": row.placement,
                "terms": dict(r.terms) if r else {},
                "reason": r.text if r else ("" if row.state == "running" else row.reason),
                "code": r.code if r else "",
            }
        )
        if row.state == "running":
            for node, g in row.placement.items():
                usage[node] = usage.get(node, 0) + int(g)
    hb = Path(path).with_name(Path(path).name + ".heartbeat")
    age = heartbeat_age(hb) if hb.exists() or hb.is_symlink() else math.inf
    last = times[-1] if times else {}
    health = {
        "run": run.run_id if run else None,
        "policy": run.policy if run else "",
        "version": run.version if run else "",
        "running": bool(run and run.ended is None),
        "heartbeat_age_s": None if math.isinf(age) else round(age, 3),
        "last_seen_age_s": round(time.time() - run.last_seen, 3) if run else None,
        "failopen_jobs": failopen,
        "cycles": len(times),
        "last_poll_s": last.get("poll_s"),
        "last_decide_s": last.get("decide_s"),
    }
    return {"queue": queue, "usage": usage, "health": health}


def status_lines(data: dict[str, Any]) -> list[str]:
    """``gpuplan status`` for people: health, usage by node, then the queue."""
    h = data["health"]
    out = [
        f"controller run {h['run']} ({clean(h['policy'], 40)}, gpuplan "
        f"{clean(h['version'] or '?', 20)}): " + ("running" if h["running"] else "stopped")
    ]
    hb = h["heartbeat_age_s"]
    out.append(
        f"  heartbeat {'missing' if hb is None else f'{hb:.1f} s ago'}; "
        f"fail-open jobs {h['failopen_jobs']}"
    )
    poll, dec = h["last_poll_s"], h["last_decide_s"]
    out.append(
        f"  last cycle: poll {'-' if poll is None else f'{poll * 1000:.0f} ms'}, "
        f"decision {'-' if dec is None else f'{dec * 1000:.0f} ms'} "
        f"({h['cycles']} cycles kept)"
    )
    out.append("usage by node (GPUs held by running jobs):")
    for node, g in sorted(data["usage"].items()):
        out.append(f"  {clean(node, 40):<40} {g:>4}")
    if not data["usage"]:
        out.append("  (none)")
    running = sum(1 for q in data["queue"] if q["state"] == "running")
    out.append(
        f"queue ({running} running, {len(data['queue']) - running} waiting), in the "
        "controller's order:"
    )
    for i, q in enumerate(data["queue"], 1):
        head = f"{i:>4} {clean(q['job'], 24):<24} {q['state']:<8} {q['gpus']:>3} GPUs "
        if q["state"] == "running":
            out += wrap(head, _placement(q["placement"]), len(head))
        else:
            out += wrap(head, q["reason"] or "(no reason yet)", 6)
        terms = {
            k: v
            for k, v in q["terms"].items()
            if k in ("rank", "queue", "attained_gpu_s", "share", "counter", "ahead")
        }
        if terms:
            out += wrap(
                "      priority: ", ", ".join(f"{k}={_fmt(v)}" for k, v in terms.items()), 16
            )
    return out


def explain_journal(path: str, job: str) -> list[str]:
    """The lines of ``explain JOB --journal PATH``: the job's row, every action the controller
    took on it with its reason, and its reason history (waiting, skipped changes)."""
    journal = open_journal(path)
    try:
        eid = job if job.startswith("slurm-") or not job.isdigit() else f"slurm-{job}"
        row = journal.job(eid)
        if row is None:
            raise InputError(
                f"job {clean(job, 60)!r} is not in this journal", source=path, field="job"
            )
        actions = journal.actions(eid)
        history = journal.reasons(eid)
        origin = journal.origin
    finally:
        journal.close()
    out = [
        f"job {clean(eid)} (Slurm {row.slurm_id}): {row.state}, {row.gpus} GPUs "
        f"{_placement(row.placement)}"
    ]
    if row.reason:
        out += wrap("  state reason: ", row.reason, 16)
    wait = _reason(row.waiting)
    if wait is not None and row.state == "pending":
        out += wrap("  waiting now: ", wait.text, 15)
    events: list[tuple[float, list[str]]] = []
    for a in actions:
        r = _reason(a.reason)
        t = a.intended_at - origin
        head = (
            f"t={t:>10.1f}  {a.kind} {_placement(a.before)} -> {_placement(a.after)} [{a.status}] "
        )
        lines = wrap(head, r.text if r else "(no reason recorded)", 14)
        if r is not None:
            lines += _terms(r, 14)
        events.append((a.intended_at, lines))
    for h in history:
        r = _reason(h.reason)
        lines = wrap(f"t={h.time - origin:>10.1f}  {h.kind}: ", r.text if r else "?", 14)
        events.append((h.time, lines))
    events.sort(key=lambda e: e[0])
    out.append("history (seconds since the journal's origin):")
    for _, lines in events:
        out += lines
    if not events:
        out.append("  (no decision touched it yet)")
    return out


# ---------------------------------------------------------------------------- command line
def cmd_status(args: Any) -> int:
    if args.server is not None:  # the single server's (gpuplan/server_cmds.py)
        from gpuplan.server_cmds import server_status

        return server_status(args.server or None, args.json)
    data = status_data(args.journal)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print("\n".join(status_lines(data)))
    return 0


def cmd_explain(args: Any) -> int:
    if args.run is not None:
        lines = explain_run(args.run, args.job)
    else:
        lines = explain_journal(args.journal, args.job)
    print("\n".join(lines))
    return 0


def add_subcommands(sub: Any) -> None:
    """Register ``status`` and ``explain`` on the CLI's subparsers."""
    from gpuplan.executors.control.command import DEFAULT_STATE_DB

    st = sub.add_parser(
        "status",
        help="the Slurm controller's queue, usage and health, read from its journal (read-only)",
    )
    st.add_argument(
        "--journal",
        default=DEFAULT_STATE_DB,
        help=f"the controller's journal (default {DEFAULT_STATE_DB})",
    )
    st.add_argument(
        "--server",
        nargs="?",
        const="",
        default=None,
        help="instead: the single server's jobs (its state dir; default the default one)",
    )
    st.add_argument("--json", action="store_true", help="print JSON instead of text")
    st.set_defaults(func=cmd_status)
    ex = sub.add_parser(
        "explain", help="a job's history and the reason of every decision that touched it"
    )
    ex.add_argument("job", help="the job id (a Slurm job id or slurm-N for --journal)")
    src = ex.add_mutually_exclusive_group(required=True)
    src.add_argument("--journal", help="a Slurm controller's journal")
    src.add_argument("--run", help="a `gpuplan simulate --out` folder")
    ex.set_defaults(func=cmd_explain)
