"""One logging set-up for every process (worker, timer process, relay, CLIs): text or JSON lines.

Every line of the service comes from one call, ``event(logger, level, action, **fields)``, in
either format: ``LOG_FORMAT=text`` renders ``<time> <level> <logger> action=x k=v ...``,
``LOG_FORMAT=json`` one JSON object per line with ``action`` and each field as a key. The
run id and schedule of a timer run come from a context variable the registry sets for the
run's task (``bind_run``), so every line a handler writes carries them without passing them
down; ``trace_id`` is the same kind of hook (``TRACE_ID``), absent from a line while unset.

The standard library, not structlog: Faust, mode and aiokafka log through ``logging``, so
their lines reach the same handler and formatter; no new dependency; and a record's
``extra`` fields are enough structure for what the seeds ask.
"""

from __future__ import annotations

import contextvars
import json
import logging
import logging.config
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, TextIO

FORMATS: Final = ("text", "json")
LEVELS: Final = ("debug", "info", "warning", "error")
# The libraries whose debug lines are theirs, not the service's: with LOG_LEVEL=debug they
# stay at info (a worker's aiokafka alone writes thousands of debug lines a minute) unless
# LOG_LEVELS names them (``LOG_LEVELS=aiokafka=debug``).
LIBRARIES: Final = (
    "faust",
    "mode",
    "aiokafka",
    "kafka",
    "asyncpg",
    "aiohttp",
)

# The fields of the timer run the current task belongs to (run_id, schedule), set by the
# registry's executor for the handler's task only.
RUN: contextvars.ContextVar[Mapping[str, object] | None] = contextvars.ContextVar(
    "streams_log_run", default=None
)
# Tracing's hook: set it (e.g. from a span) and every line of the task carries trace_id.
TRACE_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "streams_log_trace_id", default=None
)

# The attribute an ``event`` record keeps its action and fields under.
FIELDS_ATTR = "streams_fields"

# The name of the root handler ``configure`` adds (so a second call replaces it).
HANDLER_NAME = "streams"

_TEXT_PREFIX = "%(asctime)s %(levelname)s %(name)s "
# ``k=v`` pairs of a line written as ``action=... k=v`` text (values as fmt() writes them).
_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_.]*)=("(?:[^"\\]|\\.)*"|\S*)')


def fmt(value: object) -> str:
    """One value as it appears after ``key=``: ``-`` for None, UTC ISO instants, quoted text."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, float):
        return repr(round(value, 3))
    text = str(value)
    if not text or any(c in text for c in ' ="'):
        return json.dumps(text)
    return text


def _iso(when: datetime) -> str:
    """ISO 8601 in UTC with a ``Z`` (a naive instant is taken as UTC)."""
    aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat().replace("+00:00", "Z")


def event(logger: logging.Logger, level: int, action: str, **fields: object) -> None:
    """Log ``action=<action> k=v ...`` with the fields kept structured for the JSON format
    (numbers stay numbers, None is null); an exception given as a field is written as its
    value-free description (streams/errors.py's ``describe``), and ``exc_info`` (an exception,
    or True for the one being handled) is attached, not formatted. Nothing is built when the
    level is off."""
    if not logger.isEnabledFor(level):
        return
    from streams.errors import describe

    exc = fields.pop("exc_info", None)
    if exc is True:
        exc = sys.exc_info()[1]
    for key, value in fields.items():
        if isinstance(value, BaseException):
            fields[key] = describe(value)
    parts = [f"action={action}", *(f"{k}={fmt(v)}" for k, v in fields.items())]
    logger.log(
        level,
        " ".join(parts),
        exc_info=exc if isinstance(exc, BaseException) else None,
        extra={FIELDS_ATTR: {"action": action, **fields}},
        stacklevel=2,
    )


def bind_run(**fields: object) -> contextvars.Context:
    """A copy of the current context in which every line carries ``fields`` (run_id,
    schedule): the context to create a run's task in."""
    ctx = contextvars.copy_context()
    ctx.run(RUN.set, dict(fields))
    return ctx


def _context_fields() -> dict[str, object]:
    out: dict[str, object] = dict(RUN.get() or {})
    trace = TRACE_ID.get()
    if trace is not None:
        out["trace_id"] = trace
    return out


def _parsed(message: str) -> dict[str, object] | None:
    """The fields of a line written as ``action=x k=v`` text (None for any other text)."""
    if not message.startswith("action="):
        return None
    head, _, rest = message.partition("\n")
    out: dict[str, object] = {}
    for key, raw in _PAIR.findall(head):
        if raw.startswith('"'):
            try:
                out[key] = json.loads(raw)
                continue
            except ValueError:
                pass
        out[key] = None if raw == "-" else raw
    if rest:
        out["detail"] = rest
    return out


