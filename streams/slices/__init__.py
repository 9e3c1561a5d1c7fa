"""Slices: one folder per product capability (calendar reminders, document expiry, automation),
each installing its own topics, agents, tables, schedules, metrics and status sections
through ``SliceContext``. The worker installs every slice listed in ``SLICES``.

Adding a slice: see "Adding a slice" in docs/architecture.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from streams.contracts import TopicContract
from streams.slices.context import SliceContext

# The installed slices, in installation order: streams/slices/<name>/__init__.py has install().
SLICES: tuple[str, ...] = ("calendar", "automation", "profile")


def load(names: Sequence[str] = SLICES) -> list[ModuleType]:
    return [importlib.import_module(f"streams.slices.{name}") for name in names]


def internal_topics(names: Sequence[str] = SLICES) -> list[TopicContract[Any]]:
    """The internal topics the slices declare (``INTERNAL_TOPICS`` in their package), so that
    ``python -m streams topics`` creates them with the contract topics."""
    found: list[TopicContract[Any]] = []
    for module in load(names):
        found.extend(getattr(module, "INTERNAL_TOPICS", ()))
    return found


def install_all(ctx: SliceContext, names: Sequence[str] = SLICES) -> None:
    for module in load(names):
        install: Callable[[SliceContext], None] = module.install
        install(ctx)


__all__ = ["SLICES", "SliceContext", "install_all", "internal_topics", "load"]
