"""Every private internal of faust-streaming, mode and aiokafka the service uses, behind one
door. Each accessor raises FaustCompatError, naming the library, its installed version and
the attribute, when the internal it relies on is missing or changed; ``check()`` verifies
them all on the installed versions, once, when a worker is built (streams/app.py), so an
upgrade fails at startup instead of leaving a figure blank later. docs/architecture.md,
"Faust internals", lists what is wrapped and why.

The rest of streams/ imports these from here (the public Faust API stays where it is).
"""

from __future__ import annotations

from streams.faust_compat import consumer, fetch_loop, producer, schema, stores, tables
from streams.faust_compat.consumer import committed_offsets, to_message
from streams.faust_compat.errors import FaustCompatError
from streams.faust_compat.fetch_loop import install
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

CHECKS = (
    consumer.check,
    fetch_loop.check,
    stores.check,
    tables.check,
    producer.check,
    schema.check,
)


def check() -> None:
    """Raise FaustCompatError when an internal this package wraps is missing or changed in
    the installed faust-streaming, mode or aiokafka."""
    for one in CHECKS:
        one()


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
