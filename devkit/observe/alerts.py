"""deploy/prometheus/alerts.yml for a given deployment: each ``runbook_url`` under the base where
docs/runbooks/ is published, every selector on the scrape job (what the Helm chart's
PrometheusRule does with prometheusRule.runbookBaseUrl and serviceMonitor.job).

    python -m devkit.observe.alerts --runbook-base-url https://wiki.example.org/reminders/ \\
        [--job reminders-stream] > /etc/prometheus/alerts.yml
"""

from __future__ import annotations

import argparse
import sys
from urllib.parse import urlsplit

from devkit.observe.promql import ALERTS

# The base and job the file is written with (tests/unit/test_operators_files.py checks both).
RUNBOOK_BASE_URL = "https://runbooks.example.com/reminders-stream/"
JOB = "reminders-stream"


def render(runbook_base_url: str, job: str = JOB, text: str | None = None) -> str:
    """The rules with the runbook base and the job replaced; ValueError for a base that is not
    an absolute http(s) URL ending in ``/`` (each runbook_url is the base + a relative path)."""
    parts = urlsplit(runbook_base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or not parts.path.endswith("/"):
        raise ValueError(
            f"--runbook-base-url must be an absolute http(s) URL ending in '/', got {runbook_base_url!r}"
        )
    if not job or '"' in job:
        raise ValueError(f"--job must be a job name, got {job!r}")
    rules = ALERTS.read_text() if text is None else text
    rules = rules.replace(RUNBOOK_BASE_URL, runbook_base_url)
    return rules.replace(f'job="{JOB}"', f'job="{job}"')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit.observe.alerts", description=__doc__)
    parser.add_argument("--runbook-base-url", required=True, help="where docs/runbooks/ is served")
    parser.add_argument("--job", default=JOB, help="the scrape job of the workers")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(render(args.runbook_base_url, args.job))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
