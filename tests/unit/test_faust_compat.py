"""streams/faust_compat against the installed faust-streaming, mode and aiokafka: each accessor
works on the real classes (an app built in memory, no broker), and each fails loudly, naming
the library, its version and the attribute, when an upgrade drops or changes its internal."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

import faust
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.producer.message_accumulator import MessageAccumulator
from aiokafka.producer.sender import Sender
from aiokafka.structs import ConsumerRecord, TopicPartition
from faust import streams as faust_streams
from faust.stores.rocksdb import Store as RocksStore
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types.tuples import Message

from streams import faust_compat
from streams.faust_compat import (
    FaustCompatError,
    abort,
    changelog_producer,
    committed_offsets,
    estimated_keys,
    fetch_loop,
    in_event,
    json_bytes,
    partition_db,
    partition_dbs,
    producer_closed,
    sender_task,
    tables,
    to_message,
    write_batch,
)
from streams.faust_compat import consumer as compat_consumer
from streams.faust_compat import producer as compat_producer
from streams.faust_compat import schema as compat_schema
from streams.faust_compat import stores as compat_stores

FAUST = f"faust-streaming=={version('faust-streaming')}"
MODE = f"mode-streaming=={version('mode-streaming')}"
AIOKAFKA = f"aiokafka=={version('aiokafka')}"


def loud(library: str, attribute: str) -> Any:
    """pytest.raises for the error naming ``library`` (with its version) and ``attribute``."""
    return pytest.raises(FaustCompatError, match=rf"^{library}: \S*{attribute}\b")


def drop_annotation(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> None:
    """An upgrade that no longer declares the instance attribute ``name``."""
    annotations = {k: v for k, v in vars(cls)["__annotations__"].items() if k != name}
    monkeypatch.setattr(cls, "__annotations__", annotations)


@pytest.fixture
async def app() -> AsyncIterator[faust.App]:
    app = faust.App("faust-compat", broker="kafka://127.0.0.1:9", autodiscover=False)
    yield app
    # The aiokafka driver's consumer made an event loop for its thread, never started.
    thread = getattr(app._consumer, "_thread", None)  # type: ignore[attr-defined]
    if thread is not None:
        thread.thread_loop.close()


@pytest.fixture
async def kafka_producer() -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9")  # never started
    yield producer
    await producer.stop()


@pytest.fixture
def rocks_store(tmp_path: Path) -> Iterator[Any]:
    app = faust.App("faust-compat", store="rocksdb://", datadir=str(tmp_path), autodiscover=False)
    schema = faust.Schema(key_serializer="json", value_serializer="json")
    table = app.Table("t", default=None, partitions=2, schema=schema)
    store = table.data
    assert compat_stores.is_rocksdict_store(store)
    yield store
    for db in store._dbs.values():
        db.close()


def record(offset: int) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="in", partition=0, offset=offset, timestamp=1000, timestamp_type=0,
        key=b"k", value=b"v", checksum=None, serialized_key_size=1, serialized_value_size=1,
        headers=[],
    )  # fmt: skip


def test_the_installed_versions_pass_the_check() -> None:
    faust_compat.check()


def test_the_check_fails_when_any_internal_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(Sender, "sender_task")
    with loud(AIOKAFKA, "sender_task"):
        faust_compat.check()


def test_a_worker_is_not_built_on_an_upgraded_faust(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from streams.app import create_worker
    from streams.settings import Settings

    drop_annotation(monkeypatch, faust_consumer.Consumer, "_committed_offset")
    with loud(FAUST, "_committed_offset"):
        create_worker(Settings(worker_data_dir=tmp_path))


def test_the_error_names_library_version_and_attribute() -> None:
    exc = FaustCompatError("faust-streaming", "Consumer._x", "is missing")
    assert exc.version == version("faust-streaming")
    assert str(exc).startswith(f"{FAUST}: Consumer._x is missing")


async def test_committed_offsets_are_the_consumers_own_mapping(app: faust.App) -> None:
    consumer = app.consumer
    tp = TopicPartition("in", 0)
    assert committed_offsets(consumer).get(tp) is None
    consumer._committed_offset[tp] = 41  # type: ignore[attr-defined]
    assert committed_offsets(consumer)[tp] == 41


async def test_committed_offsets_raise_when_the_attribute_is_gone(
    app: faust.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    consumer = app.consumer
    monkeypatch.delattr(consumer, "_committed_offset")
    with loud(FAUST, "_committed_offset"):
        committed_offsets(consumer)
    monkeypatch.setattr(consumer, "_committed_offset", [], raising=False)
    with loud(FAUST, "_committed_offset"):
        committed_offsets(consumer)


def test_the_check_sees_committed_offsets_undeclared(monkeypatch: pytest.MonkeyPatch) -> None:
    drop_annotation(monkeypatch, faust_consumer.Consumer, "_committed_offset")
    with loud(FAUST, "_committed_offset"):
        compat_consumer.check()


async def test_to_message_makes_the_faust_message_of_a_record(app: faust.App) -> None:
    tp = TopicPartition("in", 0)
    message = to_message(app.consumer, tp, record(7))
    assert isinstance(message, Message)
    assert (message.tp, message.offset, message.key, message.value) == (tp, 7, b"k", b"v")


async def test_to_message_raises_when_the_driver_no_longer_defines_it(
    app: faust.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    consumer = app.consumer
    # Only the base class's abstract stub is left (it returns None).
    monkeypatch.delattr(faust_aiokafka.Consumer, "_to_message")
    with loud(FAUST, "_to_message"):
        to_message(consumer, TopicPartition("in", 0), record(7))
    with loud(FAUST, "_to_message"):
        compat_consumer.check()
    monkeypatch.delattr(faust_consumer.Consumer, "_to_message")
    with loud(FAUST, "_to_message"):
        to_message(consumer, TopicPartition("in", 0), record(7))


def test_the_fetch_loop_copies_are_of_the_installed_faust() -> None:
    fetch_loop.check()


@pytest.mark.parametrize("name", ["_drain_messages", "_wait_next_records"])
def test_a_changed_faust_loop_fails_the_check_and_the_install(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    async def changed(self: Any, *args: Any) -> None:
        return None

    monkeypatch.setattr(faust_consumer.Consumer, name, changed)
    with loud(FAUST, name):
        fetch_loop.check()
    with loud(FAUST, name):
        fetch_loop.install()
    assert faust_consumer.Consumer._drain_messages is not fetch_loop.drain_messages
    assert vars(faust_consumer.Consumer)[name] is changed  # nothing was replaced


@pytest.mark.parametrize(
    ("cls", "name", "library"),
    [
        (faust_consumer.Consumer, "_add_gap", FAUST),
        (faust_consumer.Consumer, "_getmany", FAUST),
        (faust_consumer.Consumer, "_get_active_partitions", FAUST),
        (faust_consumer.Consumer, "_drain_messages", FAUST),
    ],
)
def test_a_method_the_loop_uses_gone_fails_the_check(
    monkeypatch: pytest.MonkeyPatch, cls: type, name: str, library: str
) -> None:
    monkeypatch.delattr(cls, name)
    with loud(library, name):
        fetch_loop.check()


@pytest.mark.parametrize(
    ("cls", "name", "library"),
    [
        (faust_consumer.Consumer, "_read_offset", FAUST),
        (faust_consumer.Consumer, "_commit_every", FAUST),
        (faust_consumer.Consumer, "_n_acked", FAUST),
        (faust.Service, "_stopped", MODE),
    ],
)
def test_an_attribute_the_loop_uses_undeclared_fails_the_check(
    monkeypatch: pytest.MonkeyPatch, cls: type, name: str, library: str
) -> None:
    drop_annotation(monkeypatch, cls, name)
    with loud(library, name):
        fetch_loop.check()


def test_install_replaces_the_three_methods_once(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = faust_consumer.Consumer
    faust_own = {name: vars(consumer)[name] for name in fetch_loop.OURS}
    for name, method in faust_own.items():  # put back when the test ends
        monkeypatch.setattr(consumer, name, method)
    monkeypatch.setattr(fetch_loop, "_replaced", {})
    fetch_loop.install()
    fetch_loop.install()  # idempotent: the originals are still Faust's
    assert {name: vars(consumer)[name] for name in fetch_loop.OURS} == fetch_loop.OURS
    assert fetch_loop._replaced == faust_own
    fetch_loop.check()  # reads the replaced originals, not ours


def test_the_store_accessors_read_and_write_partition_databases(rocks_store: Any) -> None:
    write_batch(rocks_store, 1, [(json_bytes("k"), json_bytes({"v": 1}))])
    assert partition_db(rocks_store, 1).get(json_bytes("k")) == b'{"v":1}'
    assert partition_db(rocks_store, 0).get(json_bytes("k")) is None
    assert set(partition_dbs(rocks_store)) == {0, 1}
    assert estimated_keys(rocks_store) == 1


def test_the_store_accessors_raise_when_the_internals_are_gone(
    rocks_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(RocksStore, "_db_for_partition")
    with loud(FAUST, "_db_for_partition"):
        partition_db(rocks_store, 0)
    with loud(FAUST, "_db_for_partition"):
        write_batch(rocks_store, 0, [(b"k", b"v")])
    with loud(FAUST, "_db_for_partition"):
        compat_stores.check()
    dbs = rocks_store._dbs
    monkeypatch.delattr(rocks_store, "_dbs")
    with loud(FAUST, "_dbs"):
        partition_dbs(rocks_store)
    with loud(FAUST, "_dbs"):
        estimated_keys(rocks_store)
    rocks_store._dbs = dbs  # the fixture closes them


def test_the_store_check_sees_dbs_undeclared_and_a_non_raw_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drop_annotation(monkeypatch, RocksStore, "_dbs")
    with loud(FAUST, "_dbs"):
        compat_stores.check()
    monkeypatch.undo()

    def as_options(self: Any) -> Any:
        return None  # databases no longer opened in raw mode

    monkeypatch.setattr(compat_stores.RocksDBOptions, "as_options", as_options)
    with loud(FAUST, "as_options"):
        compat_stores.check()


async def test_in_event_makes_the_event_current_for_faust(app: faust.App) -> None:
    message = to_message(app.consumer, TopicPartition("in", 0), record(7))
    event = app.create_event(message.key, message.value, message.headers, message)
    assert faust_streams.current_event() is None
    with in_event(event):
        assert faust_streams.current_event() is event
    assert faust_streams.current_event() is None


def test_in_event_raises_when_faust_renames_the_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(faust_streams, "_current_event")
    with loud(FAUST, "_current_event"), in_event(cast(Any, None)):
        pass
    with loud(FAUST, "_current_event"):
        tables.check()


def test_the_table_check_sees_a_codec_that_encodes_differently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tables.check()
    monkeypatch.setattr(tables, "_encode_json", lambda obj: str(obj))  # e.g. orjson's output
    with loud(FAUST, "the json codec"):
        tables.check()


async def test_changelog_producer_is_the_aiokafka_producer_faust_started(
    app: faust.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = app.producer
    inner = producer._new_producer()  # type: ignore[attr-defined]  # what Faust's start makes
    producer._producer = inner  # type: ignore[attr-defined]
    try:
        assert changelog_producer(producer) is inner
        monkeypatch.delattr(faust_aiokafka.Producer, "_ensure_producer")
        with loud(FAUST, "_ensure_producer"):
            changelog_producer(producer)
        with loud(FAUST, "_ensure_producer"):
            tables.check()
    finally:
        await inner.stop()


async def test_producer_state_reads_closed_and_the_sender_task(
    kafka_producer: AIOKafkaProducer,
) -> None:
    assert producer_closed(kafka_producer) is False
    assert sender_task(kafka_producer) is None  # not started
    await kafka_producer.stop()
    assert producer_closed(kafka_producer) is True


async def test_producer_state_raises_when_the_internals_are_gone(
    kafka_producer: AIOKafkaProducer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(Sender, "sender_task")
    with loud(AIOKAFKA, "sender_task"):
        sender_task(kafka_producer)
    with loud(AIOKAFKA, "sender_task"):
        compat_producer.check()
    monkeypatch.delattr(kafka_producer, "_sender")
    with loud(AIOKAFKA, "_sender"):
        sender_task(kafka_producer)
    with loud(AIOKAFKA, "_sender"):
        await abort(kafka_producer, RuntimeError("gave up"))
    monkeypatch.delattr(kafka_producer, "_closed")
    monkeypatch.delattr(AIOKafkaProducer, "_closed")  # its class default too
    with loud(AIOKAFKA, "_closed"):
        producer_closed(kafka_producer)
    monkeypatch.undo()  # the fixture stops it


async def test_abort_fails_what_the_producer_holds_and_closes_it(
    kafka_producer: AIOKafkaProducer,
) -> None:
    await abort(kafka_producer, RuntimeError("gave up"))
    assert producer_closed(kafka_producer) is True


def test_the_producer_check_sees_an_attribute_no_longer_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = inspect.getsource(AIOKafkaProducer.__init__).replace("self._closed =", "self._shut =")
    real = inspect.getsource
    monkeypatch.setattr(
        inspect, "getsource", lambda f: source if f is AIOKafkaProducer.__init__ else real(f)
    )
    with loud(AIOKAFKA, "_closed"):
        compat_producer.check()
    monkeypatch.undo()
    monkeypatch.delattr(MessageAccumulator, "fail_all")
    with loud(AIOKAFKA, "fail_all"):
        compat_producer.check()


def test_the_schema_check_sees_a_changed_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    compat_schema.check()

    def compile(self: Any, app: Any, *, on_decode_error: Any = None) -> Any:
        return None

    monkeypatch.setattr(faust.Schema, "compile", compile)
    with loud(FAUST, "compile"):
        compat_schema.check()
