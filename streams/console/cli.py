"""``streams rows <command>``: the console's row commands, one group both parts add to
(``list|show`` read rows; ``retry|cancel|reopen|resend|release|retry-key`` act on one:
streams/console/cli_actions.py)."""

from __future__ import annotations

import argparse


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from streams.console import cli_actions, rows_cli

    rows = sub.add_parser(
        "rows",
        help="the console's rows: list them with filters, show one, act on one",
        description=__doc__,
    )
    commands = rows.add_subparsers(dest="rows_command", metavar="<command>", required=True)
    rows_cli.add_read_commands(commands)
    cli_actions.add_action_commands(commands)
