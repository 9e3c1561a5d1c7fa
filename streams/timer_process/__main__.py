"""The timer process child (``python -m streams.timer_process``), which its worker starts
(streams/timer_process/supervisor.py)."""

import sys

from streams.timer_process.child import main

sys.exit(main())
