"""Read one sample of a Prometheus text exposition (a worker's /metrics), by name and labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` whose labels include ``labels``; None when absent.

    ``name`` is the sample's full name (``..._total`` for a counter). More than one
    matching sample is an error: the caller must give the labels that pick one.
    """
    found = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} samples: give more labels"
    return found[0] if found else None
