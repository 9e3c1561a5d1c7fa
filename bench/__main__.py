"""``python -m bench [NAME ...] [--compare FILE [--against OTHER]]``: see bench/cli.py."""

from __future__ import annotations

import sys

from bench.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
