"""Slices: one folder per product capability (calendar reminders, automation, document expiry),
each declaring ``SLICE = Slice(...)`` in its ``__init__.py`` (streams/slices/slice.py). ``SLICES``
is the one list of them: the contract catalogue, topic creation, the worker, the timer process,
``timers run``, the demo, the CLI and ``explain`` all iterate over it.

Adding a slice: see "Adding a slice" in docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic_settings import BaseSettings

from streams.contracts import TopicContract
from streams.slices.automation import SLICE as AUTOMATION
from streams.slices.calendar import SLICE as CALENDAR
from streams.slices.profile import SLICE as PROFILE
from streams.slices.slice import Slice, TimerContext, install_streams, install_timers

if TYPE_CHECKING:
    from streams.slices.context import SliceContext

# The installed slices, in installation order (their schedules, agents and status sections
# are registered in this order).
SLICES: tuple[Slice, ...] = (CALENDAR, AUTOMATION, PROFILE)


def declared(names: Sequence[str] | None = None) -> tuple[Slice, ...]:
    """The declared slices (read at each call), or those of ``names`` in that order."""
    if names is None:
        return SLICES
    by_name = {s.name: s for s in SLICES}
    return tuple(by_name[name] for name in names)


def names() -> tuple[str, ...]:
    return tuple(s.name for s in declared())


def catalogue() -> tuple[TopicContract[Any], ...]:
    """Every contract topic of the service: what the slices consume ("in") and produce
    through the outbox ("out"), each once."""
    found: dict[str, TopicContract[Any]] = {}
    for s in declared():
        for contract in s.contracts:
            found.setdefault(contract.name, contract)
    return tuple(found.values())


def internal_topics(names: Sequence[str] | None = None) -> list[TopicContract[Any]]:
    """The internal topics the slices declare, so that ``python -m streams topics`` creates
    them with the contract topics."""
    return [t for s in declared(names) for t in s.internal_topics]


def settings_classes(names: Sequence[str] | None = None) -> list[type[BaseSettings]]:
    """The slices' settings classes, which ``load_settings`` validates at startup."""
    return [s.settings for s in declared(names) if s.settings is not None]


def install_all(ctx: SliceContext, names: Sequence[str] | None = None) -> TimerContext:
    """Install the slices' timers and stream parts on a worker's context."""
    slices = declared(names)
    timers = TimerContext(ctx.runtime, ctx.registry, ctx.status_sections, ctx.on_started)
    install_timers(slices, timers)
    install_streams(slices, ctx, timers)
    return timers


__all__ = [
    "SLICES",
    "Slice",
    "TimerContext",
    "catalogue",
    "declared",
    "install_all",
    "internal_topics",
    "names",
    "settings_classes",
]
