"""``python -m streams demo``: each slice's demo workload on the real topics, then its report."""

from __future__ import annotations

from typing import Any

from streams import slices
from streams.demo_kit import DemoKafka
from streams.kafka_client import security_options
from streams.settings import Settings
from streams.slices.slice import Demo

WAIT_SECONDS = 90.0


async def run_demo(settings: Settings) -> int:
    kafka = DemoKafka(settings.kafka_bootstrap, security_options(settings))
    demos = [s.demo() for s in slices.declared() if s.demo is not None]
    sent: list[tuple[Demo, Any]] = []
    for demo in demos:  # every workload first: their due times run concurrently
        sent.append((demo, await demo.send(settings, kafka)))
    ok = True
    for demo, workload in sent:
        ok = await demo.report(settings, kafka, workload, WAIT_SECONDS) and ok
    print(f"  web: http://{settings.web_host}:{settings.web_port}/health  /metrics  /status")
    print("demo: OK" if ok else "demo: NOT as expected (see the worker log)")
    return 0 if ok else 1
