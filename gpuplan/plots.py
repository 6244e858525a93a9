"""Figures for comparing policies: JCT CDF, the AFS QL / CE / BI / utilisation time series, and
per-metric bars with their spread over seeds.

Figures are built with matplotlib's object API on an explicit Agg canvas instead of through
``pyplot``: that needs no display, does not switch the process-wide backend under a caller who
imported gpuplan into a notebook, and leaves no figure registered in pyplot's global manager, so
nothing leaks when many runs are plotted (the equivalent of always calling ``plt.close``).

Three readability rules hold for every figure: the title names the scenario (figures are copied
into reports and slides, away from their file names); a panel whose values span two orders of
magnitude or more is drawn on a log axis (symlog when zeros occur, e.g. BI of an empty queue),
or a single bad policy flattens all the others; and each policy gets its own colour, dash
pattern and a width that decreases with its position, so a line exactly on top of another
still shows the one below.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from itertools import cycle
from pathlib import Path

import numpy as np

from gpuplan.models import RunResult
from gpuplan.models.extras import MissingExtra

try:
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter
except ImportError as _err:  # the 'plots' extra; commands check it before they run
    raise MissingExtra("gpuplan.plots", "plots", "matplotlib") from _err

__all__ = [
    "figure_png",
    "jct_cdf_figure",
    "metric_bars_figure",
    "plot_jct_cdf",
    "plot_timeseries",
    "timeseries_figure",
]

_HOUR = 3600.0
WIDE_SPAN = 100.0
"""max / smallest-positive ratio from which a panel switches to a log axis."""
_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
_DASHES = ("-", "--", "-.", ":")


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    fig.clear()
    return out


def figure_png(fig: Figure) -> bytes:
    """The figure as PNG bytes (for embedding in a page); the figure is cleared afterwards."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    fig.clear()
    return buffer.getvalue()


def line_styles(count: int) -> list[dict[str, object]]:
    """Matplotlib keyword sets for ``count`` lines: colour and dash cycle independently (ten
    colours x four dashes before a repeat), widths go from 2.6 down to 1.0 so later lines,
    drawn on top, are thinner than the ones they may cover."""
    colours, dashes = cycle(_COLOURS), cycle(_DASHES)
    styles = []
    for i in range(count):
        width = 2.6 - 1.6 * i / max(1, count - 1)
        styles.append({"color": next(colours), "linestyle": next(dashes), "linewidth": width})
    return styles


def scenario_title(results: Iterable[RunResult]) -> str:
    """The scenario name(s) of ``results``, for a figure title."""
    names = sorted({r.scenario for r in results if r.scenario})
    return ", ".join(names) if names else "unnamed scenario"


def span_scale(values: Iterable[np.ndarray]) -> str:
    """``"linear"``, ``"log"`` or ``"symlog"`` for a panel holding ``values``: log once the
    largest finite value is at least :data:`WIDE_SPAN` times the smallest positive one
    (symlog when some values are 0 or negative, which a log axis cannot show)."""
    arrays = [np.asarray(v, dtype=float) for v in values]
    finite = np.concatenate([a[np.isfinite(a)] for a in arrays]) if arrays else np.array([])
    positive = finite[finite > 0]
    if positive.size == 0 or positive.max() < WIDE_SPAN * positive.min():
        return "linear"
    return "log" if finite.min() > 0 else "symlog"


def _apply_scale(ax: Axes, values: Sequence[np.ndarray]) -> str:
    """Put ``ax`` on :func:`span_scale`'s scale; returns it. The symlog linear band reaches
    four decades below the largest value (or to the smallest positive one, if higher), so
    a stray tiny value does not stretch the axis over empty decades."""
    scale = span_scale(values)
    if scale == "symlog":
        positive = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values])
        positive = positive[np.isfinite(positive) & (positive > 0)]
        linthresh = max(float(positive.min()), float(positive.max()) * 1e-4)
        ax.set_yscale("symlog", linthresh=linthresh)
    elif scale == "log":
        ax.set_yscale("log")
    return scale


