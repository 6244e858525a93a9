"""Test support: the Slurm and SSH labs (real daemons on this machine) and their private roots.

Not part of the runtime package and not in the wheel: they start daemons, write below
private roots and may install Debian packages with apt-get, which an installed gpuplan never
needs. Tests and benchmarks import them as ``tests.labs.*``; run one by hand from a checkout,
``python -m tests.labs.slurm.lab up`` (docs/slurm.md) or ``python -m tests.labs.ssh.lab up``
(docs/ssh.md).
"""

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
"""The checkout's root: the working directory a ``python -m tests.labs...`` subprocess needs."""
