"""streams/logs.py: one set-up, text and JSON lines from the same call, the run's fields, no values."""

from __future__ import annotations

import inspect
import io
import json
import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from devkit.procs import timer_worker
from streams import cli, logs
from streams.errors import install_log_redaction
from streams.outbox import __main__ as relay_main
from streams.timer_process import child
from streams.timers import manual

NUMBER_MASK = "45** ****12"
PAYLOAD_CIPHER = "c2VjcmV0LWNpcGhlcg=="


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO, list[str]]]:
    """A logger whose lines go to a buffer in the format the test sets."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger = logging.getLogger(f"test.logs.{uuid.uuid4().hex}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    formats: list[str] = []

    def set_format(name: str) -> None:
        handler.setFormatter(logs.formatter(name))

    set_format("json")
    logger.set_format = set_format  # type: ignore[attr-defined]
    yield logger, out, formats
    logger.removeHandler(handler)


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_an_event_is_a_json_object_with_its_action_and_fields(capture) -> None:  # type: ignore[no-untyped-def]
    logger, out, _ = capture
    rid, eid, tid = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    logs.event(
        logger, logging.INFO, "reminder_sent", reminder_id=rid, event_id=eid,
        offset_minutes=15, tenant_id=tid, at=datetime(2026, 1, 2, 3, 4, tzinfo=UTC),
    )  # fmt: skip
    (line,) = lines(out)
    assert line["action"] == "reminder_sent"
    assert line["reminder_id"] == str(rid) and line["event_id"] == str(eid)
    assert line["offset_minutes"] == 15 and line["tenant_id"] == str(tid)
    assert line["at"] == "2026-01-02T03:04:00Z"
    assert line["level"] == "info" and line["logger"] == logger.name and "ts" in line
    assert "run_id" not in line and "trace_id" not in line


def test_the_same_call_in_text_is_action_then_k_v(capture) -> None:  # type: ignore[no-untyped-def]
    logger, out, _ = capture
    logger.set_format("text")
    logs.event(logger, logging.INFO, "batch_selected", count=3, note="two words")
    text = out.getvalue().strip()
    assert text.endswith(f'INFO {logger.name} action=batch_selected count=3 note="two words"')


def test_an_action_text_line_is_parsed_into_fields_and_other_text_is_a_message(capture) -> None:  # type: ignore[no-untyped-def]
    logger, out, _ = capture
    logger.info("action=cycle_completed run_id=%s sent=%d note=%s", "r1", 2, '"a b"')
    logger.warning("something a library said")
    first, second = lines(out)
    assert first == {
        **first,
        "action": "cycle_completed",
        "run_id": "r1",
        "sent": "2",
        "note": "a b",
    }
    assert second["action"] == "log" and second["message"] == "something a library said"


def test_every_line_of_a_run_carries_its_run_id_and_schedule_and_the_trace_hook(capture) -> None:  # type: ignore[no-untyped-def]
    logger, out, _ = capture

    def inside() -> None:
        logs.event(logger, logging.INFO, "batch_selected", count=1)
        logger.info("plain text")
        token = logs.TRACE_ID.set("t-1")
        try:
            logger.info("action=traced")
        finally:
            logs.TRACE_ID.reset(token)

    logs.bind_run(run_id="run-9", schedule="calendar-dispatch").run(inside)
    logger.info("action=outside")
    a, b, c, d = lines(out)
    for line in (a, b, c):
        assert line["run_id"] == "run-9" and line["schedule"] == "calendar-dispatch"
    assert c["trace_id"] == "t-1" and "trace_id" not in a
    assert "run_id" not in d
    logger.set_format("text")
    out.truncate(0)
    out.seek(0)
    logs.bind_run(run_id="run-9", schedule="s").run(lambda: logger.info("action=x k=1"))
    assert out.getvalue().strip().endswith("action=x k=1 run_id=run-9 schedule=s")


def test_known_document_values_are_in_no_line(capture) -> None:  # type: ignore[no-untyped-def]
    """What the code logs is identifiers; an exception that carries a value is redacted."""
    install_log_redaction()
    logger, out, _ = capture
    for name in logs.FORMATS:
        logger.set_format(name)
        try:
            raise ValueError(f"bad {NUMBER_MASK} {PAYLOAD_CIPHER}")
        except ValueError as exc:
            logs.event(logger, logging.ERROR, "item_failed", error=type(exc).__name__, exc_info=exc)
            logger.exception("action=owner_failed error=%s", exc)
    text = out.getvalue()
    assert "item_failed" in text and "owner_failed" in text
    assert NUMBER_MASK not in text and PAYLOAD_CIPHER not in text


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="LOG_FORMAT"):
        logs.formatter("xml")


def test_configure_replaces_its_own_handler_and_keeps_others() -> None:
    root = logging.getLogger()
    before = list(root.handlers), root.level
    out = io.StringIO()
    try:
        logs.configure("info", "text")
        logs.configure("debug", "json", stream=out, process="timer-process")
        ours = [h for h in root.handlers if h.get_name() == logs.HANDLER_NAME]
        assert len(ours) == 1 and root.level == logging.DEBUG
        others = [h for h in before[0] if h.get_name() != logs.HANDLER_NAME]
        assert all(h in root.handlers for h in others)
        logging.getLogger("streams.test").debug("action=hello")
        (line,) = lines(out)
        assert line["action"] == "hello" and line["process"] == "timer-process"
    finally:
        root.handlers[:] = before[0]
        root.setLevel(before[1])


def test_the_worker_config_is_the_same_formatter() -> None:
    config = logs.dict_config("info", "json")
    formatter = logging.config.DictConfigurator(config).configure_custom(  # type: ignore[attr-defined]
        dict(config["formatters"]["streams"])
    )
    assert isinstance(formatter, logs.JsonFormatter)


def test_every_entry_point_configures_through_the_one_function() -> None:
    """The worker (its app's logging config), every CLI command (streams.cli.main), the
    manual timer run, the timer process and the standalone relay."""
    from streams import app

    assert "logs.configure_from(settings)" in inspect.getsource(cli.main)
    assert "logs.dict_config(" in inspect.getsource(app)
    assert "logs.configure_from(settings)" in inspect.getsource(manual.run_timers)
    assert "logs.configure_from(settings)" in inspect.getsource(relay_main.main)
    assert "logs.configure_from(settings, process=PROCESS)" in inspect.getsource(child.main)
    for module in (cli, app, manual, relay_main, child, timer_worker):
        assert "basicConfig" not in inspect.getsource(module)
    assert "logs.configure(" in inspect.getsource(timer_worker)


def test_log_levels_are_logger_level_pairs_and_a_bad_one_names_the_setting(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from streams.settings import ConfigError, load_settings

    assert logs.parse_levels(" aiokafka=WARNING, streams.outbox=debug,") == {
        "aiokafka": "warning",
        "streams.outbox": "debug",
    }
    for bad in ("aiokafka", "aiokafka=loud", "=info", "a b=info"):
        with pytest.raises(ValueError):
            logs.parse_levels(bad)
        monkeypatch.setenv("LOG_LEVELS", bad)
        with pytest.raises(ConfigError, match="LOG_LEVELS"):
            load_settings()


def test_log_level_debug_is_the_services_debug_and_log_levels_override() -> None:
    root = logging.getLogger()
    before = list(root.handlers), root.level
    names = ("aiokafka", "faust", "asyncpg", "streams.outbox", "streams.timers")
    levels_before = {n: logging.getLogger(n).level for n in names}
    out = io.StringIO()
    try:
        logs.configure("debug", "json", stream=out, levels="faust=warning,streams.outbox=info")
        logging.getLogger("aiokafka.conn").debug("library debug")
        logging.getLogger("aiokafka.conn").info("library info")
        logging.getLogger("faust.worker").info("overridden")
        logging.getLogger("streams.timers").debug("action=ours")
        logging.getLogger("streams.outbox.relay").debug("action=quieted")
        said = [(line["logger"], line.get("message", line["action"])) for line in lines(out)]
        assert said == [("aiokafka.conn", "library info"), ("streams.timers", "ours")]
        # The worker's set-up (Faust's dictConfig) gives the same levels.
        config = logs.dict_config("warning", "text", levels="aiokafka=debug")
        assert config["loggers"]["aiokafka"] == {"level": "DEBUG"}
        assert config["loggers"]["asyncpg"] == {"level": "WARNING"}
    finally:
        root.handlers[:] = before[0]
        root.setLevel(before[1])
        for name, level in levels_before.items():
            logging.getLogger(name).setLevel(level)
