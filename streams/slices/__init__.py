"""Slices: one folder per product capability (calendar reminders, document expiry, automation),
each installing its own topics, agents, tables, schedules, metrics and status sections
through ``SliceContext``. The worker installs every slice listed in ``SLICES``.

Adding a slice: see "Adding a slice" in docs/architecture.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType

from streams.slices.context import SliceContext

# The installed slices, in installation order: streams/slices/<name>/__init__.py has install().
SLICES: tuple[str, ...] = ("calendar", "automation")


def load(names: Sequence[str] = SLICES) -> list[ModuleType]:
    return [importlib.import_module(f"streams.slices.{name}") for name in names]


def install_all(ctx: SliceContext, names: Sequence[str] = SLICES) -> None:
    for module in load(names):
        install: Callable[[SliceContext], None] = module.install
        install(ctx)


__all__ = ["SLICES", "SliceContext", "install_all", "load"]
