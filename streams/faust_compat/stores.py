"""Faust's RocksDB store (on rocksdict) as the cache reads and writes it directly.

``Store._db_for_partition`` (the database of one partition, opened on first use) and
``Store._dbs`` (the ones open): the cache reads a key from the one database of its
message's partition and writes one write batch per partition, where Faust's table goes
through its layers per key (streams/tables/cache.py, ``put_many``). The databases are
opened in rocksdict's raw mode (bytes in, bytes out), so a batch is built raw too, as
Faust builds the batches of a changelog recovery. Only streams/tables/cache.py calls
these: it names every error of the store (LocalStorageError).
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any

import rocksdict
from faust.stores.rocksdb import RocksDBOptions
from faust.stores.rocksdb import Store as RocksStore

from streams.faust_compat.errors import (
    FAUST,
    FaustCompatError,
    annotated,
    attr,
    method,
    qualname,
    source_says,
)

DB_FOR_PARTITION = "_db_for_partition"
DBS = "_dbs"
STORE = qualname(RocksStore)


def is_rocks_store(store: object) -> bool:
    """Faust's RocksDB store (on rocksdict or python-rocksdb)."""
    return isinstance(store, RocksStore)


def is_rocksdict_store(store: object) -> bool:
    """Faust's RocksDB store on rocksdict (the worker's), which the cache uses directly."""
    return isinstance(store, RocksStore) and bool(store.use_rocksdict)


def partition_db(store: object, partition: int) -> Any:
    """The rocksdict database of ``partition`` (opened when it is not yet)."""
    return attr(store, DB_FOR_PARTITION, FAUST, STORE)(partition)


def partition_dbs(store: object) -> MutableMapping[int, Any]:
    """The partition databases the store has open, by partition (the store's own dict)."""
    found = attr(store, DBS, FAUST, STORE)
    if not isinstance(found, MutableMapping):
        raise FaustCompatError(FAUST, f"{STORE}.{DBS}", f"is a {type(found).__name__}")
    return found


def write_batch(store: object, partition: int, items: Iterable[tuple[bytes, bytes]]) -> None:
    """Put ``items`` (encoded keys and values) in ``partition``'s database, one write."""
    batch = rocksdict.WriteBatch(raw_mode=True)
    for k, v in items:
        batch.put(k, v)
    partition_db(store, partition).write(batch)


def estimated_keys(store: object) -> int | None:
    """RocksDB's own estimate of the keys in the open partition databases; None when they
    are not rocksdict's (no cheap count)."""
    total = 0
    for db in partition_dbs(store).values():
        prop = getattr(db, "property_int_value", None)  # rocksdict's; python-rocksdb lacks it
        if prop is None:
            return None
        total += int(prop("rocksdb.estimate-num-keys") or 0)
    return total


def check() -> None:
    annotated(RocksStore, DBS, FAUST)
    method(RocksStore, DB_FOR_PARTITION, ["partition"], FAUST)
    options = f"{qualname(RocksDBOptions)}.as_options"
    source_says(RocksDBOptions.as_options, "Options(raw_mode=True)", FAUST, options)
