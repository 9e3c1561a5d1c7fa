"""A stand-in timer process speaking streams/timer_process/wire.py, for the supervisor's tests.

Appends every wake-up it gets to the file named by argv[1]; answers snapshots with one
timer and a counter of the wakes; ``stop`` ends it unless argv[2] is ``stubborn``.
"""

from __future__ import annotations

import os
import sys

from prometheus_client import CollectorRegistry, Counter

from streams.metrics import families_to_json
from streams.timer_process import wire


def main() -> None:
    log, stubborn = sys.argv[1], sys.argv[2:] == ["stubborn"]
    registry = CollectorRegistry()
    wakes = Counter("fake_wakes", "wakes received", registry=registry)
    out = sys.stdout.buffer
    out.write(wire.encode({"op": "ready", "pid": os.getpid()}))
    out.flush()
    for line in sys.stdin.buffer:
        message = wire.decode(line)
        if message["op"] == "wake":
            wakes.inc()
            with open(log, "a") as f:
                f.write(f"{message['name']} {message['at']}\n")
        elif message["op"] == "snapshot":
            timers = [{"name": "fake", "counts": {"wakes": int(wakes._value.get())}}]
            answer = {"op": "snapshot", "id": message["id"], "timers": timers}
            out.write(wire.encode({**answer, "metrics": families_to_json(registry)}))
            out.flush()
        elif message["op"] == "stop" and not stubborn:
            return
    if stubborn:
        import time

        time.sleep(3600)


if __name__ == "__main__":
    main()
