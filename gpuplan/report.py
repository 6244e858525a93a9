"""The sweep's HTML report: one self-contained page, readable from a file with no server.

Everything the page needs is inside it: the CSS is inline and every figure is a PNG embedded as
a base64 ``data:`` URI, so the file can be mailed, attached to an issue or opened offline, and
the page makes no network request at all (nothing can leak to, or break with, an outside host).

Per scenario the page shows a comparison table (mean over seeds with the seed spread), the JCT
CDF and the QL / CE / BI / utilisation time series of the first seed, and bar charts of the
main metrics with every seed's value; a final table lists every run.
"""

from __future__ import annotations

import base64
import html
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gpuplan.executors.metrics import RunSummary, format_duration
from gpuplan.models import RunResult

# matplotlib is the 'plots' extra: importing .plots without it raises MissingExtra
from .plots import figure_png, jct_cdf_figure, metric_bars_figure, timeseries_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["BAR_METRICS", "ReportRun", "render_report"]

_HOUR = 3600.0
BAR_METRICS: tuple[tuple[str, float], ...] = (
    ("avg_jct_s", _HOUR),
    ("p99_jct_s", _HOUR),
    ("avg_queueing_s", _HOUR),
    ("makespan_s", _HOUR),
    ("gpu_utilisation", 1.0),
    ("mean_queue_length", 1.0),
    ("mean_blocking_index", 1.0),
    ("preemptions", 1.0),
)
"""Metrics drawn as bars, with the divisor to their display unit (seconds shown in hours)."""

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 2px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: right; }
th { background: #f0f3f7; } td:first-child, th:first-child { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
.spread { color: #777; font-size: .85em; } .meta { color: #555; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: .9em; }
"""


class ReportRun(Protocol):
    """What the report needs of one run (the sweep's records satisfy it)."""

    scenario: str
    policy: str
    seed: int
    summary: RunSummary


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _img(fig: Figure, alt: str) -> str:
    data = base64.b64encode(figure_png(fig)).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """Mean, and ``±sd`` over seeds when there are several values."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return _e(fmt(mean))
    return f'{_e(fmt(mean))} <span class="spread">±{_e(fmt(statistics.stdev(values)))}</span>'


def _cell(runs: Sequence[ReportRun], field: str, fmt: Callable[[float], str]) -> str:
    values = [getattr(r.summary, field) for r in runs]
    if not values or any(v is None for v in values):
        return "—"
    return _spread([float(v) for v in values], fmt)


_COLUMNS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("Avg JCT", "avg_jct_s", format_duration),
    ("p99 JCT", "p99_jct_s", format_duration),
    ("Avg queueing", "avg_queueing_s", format_duration),
    ("Makespan", "makespan_s", format_duration),
    ("GPU util", "gpu_utilisation", lambda v: f"{v:.1%}"),
    ("Unfinished", "unfinished", lambda v: f"{v:g}"),
    ("Preemptions", "preemptions", lambda v: f"{v:g}"),
    ("Mean BI", "mean_blocking_index", lambda v: f"{v:.3g}"),
    ("Decision p95", "decision_p95_ms", lambda v: f"{v:.2f} ms"),
)


def _scenario_table(by_policy: Mapping[str, Sequence[ReportRun]]) -> str:
    head = "".join(f"<th>{_e(t)}</th>" for t, _, _ in _COLUMNS)
    rows = [f"<tr><th>Policy</th>{head}<th>Avg JCT ratio (first / this)</th></tr>"]
    base = _mean_of(next(iter(by_policy.values()), []), "avg_jct_s")
    for policy, runs in by_policy.items():
        cells = "".join(f"<td>{_cell(runs, f, fmt)}</td>" for _, f, fmt in _COLUMNS)
        mine = _mean_of(runs, "avg_jct_s")
        ratio = "—" if base is None or not mine else f"{base / mine:.2f}x"
        rows.append(f'<tr class="policy"><td>{_e(policy)}</td>{cells}<td>{ratio}</td></tr>')
    return "<table>" + "".join(rows) + "</table>"


def _mean_of(runs: Sequence[ReportRun], field: str) -> float | None:
    values = [getattr(r.summary, field) for r in runs]
    if not values or any(v is None for v in values):
        return None
    return statistics.fmean(values)


def _all_runs_table(runs: Sequence[ReportRun]) -> str:
    fields = (
        "jobs",
        "finished",
        "avg_jct_s",
        "p99_jct_s",
        "avg_queueing_s",
        "makespan_s",
        "gpu_utilisation",
        "preemptions",
        "wall_s",
    )
    head = "".join(f"<th>{_e(f)}</th>" for f in fields)
    rows = [f"<tr><th>scenario</th><th>policy</th><th>seed</th>{head}</tr>"]
    for r in runs:
        cells = "".join(f"<td>{_e(_raw(getattr(r.summary, f)))}</td>" for f in fields)
        rows.append(
            f'<tr class="run"><td>{_e(r.scenario)}</td><td>{_e(r.policy)}</td>'
            f"<td>{r.seed}</td>{cells}</tr>"
        )
    return '<table id="runs">' + "".join(rows) + "</table>"


def _raw(value: object) -> str:
    if value is None:
        return "—"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _section(scenario: str, runs: Sequence[ReportRun], examples: Mapping[str, RunResult]) -> str:
    by_policy: dict[str, list[ReportRun]] = {}
    for r in runs:
        by_policy.setdefault(r.policy, []).append(r)
    seeds = sorted({r.seed for r in runs})
    first = runs[0].summary
    parts = [
        f'<section id="{_e(scenario)}"><h2>{_e(scenario)}</h2>',
        f'<p class="meta">{first.jobs} jobs, seeds {_e(", ".join(map(str, seeds)))}; '
        "table cells: mean over seeds ± standard deviation; ratio = first policy's avg "
        "JCT / this policy's (&gt; 1 = better than the first).</p>",
        _scenario_table(by_policy),
    ]
    if examples:
        seed = next(iter(examples.values())).seed
        parts.append(
            f"<figure>{_img(jct_cdf_figure(examples), f'{scenario} JCT CDF')}"
            f"<figcaption>JCT CDF, seed {seed}</figcaption></figure>"
        )
        parts.append(
            f"<figure>{_img(timeseries_figure(examples), f'{scenario} time series')}"
            f"<figcaption>Queue length, cluster efficiency, blocking index and GPU "
            f"utilisation over time, seed {seed}</figcaption></figure>"
        )
    values = {
        m: {p: [getattr(r.summary, m) for r in rs] for p, rs in by_policy.items()}
        for m, _ in BAR_METRICS
    }
    bars = metric_bars_figure(scenario, BAR_METRICS, values)
    parts.append(
        f"<figure>{_img(bars, f'{scenario} metrics over seeds')}<figcaption>Bars: "
        "mean over seeds; whiskers: lowest..highest seed; dots: each seed. Durations "
        "in hours.</figcaption></figure></section>"
    )
    return "\n".join(parts)


def render_report(
    title: str,
    runs: Sequence[ReportRun],
    examples: Mapping[str, Mapping[str, RunResult]],
    notes: Sequence[str] = (),
) -> str:
    """The page for ``runs`` (in display order); ``examples[scenario][policy]`` are the full
    results drawn as CDFs and time series (one seed per scenario)."""
    scenarios: dict[str, list[ReportRun]] = {}
    for r in runs:
        scenarios.setdefault(r.scenario, []).append(r)
    body = [f"<h1>{_e(title)}</h1>"]
    body += [f'<p class="meta">{_e(n)}</p>' for n in notes]
    body.append(
        "<ul>" + "".join(f'<li><a href="#{_e(s)}">{_e(s)}</a></li>' for s in scenarios) + "</ul>"
    )
    body += [_section(s, rs, examples.get(s, {})) for s, rs in scenarios.items()]
    body.append(f"<h2>All runs</h2>{_all_runs_table(runs)}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def write_report(
    path: Path,
    title: str,
    runs: Sequence[ReportRun],
    examples: Mapping[str, Mapping[str, RunResult]],
    notes: Sequence[str] = (),
) -> Path:
    """:func:`render_report` written to ``path``."""
    path.write_text(render_report(title, runs, examples, notes), encoding="utf-8")
    return path
