"""Figures for comparing policies: JCT CDF and the AFS QL / CE / BI / utilisation time series.

Figures are built with matplotlib's object API on an explicit Agg canvas instead of through
``pyplot``: that needs no display, does not switch the process-wide backend under a caller who
imported gpuplan into a notebook, and leaves no figure registered in pyplot's global manager, so
nothing leaks when many runs are plotted (the equivalent of always calling ``plt.close``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from gpuplan.models import RunResult

__all__ = ["plot_jct_cdf", "plot_timeseries"]

_HOUR = 3600.0


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


def plot_jct_cdf(results: dict[str, RunResult], path: str | Path) -> Path:
    """Empirical JCT CDF per policy, log-x, in hours; returns the path written.

    The y axis is the fraction of *all* submitted jobs, so a policy with unfinished jobs plateaus
    below 1 (their count is in the legend) instead of looking as good as one that finished
    everything. Zero JCTs cannot sit on a log axis and are clipped to the smallest positive
    one (1 s if there is none).
    """
    fig = _new_figure(6.4, 4.0)
    ax = fig.add_subplot()
    plotted = False
    for name, result in results.items():
        jct = np.array(
            [
                r.jct if r.jct is not None else r.finish_time - r.submit_time
                for r in result.jobs
                if r.finish_time is not None
            ],
            dtype=float,
        ) / _HOUR
        if jct.size == 0:
            continue
        jct.sort()
        positive = jct[jct > 0]
        jct = np.maximum(jct, positive[0] if positive.size else 1.0 / _HOUR)
        total = len(result.jobs)
        frac = np.arange(1, jct.size + 1) / total
        unfinished = total - jct.size
        label = name if unfinished == 0 else f"{name} ({unfinished} unfinished)"
        ax.step(np.concatenate(([jct[0]], jct)), np.concatenate(([0.0], frac)),
                where="post", label=label)
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
    ax.set_title("Job completion time CDF")
    return _save(fig, path)


def plot_timeseries(results: dict[str, RunResult], path: str | Path) -> Path:
    """Four stacked panels over time (hours): QL, CE, BI, GPU utilisation; one line a policy.

    Utilisation here is the instantaneous ``gpus_allocated / capacity`` of each sample (NaN when
    the capacity is 0, which leaves a gap rather than a fake 0).
    """
    fig = _new_figure(8.0, 9.0)
    axes = fig.subplots(4, 1, sharex=True)
    panels = (
        ("Queue length (QL)", "jobs"),
        ("Cluster efficiency (CE)", "CE"),
        ("Blocking index (BI)", "BI"),
        ("GPU utilisation", "allocated / capacity"),
    )
    for name, result in results.items():
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
        for ax, series in zip(axes, (ql, ce, bi, util), strict=True):
            ax.plot(t, series, label=name, linewidth=1.0)
    for ax, (title, ylabel) in zip(axes, panels, strict=True):
        ax.set_title(title, fontsize="medium")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("time (hours)")
    if any(r.samples for r in results.values()):
        axes[0].legend(loc="best", fontsize="small")
    return _save(fig, path)
