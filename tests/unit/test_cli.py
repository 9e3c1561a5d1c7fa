"""The command tree: ``--help`` at every level prints help and does nothing, usage errors exit 2
on stderr, and a command's settings load only once it is about to run."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import streams.cli as cli
from streams.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# Nothing listens there, and WEB_PORT does not validate: a command that read its settings
# (let alone connected) would exit 2, not 0.
BAD_ENV = {
    "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    "KAFKA_BOOTSTRAP": "127.0.0.1:1",
    "WEB_PORT": "not-a-port",
}
# One argv per command that runs (arguments valid), to reach its settings.
RUNNABLE = [
    ["worker"],
    ["migrate"],
    ["topics"],
    ["dlq", "replay", "pin.calendar.events.v1"],
    ["automation", "show", "some-key"],
    ["outbox", "parked"],
    ["explain", "some-id"],
    ["rows", "list", "calendar/reminders"],
    ["timers", "run", "document-expiry"],
    ["rows", "cancel", "calendar/reminders", "some-id", "--reason", "r"],
    ["demo"],
]


def _paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[list[str]]:
    """Every command path of the tree, the root (``[]``) first."""
    yield list(prefix)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _paths(child, (*prefix, name))


PATHS = list(_paths(cli.build_parser()))


@pytest.fixture
def no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> Settings:
        raise AssertionError("settings loaded")

    monkeypatch.setattr(cli, "load_settings", refuse)
    monkeypatch.setattr(cli, "install_log_redaction", lambda: None)  # process-wide otherwise


def test_the_tree_has_every_command_and_the_slices_their_own() -> None:
    top = {tuple(p) for p in PATHS if len(p) == 1}
    commands = [
        "worker",
        "migrate",
        "topics",
        "dlq",
        "automation",
        "outbox",
        "explain",
        "rows",
        "timers",
        "rows",
        "demo",
    ]
    assert top == {(c,) for c in commands}
    subs = {p[1] for p in PATHS if len(p) == 2 and p[0] == "automation"}
    assert subs == {
        "ensure",
        "deactivate",
        "show",
        "hold",
        "release",
        "retry-key",
        "fanouts",
        "fanout-release",
    }
    assert {tuple(p) for p in PATHS if len(p) == 2} >= {
        ("dlq", "replay"),
        ("rows", "list"),
        ("rows", "show"),
        ("timers", "run"),
        ("timers", "pause"),
        ("timers", "resume"),
        ("timers", "backfill"),
        ("rows", "cancel"),
        ("rows", "retry"),
        ("rows", "resend"),
        ("rows", "reopen"),
        ("outbox", "parked"),
        ("outbox", "retry"),
        ("outbox", "drop"),
    }
    assert {p[0] for p in RUNNABLE} == {p for (p,) in top}


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "streams")
def test_help_at_every_level_prints_usage_and_does_nothing(
    path: list[str], no_settings: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*path, "--help"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith(f"usage: {' '.join(['streams', *path])} "), out.out
    assert out.err == ""


@pytest.mark.parametrize("command", ["migrate", "topics", "worker"])
def test_help_neither_migrates_nor_creates_topics_nor_starts_a_worker(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streams", command, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, **BAD_ENV},
        cwd=ROOT,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: streams {command} ")
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: <command>"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["timers"], "the following arguments are required: <command>"),
        (["timers", "run"], "the following arguments are required: NAME"),
        (["timers", "run", "x", "--as-of", "yesterday"], "--as-of: not an ISO-8601 instant"),
        (["timers", "run", "x", "--as-of", "2026-06-10T12:00:00"], "has no offset"),
        (["explain"], "the following arguments are required: ID"),
        (["explain", "a", "b"], "unrecognized arguments: b"),
        (["migrate", "--force"], "unrecognized arguments: --force"),
        (["dlq", "replay"], "the following arguments are required: TOPIC"),
        (["automation", "deactivate", "k"], "the following arguments are required: --reason"),
        (["outbox", "retry", "seven"], "invalid int value: 'seven'"),
    ],
)
def test_a_usage_error_prints_usage_and_the_problem_on_stderr_and_exits_2(
    argv: list[str], message: str, no_settings: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith("usage: streams") and message in out.err, out.err


@pytest.mark.parametrize("argv", RUNNABLE, ids=lambda a: " ".join(a))
def test_a_command_with_a_bad_setting_names_it_and_exits_2(
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(cli, "install_log_redaction", lambda: None)
    for name, value in BAD_ENV.items():
        monkeypatch.setenv(name, value)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "setting WEB_PORT" in err, err


def test_the_worker_hands_the_arguments_it_does_not_know_to_faust(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []

    def worker(settings: Settings, args: argparse.Namespace) -> int:
        seen.append(args.faust_args)
        return 0

    monkeypatch.setattr(cli, "_worker", worker)
    monkeypatch.setattr(cli, "install_log_redaction", lambda: None)
    argv = ["worker", "-l", "info", "--without-web"]
    assert cli.main(argv, settings=Settings(web_port=6066)) == 0
    assert seen == [["-l", "info", "--without-web"]]
