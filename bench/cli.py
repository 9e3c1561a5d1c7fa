"""``python -m bench [NAME ...] [--quick] [--json PATH] [--compare FILE [--against OTHER]]``.

Runs the named benches (default: all, in the order below), prints one summary table at the
end and writes the same as JSON. ``--compare FILE`` then prints each measure's change against
an earlier JSON and exits 1 when one got more than 25% worse; with ``--against OTHER`` it
compares two JSON files without running anything.

The heading and the JSON (``machine.postgres``) say which PostgreSQL mode the run had, as the
server reports it (``SHOW fsync``, ``SHOW synchronous_commit``): ``durable`` (production's) or
``fast`` (the dev stack's). ``BENCH_PG=durable|fast`` (``make bench`` sets it) refuses to run
on a server in the other mode.

Exit codes: 0 done (a missed target is in the table, not in the exit code); 1 a measure got
more than 25% worse than in the compared file, or a bench crashed; 2 usage (unknown bench,
unreadable file, the server not in the BENCH_PG mode).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.compare import compare, format_changes, regressions
from bench.report import Measure, PgMode, document, heading, measures_of, mode_mismatch, table

ROOT = Path(__file__).resolve().parent.parent
LATEST = ROOT / "bench" / "results" / "latest.json"
EXIT_OK, EXIT_WORSE, EXIT_USAGE = 0, 1, 2

# name -> (module, what it measures); modules are imported only when their bench runs.
BENCHES: dict[str, tuple[str, str]] = {
    "dispatch": ("bench.dispatch", "due reminders/s: dispatcher vs bare SQL; two processes vs one"),
    "lateness": ("bench.lateness", "DueAt -> on the topic at 1,000 due/s + 2,000 ingested/s"),
    "claim": ("bench.claim", "claim time with 10,000,000 vs 10,000 Pending rows not yet due"),
    "ingest": ("bench.ingest", "events/s: worker vs bare pipeline; RSS; two workers vs one"),
    "relay": ("bench.relay", "outbox rows/s published and marked: relay vs a bare loop"),
    "automation": ("bench.automation", "scheduler claim+complete+outbox vs bare SQL; claim time"),
    "expiry": ("bench.expiry", "document expiry run over 1,000,000 documents vs bare SQL"),
    "expiry-large": ("bench.expiry_large", "document expiry: 1,000,000 documents of one owner"),
    "retention": ("bench.retention", "rows/s retention deletes (outbox, calendar) vs 1,000/s made"),
    "recovery": (
        "bench.recovery",
        "3 workers: SIGKILLs and a rolling restart (~7 min; named only)",
    ),
}
# Run only when named: too long for the default set.
NAMED_ONLY = {"recovery"}


class UsageError(Exception):
    pass


def parser() -> argparse.ArgumentParser:
    listing = "\n".join(f"  {name:<11} {about}" for name, (_, about) in BENCHES.items())
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks against the local stack; one summary table at the end.",
        epilog=f"benches (default: all but recovery, in this order):\n{listing}\n\n"
        "BENCH_CLAIM_LARGE=N changes the claim bench's large table (default 10,000,000).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="benches to run (default: all)")
    p.add_argument(
        "--json",
        type=Path,
        default=LATEST,
        help="where to write the results (default bench/results/latest.json)",
    )
    p.add_argument(
        "--compare",
        type=Path,
        metavar="FILE",
        help="print each measure's change against this earlier JSON; exit 1 if one got >25%% worse",
    )
    p.add_argument(
        "--against",
        type=Path,
        metavar="OTHER",
        help="with --compare: compare FILE (before) with OTHER (after) without running benches",
    )
    p.add_argument(
        "--quick", action="store_true", help="small sizes, to try the benches out (not figures)"
    )
    return p


def load(path: Path) -> tuple[list[Measure], dict[str, Any]]:
    try:
        doc = json.loads(path.read_text())
        return measures_of(doc), dict(doc.get("machine", {}))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


async def _show_pg_mode() -> PgMode:
    import asyncpg

    from bench.common import DATABASE_URL

    conn = await asyncpg.connect(DATABASE_URL, timeout=10)
    try:
        fsync = await conn.fetchval("SHOW fsync")
        synchronous_commit = await conn.fetchval("SHOW synchronous_commit")
    finally:
        await conn.close()
    return PgMode(str(fsync), str(synchronous_commit))


def pg_mode() -> PgMode:
    """The mode of the PostgreSQL at DATABASE_URL, read from the server itself."""
    try:
        return asyncio.run(_show_pg_mode())
    except Exception as exc:  # unreachable: the benches themselves will say more
        print(f"warning: cannot read the PostgreSQL mode: {type(exc).__name__}", file=sys.stderr)
        return PgMode("", "")


def machine(
    started: datetime,
    seconds: float,
    names: Sequence[str],
    quick: bool,
    load: Sequence[float],
    pg: PgMode,
) -> dict[str, Any]:
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {
        "date": started.isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "benches": list(names),
        "quick": quick,
        "cpu_count": os.cpu_count(),
        "load_average_start": [round(x, 2) for x in load],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": commit + ("-dirty" if commit and dirty else ""),
        "postgres": pg.to_json(),
    }


async def run_benches(
    names: Sequence[str], quick: bool
) -> tuple[list[Measure], list[str], list[dict[str, Any]]]:
    """Every named bench in turn, each after a wait for a quiet database (bench/quiet.py); a
    crashed bench is reported and the others still run."""
    from bench.quiet import quiet

    measures: list[Measure] = []
    crashed: list[str] = []
    waits: list[dict[str, Any]] = []
    for name in names:
        module = importlib.import_module(BENCHES[name][0])
        kwargs = dict(getattr(module, "QUICK", {})) if quick else {}
        try:
            waits.append((await quiet(name)).to_json())
        except Exception as exc:  # the bench itself will say more about an unreachable server
            print(f"  (no quiet-database wait before {name}: {type(exc).__name__}: {exc})")
        try:
            measures.extend(await module.run(**kwargs))
        except Exception:
            traceback.print_exc()
            print(f"\n!! bench {name} crashed (see above); going on with the others", flush=True)
            crashed.append(name)
            measures.append(
                Measure(f"{name}: crashed", "", float("nan"), None, None, "no crash", False,
                        True, bench=name, detail="see the log")
            )  # fmt: skip
    return measures, crashed, waits


def comparison(before: list[Measure], after: list[Measure], label: str) -> int:
    changes = compare(before, after)
    print(f"\n== change against {label} ==")
    print(format_changes(changes))
    return EXIT_WORSE if regressions(changes) else EXIT_OK


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(list(argv))
    try:
        unknown = [n for n in args.names if n not in BENCHES]
        if unknown:
            raise UsageError(f"unknown bench {unknown}; choose from {list(BENCHES)}")
        if args.against is not None and args.compare is None:
            raise UsageError("--against needs --compare FILE")
        # Read the earlier file first: it may be the very file this run writes.
        before = load(args.compare) if args.compare is not None else None
        if args.against is not None:
            assert before is not None
            after, _ = load(args.against)
            return comparison(before[0], after, f"{args.compare} (before) -> {args.against}")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    names = args.names or [name for name in BENCHES if name not in NAMED_ONLY]
    pg = pg_mode()
    refused = mode_mismatch(os.environ.get("BENCH_PG"), pg)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return EXIT_USAGE
    print(f"benchmarks on {pg.text()}", flush=True)
    # aiokafka's retry warnings (e.g. a leader not yet elected on a new topic) are noise here.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    started, t0, load_start = datetime.now(UTC), time.monotonic(), os.getloadavg()
    measures, crashed, waits = asyncio.run(run_benches(names, args.quick))
    info = machine(started, time.monotonic() - t0, names, args.quick, load_start, pg)
    info["quiet_waits"] = waits
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document(measures, info), indent=2) + "\n")
    print("\n" + heading(info))
    print(table(measures))
    print(f"(written to {args.json})")
    code = EXIT_WORSE if crashed else EXIT_OK
    if before is not None:
        if before[1].get("quick") != args.quick:
            print("note: one of the two runs used --quick sizes; the figures are not comparable")
        earlier = (before[1].get("postgres") or {}).get("mode", "unknown")
        if earlier != pg.name:
            print(f"note: the earlier run was on PostgreSQL {earlier}, this one on {pg.name}")
        code = max(code, comparison(before[0], measures, str(args.compare)))
    return code
