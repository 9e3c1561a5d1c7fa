"""The value-free description of an error: our own messages kept, any other text dropped,
tracebacks and log records rewritten the same way (pure; the driver's real errors are in
tests/integration/test_error_descriptions.py)."""

from __future__ import annotations

import inspect
import logging
import os
import subprocess
import sys
import textwrap

from streams.errors import SafeMessage, describe, redact_record, safe_traceback
from streams.outbox import __main__ as relay_main
from streams.timer_process import child

SECRET = "secret-4711"


class Ours(SafeMessage, Exception):
    pass


def test_our_own_words_are_kept_and_any_other_text_is_not() -> None:
    assert describe(Ours("no acknowledgement\nwithin 10s")) == "Ours: no acknowledgement within 10s"
    assert describe(RuntimeError(SECRET)) == "RuntimeError"
    assert describe(ValueError()) == "ValueError"
    assert len(describe(Ours("x" * 1000))) == 300


def test_a_sqlstate_and_identifiers_are_kept_only_when_they_look_like_them() -> None:
    exc = RuntimeError(SECRET)
    exc.sqlstate = "23505"  # type: ignore[attr-defined]
    exc.constraint_name = "ix_unique"  # type: ignore[attr-defined]
    exc.table_name = f"t {SECRET}"  # type: ignore[attr-defined]
    assert describe(exc) == "RuntimeError [23505] constraint=ix_unique"
    exc.sqlstate = SECRET  # type: ignore[attr-defined]
    assert describe(exc) == "RuntimeError constraint=ix_unique"


def test_a_traceback_keeps_the_chain_and_frames_but_no_message() -> None:
    def fail() -> None:
        try:
            raise KeyError(SECRET)
        except KeyError as e:
            raise Ours("translated") from e

    try:
        try:
            fail()
        except Ours:
            raise ValueError(SECRET) from None
    except ValueError as outer:
        plain = safe_traceback(outer)
        assert plain.startswith("Traceback") and plain.endswith("ValueError")
        assert SECRET not in plain
    try:
        fail()
    except Ours as exc:
        text = safe_traceback(exc)
    assert SECRET not in text
    assert text.index("KeyError") < text.index("direct cause") < text.index("Ours: translated")
    assert "raise KeyError(SECRET)" in text  # the source line, not the value


def test_log_records_lose_exception_text_in_arguments_messages_and_tracebacks() -> None:
    exc = RuntimeError(SECRET)
    f = logging.Formatter()
    for record in [
        logging.LogRecord("t", logging.ERROR, __file__, 1, "e=%s %r", (exc, exc), None),
        logging.LogRecord("t", logging.ERROR, __file__, 1, "e=%(e)s", ({"e": exc},), None),
        logging.LogRecord("t", logging.ERROR, __file__, 1, exc, (), None),
        logging.LogRecord("t", logging.ERROR, __file__, 1, "x", (), (RuntimeError, exc, None)),
    ]:
        text = f.format(redact_record(record))
        assert SECRET not in text and "RuntimeError" in text


def test_an_uncaught_exception_prints_without_its_message() -> None:
    code = textwrap.dedent(
        """
        import os, threading
        from streams.errors import install_log_redaction
        install_log_redaction()
        secret = os.environ["THE_SECRET"]
        t = threading.Thread(target=lambda: (_ for _ in ()).throw(KeyError(secret)))
        t.start(); t.join()
        raise RuntimeError(secret)
        """
    )
    # The secret from the environment, not the source: Python 3.13 prints the source lines
    # of ``-c`` code in tracebacks, which would show it whatever the redaction does.
    env = {**os.environ, "THE_SECRET": SECRET}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env
    )
    assert done.returncode == 1
    assert "KeyError" in done.stderr and done.stderr.rstrip().endswith("RuntimeError")
    assert SECRET not in done.stderr


def test_every_entry_point_installs_the_redaction_before_it_runs() -> None:
    """The worker and every command go through streams.cli.main; the timer process and the
    standalone relay have their own mains (checked by their source)."""
    code = textwrap.dedent(
        """
        import logging, sys
        import streams.errors as errors
        import os
        from streams.cli import main
        os.environ["WEB_PORT"] = "not-a-port"  # the command stops at its settings
        main(["migrate"])
        print(errors._installed is logging.getLogRecordFactory() and sys.excepthook is errors._print_uncaught)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "True", done.stderr
    for module in (relay_main, child):
        source = inspect.getsource(module.main)
        assert source.index("install_log_redaction()") < source.index("logs.configure_from"), module


def test_a_handler_that_reads_the_arguments_still_gets_the_exception() -> None:
    """streams/startup_wait.py's _ConnectErrors tells a refused Kafka login from aiokafka's records."""
    exc = ConnectionError(SECRET)
    record = redact_record(
        logging.LogRecord("aiokafka", logging.ERROR, __file__, 1, "failed: %s", (exc,), None)
    )
    assert record.args == (exc,)
    assert record.getMessage() == "failed: ConnectionError"
