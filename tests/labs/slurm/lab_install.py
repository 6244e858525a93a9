"""Installing the lab's Debian packages (see :mod:`.lab`).

Kept apart from the lab's configuration and process management: this is the only part that
changes the host system-wide (apt-get, ``/usr/sbin/policy-rc.d``), and it changes with the
packaging (package names, apt options), not with how the lab runs its daemons.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..labroot import apt_get
from .lab_config import PACKAGES, LabError


def _installed(package: str) -> bool:
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
    )
    return proc.returncode == 0 and "ok installed" in proc.stdout


def install_packages(install: bool) -> None:
    """Install the missing :data:`.lab_config.PACKAGES` (refused when ``install`` is False)."""
    missing = [p for p in PACKAGES if not _installed(p)]
    if not missing:
        return
    if not install:
        raise LabError(f"Debian packages missing: {' '.join(missing)}")
    guard = Path("/usr/sbin/policy-rc.d")
    own_guard = not guard.exists()
    if own_guard:  # keep the packages' postinst from starting system-wide daemons
        guard.write_text("#!/bin/sh\nexit 101\n")
        guard.chmod(0o755)
    try:  # both wait (bounded) for another apt/dpkg holding the locks
        apt_get(["update", "-qq"], error=LabError)
        apt_get(["install", "-y", "-qq", "--no-install-recommends", *missing], error=LabError)
    finally:
        if own_guard:
            guard.unlink(missing_ok=True)
    still = [p for p in PACKAGES if not _installed(p)]
    if still:
        raise LabError(f"packages still missing after apt-get install: {' '.join(still)}")
