"""README's demo table is what ``make demo`` prints (issue 27 item 7).

The command is read from the Makefile's ``demo`` target (so a change there cannot leave the
README behind), run in a fresh process with the target's environment, and its output compared
line by line with the README's ``demo-output`` block. The one cell compared loosely is the
"Decision p95 (ms)" column: wall-clock time per decision, which varies by machine and load; it
must still hold a number there, at the same place.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMING_HEADER = "Decision"


def _demo_command() -> tuple[dict[str, str], list[str]]:
    """The ``demo`` target's recipe: its ``VAR=value`` prefixes and the gpuplan arguments."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = lines.index(next(x for x in lines if x.startswith("demo:")))
    recipe = lines[start + 1].strip()
    words = shlex.split(recipe)
    env = {}
    while "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[0] == "$(BIN)/gpuplan", recipe
    return env, words[1:]


def _readme_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- demo-output:[^>]*-->\n```text\n(.*?)\n```", text, re.S)
    assert match, "README.md has no demo-output block"
    return match.group(1).splitlines()


def _mask_timing(lines: list[str]) -> list[str]:
    """The timing column's cells replaced by ``#`` (after checking each holds a number)."""
    out: list[str] = []
    span: tuple[int, int] | None = None
    for line in lines:
        if line.startswith("┃") and TIMING_HEADER in line:
            bars = [i for i, ch in enumerate(line) if ch == "┃"]
            at = line.index(TIMING_HEADER)
            span = next((a, b) for a, b in itertools.pairwise(bars) if a < at < b)
        elif line.startswith(("└", "┏")) or not line.startswith(("┃", "│", "┡")):
            if line.startswith("┏"):
                span = None  # a new part: its own columns
        elif line.startswith("│") and span is not None:
            cell = line[span[0] + 1 : span[1]]
            assert re.fullmatch(r" +\d+\.\d\d ", cell), f"not a timing: {cell!r}"
            line = line[: span[0] + 1] + "#" * len(cell) + line[span[1] :]
        out.append(line)
    return out


def test_readme_demo_block_is_what_make_demo_prints() -> None:
    extra_env, args = _demo_command()
    assert extra_env.get("COLUMNS") == "80"  # the same table on every terminal
    env = {**os.environ, **extra_env}
    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = [line.rstrip() for line in proc.stdout.splitlines()]
    readme = _readme_block()
    assert len(printed) == len(readme)
    assert _mask_timing(printed) == _mask_timing(readme)
    # the masking left the numbers that matter: every other cell is compared exactly
    assert any("17.90 h" in line for line in printed) and any("1.75x" in line for line in readme)
