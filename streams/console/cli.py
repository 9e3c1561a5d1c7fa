"""``streams rows <command>``: the console's row commands, one group both parts add to
(``list|show`` read rows; ``retry|cancel|resend|release|retry-key`` act on one:
streams/console/cli_actions.py)."""

from __future__ import annotations

import argparse


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from streams.console import cli_actions

    rows = sub.add_parser(
        "rows",
        help="the console's rows: act on one (retry, cancel, resend, release, retry-key)",
        description=__doc__,
    )
    commands = rows.add_subparsers(dest="rows_command", metavar="<command>", required=True)
    cli_actions.add_action_commands(commands)
