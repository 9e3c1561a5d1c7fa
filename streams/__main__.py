"""Entry point for ``python -m streams``."""

import sys

from streams.cli import main

sys.exit(main())
