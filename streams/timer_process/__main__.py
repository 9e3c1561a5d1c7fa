import sys

from streams.timer_process.child import main

sys.exit(main())
