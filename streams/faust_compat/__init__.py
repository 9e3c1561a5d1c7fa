"""Every private internal of faust-streaming, mode and aiokafka the service uses, behind one
door. Each accessor raises FaustCompatError, naming the library, its installed version and
the attribute, when the internal it relies on is missing or changed; ``check()`` verifies
them all on the installed versions, once, when a worker is built (streams/app.py), so an
upgrade fails at startup instead of leaving a figure blank later. docs/architecture.md,
"Faust internals", lists what is wrapped and why.

The rest of streams/ imports these from here (the public Faust API stays where it is).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from streams.faust_compat.errors import FaustCompatError

if TYPE_CHECKING:
    from streams.faust_compat.consumer import committed_offsets, to_message
    from streams.faust_compat.producer import abort, producer_closed, sender_task
    from streams.faust_compat.schema import RawBytes
    from streams.faust_compat.stores import (
        estimated_keys,
        is_rocks_store,
        is_rocksdict_store,
        partition_db,
        partition_dbs,
        write_batch,
    )
    from streams.faust_compat.tables import changelog_producer, in_event, json_bytes

# Accessor → its module. Each module is imported on first use: the producer's accessors
# need aiokafka alone, so the timer process and ``timers run`` never import Faust.
_HOMES = {
    "committed_offsets": "consumer",
    "to_message": "consumer",
    "abort": "producer",
    "producer_closed": "producer",
    "sender_task": "producer",
    "RawBytes": "schema",
    "estimated_keys": "stores",
    "is_rocks_store": "stores",
    "is_rocksdict_store": "stores",
    "partition_db": "stores",
    "partition_dbs": "stores",
    "write_batch": "stores",
    "changelog_producer": "tables",
    "in_event": "tables",
    "json_bytes": "tables",
}
CHECKED = ("consumer", "commits", "fetch_loop", "stores", "tables", "producer", "schema")


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


def install() -> None:
    """Faust's fetch loop without a task per record (fetch_loop.py) and its commit bookkeeping
    without duplicate offsets (commits.py), in every Faust consumer of this process."""
    from streams.faust_compat import commits, fetch_loop

    fetch_loop.install()
    commits.install()


def check() -> None:
    """Raise FaustCompatError when an internal this package wraps is missing or changed in
    the installed faust-streaming, mode or aiokafka."""
    for home in CHECKED:
        importlib.import_module(f"{__name__}.{home}").check()


__all__ = [
    "FaustCompatError",
    "RawBytes",
    "abort",
    "changelog_producer",
    "check",
    "committed_offsets",
    "estimated_keys",
    "in_event",
    "install",
    "is_rocks_store",
    "is_rocksdict_store",
    "json_bytes",
    "partition_db",
    "partition_dbs",
    "producer_closed",
    "sender_task",
    "to_message",
    "write_batch",
]
