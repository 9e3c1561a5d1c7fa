"""CPU cost of the log lines of dispatch: text vs JSON, the per-item lines on and off.

``python -m bench.logs [--items N] [--batch B]``: runs dispatch's own ``log_items`` (the
seed's batch_selected and reminder_sent lines) for N claimed rows in batches of B inside a
run's log context, to a null stream through streams/logs.py, with LOG_LEVEL info (the
per-item lines off: they are DEBUG) and debug (on), and prints microseconds of CPU per item
for both formats side by side. A micro-benchmark of the logging path only: the lateness
bench's figure (dispatch at load with the lines on) is still to be measured on a quiet
machine.
"""

from __future__ import annotations

import argparse
import io
import logging
import time
import uuid
from datetime import UTC, datetime

from db.event_reminders import ClaimedReminder
from streams import logs
from streams.slices.calendar import dispatch


def rows(n: int) -> list[ClaimedReminder]:
    now = datetime.now(UTC)
    return [
        ClaimedReminder(
            reminder_id=uuid.uuid4(),
            event_id=uuid.uuid4(),
            offset_minutes=15,
            due_at=now,
            attempts=0,
            tenant_id=uuid.uuid4(),
            owner_user_id=uuid.uuid4(),
            client_user_id=None,
            kind="Appointment",
            start_at=now,
            time_zone="Europe/Moscow",
            event_status="Planned",
            appointment_id=None,
        )
        for _ in range(n)
    ]


def cost(log_format: str, level: str, items: int, batch: int) -> float:
    """CPU microseconds per item of ``log_items`` over ``items`` rows."""
    out = io.StringIO()
    logs.configure(level, log_format, stream=out)
    data = rows(batch)
    sent = {r.reminder_id for r in data}
    batches = max(1, items // batch)

    def work() -> None:
        for _ in range(batches):
            if dispatch.log.isEnabledFor(dispatch.ITEM_LEVEL):
                dispatch.log_items(data, sent, set())
            out.seek(0)
            out.truncate()

    ctx = logs.bind_run(run_id=uuid.uuid4().hex, schedule="calendar-dispatch")
    began = time.process_time()
    ctx.run(work)
    return (time.process_time() - began) * 1e6 / (batches * batch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.logs", description=__doc__)
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args(argv)
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    try:
        print(f"{'per-item lines':<16} {'text us/item':>13} {'json us/item':>13}")
        for label, level in (("off (info)", "info"), ("on (debug)", "debug")):
            text = cost("text", level, args.items, args.batch)
            js = cost("json", level, args.items, args.batch)
            print(f"{label:<16} {text:>13.3f} {js:>13.3f}")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
