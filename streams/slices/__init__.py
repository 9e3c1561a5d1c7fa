"""Slices: one folder per product capability (calendar reminders, document expiry, automation),
each installing its own topics, agents, tables, schedules, metrics and status sections
through ``SliceContext``, with its settings class in its ``settings`` module. The worker
installs every slice listed in ``SLICES``.

Adding a slice: see "Adding a slice" in docs/architecture.md.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from pydantic_settings import BaseSettings

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


def settings_classes(names: Sequence[str] = SLICES) -> list[type[BaseSettings]]:
    """The slices' settings classes (``SETTINGS`` in streams/slices/<name>/settings.py, for a
    slice that has one), which ``load_settings`` validates at startup."""
    found: list[type[BaseSettings]] = []
    for name in names:
        module = f"streams.slices.{name}.settings"
        if importlib.util.find_spec(module) is not None:
            found.append(importlib.import_module(module).SETTINGS)
    return found


def install_all(ctx: SliceContext, names: Sequence[str] = SLICES) -> None:
    for module in load(names):
        install: Callable[[SliceContext], None] = module.install
        install(ctx)


__all__ = [
    "SLICES",
    "SliceContext",
    "install_all",
    "internal_topics",
    "load",
    "settings_classes",
]
