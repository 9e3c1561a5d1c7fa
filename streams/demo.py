"""``python -m streams demo``: each slice's demo workload on the real topics, then its report."""

from __future__ import annotations

from streams.demo_kit import DemoKafka
from streams.kafka_client import security_options
from streams.settings import Settings
from streams.slices.automation import demo as automation_demo
from streams.slices.calendar import demo as calendar_demo
from streams.slices.profile import demo as profile_demo

WAIT_SECONDS = 90.0


async def run_demo(settings: Settings) -> int:
    kafka = DemoKafka(settings.kafka_bootstrap, security_options(settings))
    calendar = await calendar_demo.send(settings, kafka)
    automation = await automation_demo.send(settings, kafka)
    profile = await profile_demo.send(settings, kafka)
    ok = await calendar_demo.report(settings, kafka, calendar, WAIT_SECONDS)
    ok = await automation_demo.report(settings, kafka, automation, WAIT_SECONDS) and ok
    ok = await profile_demo.report(settings, kafka, profile, WAIT_SECONDS) and ok
    print(f"  web: http://{settings.web_host}:{settings.web_port}/health  /metrics  /status")
    print("demo: OK" if ok else "demo: NOT as expected (see the worker log)")
    return 0 if ok else 1
