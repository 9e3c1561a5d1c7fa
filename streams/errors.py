"""Value-free descriptions of errors: what is stored, shown or logged about an exception.

An exception's own text is not safe to keep: asyncpg appends the server's DETAIL
(``Key (id)=(…) already exists``, ``Failing row contains (…)``) and some messages quote
the offending value (``invalid input syntax for type uuid: "…"``); pydantic's messages
carry ``input_value=…``; a JSON decode error quotes the document. So a description is
built from a whitelist, never by cleaning the text: the class name, the SQLSTATE, schema
identifiers the driver reports (constraint, table, column), an errno name, and the
message only of our own exceptions (``SafeMessage``), whose texts we write value-free.

``install_log_redaction`` applies the same rule to every log record of the process (ours
and the libraries'): exceptions passed as arguments are replaced by their description and
tracebacks keep their frames but describe each exception instead of printing its text; an
uncaught exception (main thread or another) is printed the same way.
"""

from __future__ import annotations

import errno
import functools
import logging
import re
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

MAX_CHARS = 300

# Identifiers the driver reports next to the SQLSTATE: names of our schema, not row values.
_IDENTIFIERS = ("schema_name", "table_name", "column_name", "constraint_name")
_SQLSTATE = re.compile(r"^[0-9A-Z]{5}$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$.]{0,62}$")


class SafeMessage:
    """Mixin of an exception whose message this project writes from value-free words (no
    row value, no input, no driver text): ``describe`` keeps that message."""


def sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) and _SQLSTATE.match(state) else None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def describe(exc: BaseException) -> str:
    """One value-free line about ``exc``: class, SQLSTATE and safe identifiers, or our own
    message; never the driver's, pydantic's or a parser's text."""
    parts = [type(exc).__name__]
    state = sqlstate(exc)
    if state is not None:
        parts.append(f"[{state}]")
    if isinstance(exc, SafeMessage):
        text = _one_line(str(exc))
        if text:
            parts[-1] += ":"
            parts.append(text)
        return " ".join(parts)[:MAX_CHARS]
    names = []
    for attr in _IDENTIFIERS:
        value = getattr(exc, attr, None)
        if isinstance(value, str) and _IDENTIFIER.match(value):
            names.append(f"{attr.removesuffix('_name')}={value}")
    parts += names
    code = getattr(exc, "errno", None) if isinstance(exc, OSError) else None
    if isinstance(code, int) and code in errno.errorcode:
        parts.append(errno.errorcode[code])
    return " ".join(parts)[:MAX_CHARS]


def _chain(exc: BaseException) -> list[tuple[BaseException, str | None]]:
    """The exception and its causes, oldest first, each with the link ("cause" or
    "context") that leads from it to the next one (None for the last)."""
    newest_first: list[tuple[BaseException, str | None]] = []
    seen: set[int] = set()
    link: str | None = None
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        newest_first.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, "cause"
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, "context"
        else:
            current = None
    return newest_first[::-1]


_LINKS = {
    "cause": "\nThe above exception was the direct cause of the following exception:\n\n",
    "context": "\nDuring handling of the above exception, another exception occurred:\n\n",
}


def safe_traceback(exc: BaseException) -> str:
    """A traceback as Python prints it (frames and source lines), each exception described
    by ``describe`` instead of its message."""
    parts: list[str] = []
    for item, link in _chain(exc):
        if item.__traceback__ is not None:
            parts.append("Traceback (most recent call last):\n")
            parts.extend(traceback.format_tb(item.__traceback__))
        parts.append(describe(item) + "\n")
        if link is not None:
            parts.append(_LINKS[link])
    return "".join(parts).rstrip("\n")


def _safe_arg(value: object) -> object:
    return describe(value) if isinstance(value, BaseException) else value


def _safe_message(record: logging.LogRecord) -> str:
    """``LogRecord.getMessage`` with every exception (the message, an argument) described."""
    msg = str(_safe_arg(record.msg))
    args = record.args
    if isinstance(args, tuple):
        args = tuple(_safe_arg(a) for a in args)
    elif isinstance(args, dict):
        args = {k: _safe_arg(v) for k, v in args.items()}
    return msg % args if args else msg


def _carries_exception(record: logging.LogRecord) -> bool:
    args = record.args
    values = args.values() if isinstance(args, dict) else args or ()
    return isinstance(record.msg, BaseException) or any(
        isinstance(v, BaseException) for v in values
    )


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """The record formatted value-free: exceptions in its message or arguments are described
    and its traceback is too. ``args`` keep the exceptions themselves, for handlers that
    read them (streams/startup_wait.py tells a refused Kafka login from aiokafka's records)."""
    if _carries_exception(record):
        # An instance attribute: formatters call record.getMessage(), this one.
        record.getMessage = functools.partial(_safe_message, record)  # type: ignore[method-assign]
    info = record.exc_info
    if info and isinstance(info, tuple) and isinstance(info[1], BaseException):
        # The formatter prints exc_text when it is set, and only formats exc_info otherwise.
        record.exc_text = safe_traceback(info[1])
    return record


_installed: Callable[..., logging.LogRecord] | None = None


def install_log_redaction() -> None:
    """Make every log record of this process value-free (idempotent). Called by every entry
    point (worker, timer process, relay, CLIs) before anything logs."""
    global _installed
    if _installed is not None:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return redact_record(previous(*args, **kwargs))

    _installed = factory
    logging.setLogRecordFactory(factory)
    sys.excepthook = _print_uncaught
    threading.excepthook = _print_uncaught_in_thread


def _print_uncaught(kind: type[BaseException], exc: BaseException, tb: object) -> None:
    sys.stderr.write(safe_traceback(exc) + "\n")


def _print_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is not None and not isinstance(args.exc_value, SystemExit):
        name = args.thread.name if args.thread is not None else "?"
        sys.stderr.write(f"Exception in thread {name}:\n{safe_traceback(args.exc_value)}\n")
