"""The command line's rich consoles, with one behaviour changed: output to a closed pipe.

rich's own reaction to ``BrokenPipeError`` (``gpuplan scenarios | head -1``) is to exit with
status 1 at once, which reads as a failure and skips the CLI's handling. Here the error is
raised as it is, so :func:`gpuplan.cli.main` treats every closed stdout the same way: quietly,
with status 141 (docs/cli.md).
"""

from __future__ import annotations

import errno
import sys

from rich.console import Console

__all__ = ["console"]


class _PipeConsole(Console):
    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is rendered to a stream nobody reads
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


def console(err: bool = False) -> Console:
    """A console on stdout (or stderr); when that stream is piped or logged (not a terminal)
    it is 160 columns wide so the comparison table is not squeezed into 80."""
    stream = sys.stderr if err else sys.stdout
    width = None if stream.isatty() else 160
    return _PipeConsole(stderr=err, highlight=False, width=width)
