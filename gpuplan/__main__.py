"""``python -m gpuplan`` = the ``gpuplan`` command."""

import sys

from .cli import main

sys.exit(main())
