"""Injectable fault points: named places where a test can make this process die.

``STREAMS_FAULT=<point>[:<n>]`` makes the n-th (default first) pass through ``hit(point)``
SIGKILL the process, as an OOM kill or a power cut would, between two steps that are
otherwise never separated. ``STREAMS_FAULT_RAISE=<point>[:<n>]`` makes that pass raise
InjectedFault instead (a transient failure the process survives).
``STREAMS_FAULT_WHILE=<point>:<path>`` makes every pass through ``hit(point)`` raise
InjectedFault while the file ``<path>`` exists: a fault that lasts until the test ends it.
Unset (production), ``hit`` is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

from streams.errors import SafeMessage

POINTS = frozenset(
    {
        # The applier committed a batch to PostgreSQL and has not yet written the cache.
        "applier.after_commit",
        # The document-expiry owner worker committed owners and has not yet written its cache.
        "expiry_owners.after_commit",
        # The document-expiry owner worker committed one chunk of owners' markers and outbox
        # rows and has not yet claimed the next (nor sent a continuation, nor acked).
        "expiry_owners.after_chunk",
        # The automation fan-out drainer committed one chunk of a setting's fan-out (its rows
        # and its saved position) and has not yet started the next.
        "automation_fanout.after_chunk",
        # The document-expiry run is about to hand a batch of owners to the fan-out.
        "expiry_run.fanout",
        # A cache is about to write the worker's local store (RocksDB): raising here is the
        # store refusing the write, as a full or failing disk makes it.
        "cache.store_write",
    }
)


class InjectedFault(SafeMessage, RuntimeError):
    """Raised at an armed point under STREAMS_FAULT_RAISE."""


def _parse(spec: str) -> tuple[str, int] | None:
    if not spec:
        return None
    point, _, n = spec.partition(":")
    if point not in POINTS:
        raise ValueError(f"STREAMS_FAULT: unknown fault point {point!r} (known: {sorted(POINTS)})")
    count = int(n) if n else 1
    if count < 1:
        raise ValueError("STREAMS_FAULT: the pass number must be at least 1")
    return point, count


_armed = _parse(os.environ.get("STREAMS_FAULT", ""))
_raising = _parse(os.environ.get("STREAMS_FAULT_RAISE", ""))
_passes: dict[str, int] = {}


def _parse_while(spec: str) -> tuple[str, str] | None:
    if not spec:
        return None
    point, _, path = spec.partition(":")
    if point not in POINTS:
        raise ValueError(
            f"STREAMS_FAULT_WHILE: unknown fault point {point!r} (known: {sorted(POINTS)})"
        )
    if not path:
        raise ValueError("STREAMS_FAULT_WHILE: give the file as <point>:<path>")
    return point, path


_while = _parse_while(os.environ.get("STREAMS_FAULT_WHILE", ""))


def hit(point: str) -> None:
    """Die here if this point is armed and this is its n-th pass."""
    if _while is not None and _while[0] == point and os.path.exists(_while[1]):
        raise InjectedFault(f"injected fault at {point}")
    if _raising is not None and _raising[0] == point:
        _passes[point] = seen = _passes.get(point, 0) + 1
        if seen == _raising[1]:
            raise InjectedFault(f"injected fault at {point}")
        return
    if _armed is None or _armed[0] != point:
        return
    _passes[point] = seen = _passes.get(point, 0) + 1
    if seen >= _armed[1]:
        os.kill(os.getpid(), signal.SIGKILL)
