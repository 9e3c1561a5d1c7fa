"""A slice as a declared object: its name, its topics, how it installs its timers (no Faust:
the timer process and ``timers run`` build only these) and its stream part (agents and tables
on the worker's Faust app), and what it adds to the demo, the CLI, ``explain`` and the
console's row listings."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pydantic_settings import BaseSettings

from streams.console.listing import Listing
from streams.contracts import TopicContract
from streams.runtime import Runtime
from streams.settings import Settings
from streams.timers.registry import TimerRegistry

if TYPE_CHECKING:
    from streams.console.actions import RowAction
    from streams.demo_kit import DemoKafka
    from streams.slices.context import SliceContext

StatusSection = Callable[[], Any]
"""A /status section: a function returning JSON-able data (or an awaitable of it)."""


@dataclass
class TimerContext:
    """What a slice's timers are installed on: the runtime and the one timer registry, plus
    the /status sections and start-up calls they add (read by the worker; the timer process
    and ``timers run`` build this alone, without Faust)."""

    runtime: Runtime
    registry: TimerRegistry
    status_sections: dict[str, StatusSection] = field(default_factory=dict)
    on_started: list[Callable[[], None]] = field(default_factory=list)
    """Called once the worker's services run (e.g. catch up on what came due while down)."""
    installed: dict[str, Any] = field(default_factory=dict)
    """Slice name → what its ``install_timers`` returned (its ``install_stream`` gets it)."""

    def status(self, name: str, section: StatusSection) -> None:
        self.status_sections[name] = section


class Demo(Protocol):
    """A slice's demo workload (``python -m streams demo``): send it, then report on it."""

    async def send(self, settings: Settings, kafka: DemoKafka, /) -> Any: ...

    async def report(
        self, settings: Settings, kafka: DemoKafka, sent: Any, wait: float, /
    ) -> bool: ...


@dataclass(frozen=True)
class Slice:
    """One product capability. Every part but ``name`` is optional; streams/slices/__init__.py
    lists the declared slices, and the catalogue, topic creation, the worker, the timer
    process, ``timers run``, the demo, the CLI and ``explain`` all read that list."""

    name: str
    contracts: tuple[TopicContract[Any], ...] = ()
    """The contract topics it consumes ("in") and produces through the outbox ("out")."""
    internal_topics: tuple[TopicContract[Any], ...] = ()
    """Topics between its own parts (created with the contract topics, with their DLQs)."""
    settings: type[BaseSettings] | None = None
    """Its own settings class (same environment as the core's; read with
    ``Settings.of``, validated by ``load_settings``)."""
    install_timers: Callable[[TimerContext], Any] | None = None
    """Registers its schedules (and status sections) on a timer-only context; what it
    returns is handed to ``install_stream``."""
    install_stream: Callable[[SliceContext, Any], None] | None = None
    """Adds its agents, cache tables, web pages and stream-side status sections to the
    worker's app, given what ``install_timers`` returned (None without one)."""
    explain: Callable[[Runtime, str], Awaitable[dict[str, Any] | None]] | None = None
    """What it knows about an id, for ``explain ID`` and /explain/ID (None: nothing)."""
    demo: Callable[[], Demo] | None = None
    """Loads its demo workload (imported only when the demo runs)."""
    cli: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None] | None = None
    """Adds its commands to ``python -m streams`` (argparse ``add_commands``)."""
    listings: tuple[Listing, ...] = ()
    """Its rows as the operators' console lists them (streams/console; ``<name>/...``)."""
    actions: tuple[RowAction, ...] = ()
    """The console actions its rows allow (streams/console/actions.py)."""


def install_timers(slices: tuple[Slice, ...], ctx: TimerContext) -> None:
    for s in slices:
        ctx.installed[s.name] = s.install_timers(ctx) if s.install_timers is not None else None


def install_streams(slices: tuple[Slice, ...], ctx: SliceContext, timers: TimerContext) -> None:
    for s in slices:
        if s.install_stream is not None:
            s.install_stream(ctx, timers.installed.get(s.name))
