"""A slice is one declaration added to one list: a throwaway slice, defined here and added to
``streams.slices.SLICES``, is seen by the contract catalogue, topic creation, the CLI, the
timer registry (with and without the Faust app), the worker's agents and /status, and the
settings validated at startup; and the timer side of a worker imports no Faust."""

from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from streams import slices
from streams.app import create_context
from streams.cli import main
from streams.contracts import TopicContract, produced_contracts
from streams.contracts.base import Contract
from streams.kafka_admin import service_topic_names
from streams.settings import ConfigError, Settings, load_settings
from streams.slices import Slice, TimerContext, catalogue
from streams.slices.context import SliceContext
from streams.timer_app import create_timers
from streams.timers.context import RunContext
from streams.timers.schedule import Mode, Schedule


class Pinged(Contract):
    name: str


PINGS = TopicContract("pin.throwaway.pings.v1", Pinged, lambda m: m.name, "in")
PONGS = TopicContract("throwaway.pongs.v1", Pinged, lambda m: m.name, "internal")


class ThrowawaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    throwaway_greeting: str = "hello"
    throwaway_ticks: int = Field(1, ge=1)


class Tick:
    def __init__(self) -> None:
        self.runs = 0

    async def run_once(self, ctx: RunContext) -> dict[str, int]:
        self.runs += 1
        return {"runs": self.runs}


def install_timers(ctx: TimerContext) -> Tick:
    tick = Tick()
    ctx.registry.register(
        Schedule(
            name="throwaway-tick",
            interval=timedelta(seconds=60),
            handler=tick,
            max_duration=timedelta(seconds=5),
            mode=Mode.EVERY_INSTANCE,
            settings_prefix="TIMER_THROWAWAY_TICK_",
        )
    )
    ctx.status("throwaway", lambda: {"runs": tick.runs})
    return tick


def install_stream(ctx: SliceContext, tick: Tick) -> None:
    async def apply(batch: Any) -> None:
        tick.runs += 0

    ctx.input("throwaway-pings", PINGS, apply)
    ctx.status("throwaway_stream", lambda: {"tick_seen": isinstance(tick, Tick)})


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hello = sub.add_parser("throwaway", help="say hello")
    hello.add_argument("who")
    hello.set_defaults(
        run=lambda settings, args: (
            print(f"{settings.of(ThrowawaySettings).throwaway_greeting} {args.who}") or 7
        )
    )


THROWAWAY = Slice(
    name="throwaway",
    contracts=(PINGS,),
    internal_topics=(PONGS,),
    settings=ThrowawaySettings,
    install_timers=install_timers,
    install_stream=install_stream,
    cli=add_commands,
)


@pytest.fixture
def declared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slices, "SLICES", (*slices.SLICES, THROWAWAY))


@pytest.mark.usefixtures("declared")
def test_the_catalogue_and_topic_creation_list_a_declared_slice(tmp_path: Path) -> None:
    assert PINGS in catalogue() and PINGS not in produced_contracts()
    assert slices.internal_topics()[-1:] == [PONGS]
    names = service_topic_names(Settings(topic_prefix="t."))
    assert {"t.pin.throwaway.pings.v1", "t.pin.throwaway.pings.v1.dlq"} <= set(names)
    assert {"t.throwaway.pongs.v1", "t.throwaway.pongs.v1.dlq"} <= set(names)


@pytest.mark.usefixtures("declared")
def test_the_cli_has_a_declared_slices_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["throwaway", "world"], settings=Settings()) == 7
    assert capsys.readouterr().out == "hello world\n"


@pytest.mark.usefixtures("declared")
def test_a_declared_slices_settings_are_read_and_validated_at_startup(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["throwaway", "world"], settings=Settings(throwaway_greeting="hi")) == 7
    assert capsys.readouterr().out == "hi world\n"
    monkeypatch.setenv("THROWAWAY_TICKS", "0")
    with pytest.raises(ConfigError, match="setting THROWAWAY_TICKS: "):
        load_settings()


@pytest.mark.usefixtures("declared")
async def test_the_timer_side_runs_a_declared_slices_timer_without_the_app() -> None:
    timers = create_timers(Settings())
    try:
        assert timers.registry.names[-1] == "throwaway-tick"
        tick = timers.installed["throwaway"]
        assert isinstance(tick, Tick)
        assert timers.status_sections["throwaway"]() == {"runs": 0}
    finally:
        await timers.runtime.close()


@pytest.mark.usefixtures("declared")
async def test_the_worker_installs_a_declared_slices_timer_agent_and_status(
    tmp_path: Path,
) -> None:
    ctx = create_context(Settings(worker_data_dir=tmp_path))
    try:
        assert "throwaway-tick" in ctx.registry.names
        assert "throwaway-pings" in ctx.consumers
        assert ctx.status_sections["throwaway"]() == {"runs": 0}
        assert ctx.status_sections["throwaway_stream"]() == {"tick_seen": True}
        # The shared sections and the real slices' come as before, the new one after them.
        assert list(ctx.status_sections) == [
            "calendar",
            "automation",
            "throwaway",
            "document_expiry",
            "throwaway_stream",
            "retention",
        ]
    finally:
        await ctx.runtime.close()


def test_the_timer_side_imports_no_faust() -> None:
    probe = (
        "import sys\n"
        "from streams.settings import Settings\n"
        "from streams.timer_app import create_timers\n"
        "import streams.timer_process.child, streams.timers.manual, streams.cli\n"
        "create_timers(Settings())\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('faust', 'mode'))\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == ""
