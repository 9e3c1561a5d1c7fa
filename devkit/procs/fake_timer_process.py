"""A stand-in timer process speaking streams/timer_process/wire.py, for the supervisor's tests.

Appends every wake-up it gets to the file named by argv[1]; answers snapshots with one
timer and a counter of the wakes; ``stop`` ends it unless argv[2] is ``stubborn``; with
argv[2] ``beat`` it beats every 0.1 s, as the real one does (its parent's watchdog).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from prometheus_client import CollectorRegistry, Counter

from streams.metrics import families_to_json
from streams.timer_process import wire


def main() -> None:
    log, stubborn = sys.argv[1], sys.argv[2:] == ["stubborn"]
    registry = CollectorRegistry()
    wakes = Counter("fake_wakes", "wakes received", registry=registry)
    out = sys.stdout.buffer
    lock = threading.Lock()

    def send(data: bytes) -> None:
        with lock:
            out.write(data)
            out.flush()

    def beat() -> None:
        while True:
            send(wire.BEAT)
            time.sleep(0.1)

    send(wire.encode({"op": "ready", "pid": os.getpid()}))
    if sys.argv[2:] == ["beat"]:
        threading.Thread(target=beat, daemon=True).start()
    for line in sys.stdin.buffer:
        message = wire.decode(line)
        if message["op"] == "wake":
            wakes.inc()
            with open(log, "a") as f:
                f.write(f"{message['name']} {message['at']}\n")
        elif message["op"] == "snapshot":
            timers = [{"name": "fake", "counts": {"wakes": int(wakes._value.get())}}]
            answer = {"op": "snapshot", "id": message["id"], "timers": timers}
            send(wire.encode({**answer, "metrics": families_to_json(registry)}))
        elif message["op"] == "stop" and not stubborn:
            return
    if stubborn:
        time.sleep(3600)


if __name__ == "__main__":
    main()
