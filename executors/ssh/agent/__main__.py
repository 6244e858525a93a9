"""``python -m gpuplan.executors.ssh.agent``: the package run as the program it ships as.

Why: imported as the package (on the engine host), ``launch`` starts the sidecar daemon this way
(:func:`~.commands._serve_argv`); on the nodes the same code runs as one bundled script
(``gpuplan.executors.ssh.agent_bundle``). Not part of the bundle.
"""

import sys

from .program import main

sys.exit(main())