class TextFormatter(logging.Formatter):
    """``<time> <level> <logger> <message>`` plus the run's fields the message lacks."""

    def __init__(self, process: str | None = None) -> None:
        tag = f"[{process}] " if process else ""
        super().__init__(_TEXT_PREFIX + tag + "%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = _context_fields()
        if not extra:
            return line
        fields: Mapping[str, object] = getattr(record, FIELDS_ATTR, None) or {}
        message = record.getMessage()
        missing = [
            f"{k}={fmt(v)}" for k, v in extra.items() if k not in fields and f"{k}=" not in message
        ]
        if not missing:
            return line
        first, nl, rest = line.partition("\n")
        return f"{first} {' '.join(missing)}{nl}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, action, the line's fields, the run's
    fields, ``exc`` for a traceback. A line not written as ``action=...`` (a library's) gets
    ``action: "log"`` and its text as ``message``."""

    def __init__(self, process: str | None = None) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if self.process:
            out["process"] = self.process
        fields: Mapping[str, object] | None = getattr(record, FIELDS_ATTR, None)
        if fields is None:
            message = record.getMessage()
            fields = _parsed(message)
            if fields is None:
                fields = {"action": "log", "message": message}
        out.update(fields)
        for key, value in _context_fields().items():
            out.setdefault(key, value)
        if record.exc_info:
            out["exc"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(out, default=_json_default, ensure_ascii=False)


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return _iso(value)
    return str(value)


def formatter(log_format: str, process: str | None = None) -> logging.Formatter:
    """The formatter of ``LOG_FORMAT`` (``text`` or ``json``); ``process`` names a helper
    process on each of its lines (``[timer-process]`` in text, ``"process"`` in JSON)."""
    if log_format == "json":
        return JsonFormatter(process)
    if log_format == "text":
        return TextFormatter(process)
    raise ValueError(f"LOG_FORMAT must be one of {', '.join(FORMATS)}, got {log_format!r}")


def parse_levels(text: str) -> dict[str, str]:
    """``LOG_LEVELS``: ``logger=level`` pairs separated by commas (``aiokafka=warning,
    streams.outbox=debug``), each level one of LEVELS; ValueError naming the bad pair."""
    out: dict[str, str] = {}
    for pair in text.split(","):
        if not pair.strip():
            continue
        name, eq, level = (part.strip() for part in pair.partition("="))
        if not eq or not name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name):
            raise ValueError(f"{pair.strip()!r} is not logger=level (e.g. aiokafka=warning)")
        if level.lower() not in LEVELS:
            raise ValueError(f"{pair.strip()!r}: the level must be one of {', '.join(LEVELS)}")
        out[name] = level.lower()
    return out


def logger_levels(level: str, overrides: Mapping[str, str] | str = "") -> dict[str, str]:
    """The level of each named logger: the libraries' at ``level`` but never below info, then
    ``overrides`` (LOG_LEVELS, parsed or as text). Every other logger, the service's own
    (``streams.*``, ``db.*``), follows the root logger, at ``level`` (LOG_LEVEL)."""
    floor = level.lower() if LEVELS.index(level.lower()) >= LEVELS.index("info") else "info"
    given = parse_levels(overrides) if isinstance(overrides, str) else dict(overrides)
    return {**dict.fromkeys(LIBRARIES, floor), **given}


def dict_config(
    level: str,
    log_format: str,
    process: str | None = None,
    levels: Mapping[str, str] | str = "",
) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of ``configure`` (Faust's worker applies it when it
    sets up logging: ``logging_config`` of the app)."""
    formatter(log_format)  # validates
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "streams": {"()": f"{__name__}.formatter", "log_format": log_format, "process": process}
        },
        "handlers": {
            HANDLER_NAME: {
                "class": "logging.StreamHandler",
                "formatter": "streams",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level.upper(), "handlers": [HANDLER_NAME]},
        "loggers": {
            name: {"level": named.upper()} for name, named in logger_levels(level, levels).items()
        },
    }


def configure(
    level: str,
    log_format: str,
    *,
    stream: TextIO | None = None,
    process: str | None = None,
    levels: Mapping[str, str] | str = "",
) -> None:
    """Configure this process's logging: one handler on the root logger writing ``log_format``
    lines to ``stream`` (stderr) at ``level``, in place of the one an earlier call added
    (other handlers stay), and the named loggers' levels (``logger_levels``: the libraries',
    LOG_LEVELS). Every entry point calls it; the worker's Faust applies the same set-up again
    (``dict_config``) when it sets up logging."""
    from streams.errors import install_log_redaction

    install_log_redaction()
    for name, named in logger_levels(level, levels).items():
        logging.getLogger(name).setLevel(named.upper())
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(log_format, process))
    handler.set_name(HANDLER_NAME)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def configure_from(
    settings: Any, *, stream: TextIO | None = None, process: str | None = None
) -> None:
    """``configure`` with the settings' LOG_LEVEL, LOG_FORMAT and LOG_LEVELS."""
    configure(
        settings.log_level,
        settings.log_format,
        stream=stream,
        process=process,
        levels=settings.log_levels,
    )
