"""A worker's two processes, one /metrics: families of the same name merge (MergingRegistry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streams.metrics import (
    Metrics,
    StaticCollector,
    families_from_json,
    families_to_json,
)


def child_of(parent: Metrics, child: Metrics) -> None:
    peer = StaticCollector()
    peer.families = families_from_json(families_to_json(child.registry))
    parent.registry.register(peer)


def test_counters_and_histograms_add_up_gauges_take_the_set_one() -> None:
    parent, child = Metrics(), Metrics(CollectorRegistry())
    parent.outbox.published.labels(topic="a").inc(2)
    child.outbox.published.labels(topic="a").inc(3)
    child.outbox.published.labels(topic="b").inc(1)
    child.outbox.backlog.set(7)  # the relay runs in the child: the parent's stays 0
    parent.outbox.lag.observe(0.01)
    child.outbox.lag.observe(0.01)
    child.outbox.lag.observe(5)
    child_of(parent, child)
    r = parent.registry
    assert r.get_sample_value("reminders_outbox_published_total", {"topic": "a"}) == 5
    assert r.get_sample_value("reminders_outbox_published_total", {"topic": "b"}) == 1
    assert r.get_sample_value("reminders_outbox_backlog") == 7
    assert r.get_sample_value("reminders_outbox_publish_lag_seconds_count") == 3
    assert r.get_sample_value("reminders_outbox_publish_lag_seconds_bucket", {"le": "0.01"}) == 2


def test_the_exposition_has_each_family_once_and_parses() -> None:
    parent, child = Metrics(), Metrics(CollectorRegistry())
    parent.outbox.errors.inc()
    child.outbox.errors.inc(4)
    child_of(parent, child)
    text = generate_latest(parent.registry).decode()
    assert text.count("# TYPE reminders_outbox_publish_errors_total counter") == 1
    names = [f.name for f in text_string_to_metric_families(text)]
    assert len(names) == len(set(names))
    [errors] = [
        f
        for f in text_string_to_metric_families(text)
        if f.name == "reminders_outbox_publish_errors"
    ]
    assert [s.value for s in errors.samples if s.name.endswith("_total")] == [5]


def test_created_keeps_the_earlier_and_gauges_the_larger() -> None:
    a, b = CollectorRegistry(), CollectorRegistry()
    Counter("c", "c", registry=a).inc()
    Counter("c", "c", registry=b).inc()
    Gauge("g", "g", registry=a).set(3)
    Gauge("g", "g", registry=b).set(10)
    Histogram("h", "h", registry=b, buckets=(1,)).observe(0.5)
    merged = Metrics()  # a MergingRegistry
    for source in (a, b):
        peer = StaticCollector()
        peer.families = families_from_json(families_to_json(source))
        merged.registry.register(peer)
    created = [
        s.value
        for source in (a, b)
        for f in source.collect()
        for s in f.samples
        if s.name == "c_created"
    ]
    assert merged.registry.get_sample_value("c_created") == min(created)
    assert merged.registry.get_sample_value("c_total") == 2
    assert merged.registry.get_sample_value("g") == 10
    assert merged.registry.get_sample_value("h_bucket", {"le": "1.0"}) == 1
