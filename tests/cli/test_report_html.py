"""The sweep's report.html, opened in headless Chromium: it renders its tables and figures from
the file alone (no server, no outside URL)."""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from gpuplan.cli import main

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SWEEP = """\
name: report test
scenarios:
  - {name: small, scenario: philly-default, overrides: {workload.max_jobs: 60}}
  - {name: smaller, scenario: philly-default, overrides: {workload.max_jobs: 30}}
policies: [fifo, srtf, tiresias-l]
seeds: [0, 1]
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    (folder / "sweep.yaml").write_text(SWEEP)
    assert (
        main(["sweep", str(folder / "sweep.yaml"), "--out", str(folder / "out"), "--workers", "1"])
        == 0
    )
    return folder / "out" / "report.html"


def _chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM.exists(), "Debian's chromium is missing: `make test` installs it"
    return subprocess.run(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )


def test_report_is_self_contained(report: Path) -> None:
    page = report.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page, re.I)
    assert "url(" not in page and "<script" not in page and "<link" not in page
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 6  # per scenario: JCT CDF, time series, metric bars
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")


def test_chromium_renders_the_tables_and_figures(report: Path, tmp_path: Path) -> None:
    dom = _chromium(tmp_path, "--dump-dom", report.as_uri()).stdout
    assert dom.count('<tr class="run">') == 12  # 2 scenarios x 3 policies x 2 seeds
    assert dom.count('<tr class="policy">') == 6
    for policy in ("fifo", "srtf", "tiresias-l"):
        assert f"<td>{policy}</td>" in dom
    assert len(re.findall(r"<img [^>]*src=\"data:image/png;base64,", dom)) == 6
    assert "small: mean over seeds" not in dom  # figure text is pixels, not markup
    assert '<section id="smaller">' in dom


def test_chromium_screenshot_is_not_blank(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    _chromium(tmp_path, "--window-size=1280,1600", f"--screenshot={shot}", report.as_uri())
    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (1600, 1280)
    gray = pixels.mean(axis=2)
    assert (gray < 0.5).mean() > 0.005  # text, table borders and plot lines drawn
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 200  # figures' colours, not a page
    # of plain text