def jct_cdf_figure(results: Mapping[str, RunResult]) -> Figure:
    """Empirical JCT CDF per policy, log-x, in hours.

    The y axis is the fraction of *all* submitted jobs, so a policy with unfinished jobs plateaus
    below 1 (their count is in the legend) instead of looking as good as one that finished
    everything. Zero JCTs cannot sit on a log axis and are clipped to the smallest positive
    one (1 s if there is none).
    """
    fig = _new_figure(6.4, 4.0)
    ax = fig.add_subplot()
    plotted = False
    for (name, result), style in zip(results.items(), line_styles(len(results)), strict=True):
        jct = (
            np.array(
                [
                    r.jct if r.jct is not None else r.finish_time - r.submit_time
                    for r in result.jobs
                    if r.finish_time is not None
                ],
                dtype=float,
            )
            / _HOUR
        )
        if jct.size == 0:
            continue
        jct.sort()
        positive = jct[jct > 0]
        jct = np.maximum(jct, positive[0] if positive.size else 1.0 / _HOUR)
        total = len(result.jobs)
        frac = np.arange(1, jct.size + 1) / total
        unfinished = total - jct.size
        label = name if unfinished == 0 else f"{name} ({unfinished} unfinished)"
        ax.step(
            np.concatenate(([jct[0]], jct)),
            np.concatenate(([0.0], frac)),
            where="post",
            label=label,
            **style,
        )
        plotted = True
    if plotted:
        ax.set_xscale("log")
        # minor-tick labels (2x10^-3, 3x10^-3, ...) collide on short ranges; decades suffice
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(loc="lower right", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no finished jobs", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("JCT (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0.0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"Job completion time CDF: {scenario_title(results.values())}")
    return fig


def plot_jct_cdf(results: dict[str, RunResult], path: str | Path) -> Path:
    """:func:`jct_cdf_figure` saved to ``path``; returns the path written."""
    return _save(jct_cdf_figure(results), path)


def timeseries_figure(results: Mapping[str, RunResult]) -> Figure:
    """Four stacked panels over time (hours): QL, CE, BI, GPU utilisation; one line a policy.

    Utilisation here is the instantaneous ``gpus_allocated / capacity`` of each sample (NaN when
    the capacity is 0, which leaves a gap rather than a fake 0). Each panel picks its own scale
    (:func:`span_scale`).
    """
    fig = _new_figure(8.0, 9.0)
    axes = fig.subplots(4, 1, sharex=True)
    panels = (
        ("Queue length (QL)", "jobs"),
        ("Cluster efficiency (CE)", "CE"),
        ("Blocking index (BI)", "BI"),
        ("GPU utilisation", "allocated / capacity"),
    )
    drawn: list[list[np.ndarray]] = [[] for _ in panels]
    for (name, result), style in zip(results.items(), line_styles(len(results)), strict=True):
        samples = result.samples
        if not samples:
            continue
        t = np.fromiter((s.time for s in samples), dtype=float) / _HOUR
        ql = np.fromiter((s.queue_length for s in samples), dtype=float)
        ce = np.fromiter((s.cluster_efficiency for s in samples), dtype=float)
        bi = np.fromiter((s.blocking_index for s in samples), dtype=float)
        util = np.fromiter(
            (s.gpus_allocated / s.capacity if s.capacity > 0 else np.nan for s in samples),
            dtype=float,
        )
        for i, (ax, series) in enumerate(zip(axes, (ql, ce, bi, util), strict=True)):
            ax.plot(t, series, label=name, **style)
            drawn[i].append(series)
    for ax, (title, ylabel), series in zip(axes, panels, drawn, strict=True):
        ax.set_title(title, fontsize="medium")
        scale = _apply_scale(ax, series)
        ax.set_ylabel(ylabel if scale == "linear" else f"{ylabel} ({scale})")
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("time (hours)")
    if any(r.samples for r in results.values()):
        axes[0].legend(loc="best", fontsize="small")
    fig.suptitle(f"Cluster over time: {scenario_title(results.values())}")
    return fig


def plot_timeseries(results: dict[str, RunResult], path: str | Path) -> Path:
    """:func:`timeseries_figure` saved to ``path``; returns the path written."""
    return _save(timeseries_figure(results), path)


def metric_bars_figure(
    scenario: str,
    metrics: Sequence[tuple[str, float]],
    values: Mapping[str, Mapping[str, Sequence[float | None]]],
) -> Figure:
    """One panel per metric: a bar per policy at the mean over seeds, whiskers from the lowest
    to the highest seed, and one dot per seed.

    ``metrics`` is ``(name, divisor)`` (e.g. seconds shown in hours with 3600);
    ``values[metric][policy]`` the per-seed values, ``None`` where a run had none (left out of
    the mean and shown as a missing bar rather than a fake 0).
    """
    columns = min(4, len(metrics))
    rows = -(-len(metrics) // columns)
    fig = _new_figure(3.2 * columns, 3.3 * rows)
    axes = np.atleast_1d(fig.subplots(rows, columns, squeeze=False)).ravel()
    for ax, (metric, divisor) in zip(axes, metrics, strict=False):
        per_policy = values.get(metric, {})
        names = list(per_policy)
        colours = [s["color"] for s in line_styles(len(names))]
        spans: list[np.ndarray] = []
        for x, name in enumerate(names):
            points = np.array([v / divisor for v in per_policy[name] if v is not None], dtype=float)
            if points.size == 0:
                continue
            spans.append(points)
            mean = float(points.mean())
            ax.bar(
                x,
                mean,
                color=colours[x],
                alpha=0.75,
                yerr=[[max(0.0, mean - points.min())], [max(0.0, points.max() - mean)]],
                capsize=3,
            )  # max(0, .): a mean of equal values can be off by one ulp
            ax.plot(np.full(points.size, x), points, "o", color="black", markersize=2.5)
        scale = _apply_scale(ax, spans) if spans else "linear"
        ax.set_title(metric if scale == "linear" else f"{metric} ({scale})", fontsize="small")
        ax.set_xticks(range(len(names)), names, rotation=40, ha="right", fontsize="x-small")
        ax.tick_params(axis="y", labelsize="x-small")
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[len(metrics) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"{scenario}: mean over seeds (whiskers min..max, dots = seeds)", fontsize="medium"
    )
    return fig
