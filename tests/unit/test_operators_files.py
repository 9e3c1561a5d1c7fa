"""The operators' files: alert rules pass promtool, every alert starts a runbook section that
exists, the dashboards are well-formed Grafana JSON, and the metric-name reader that the e2e
check (tests/e2e/test_operators_view.py) relies on reads PromQL right."""

from __future__ import annotations

import json
import re
import subprocess

from devkit.observe.promql import (
    ALERTS,
    DASHBOARDS,
    ROOT,
    SHARED,
    dashboard_uses,
    metric_names,
    rule_uses,
)
from devkit.tools import tool
from streams.slices import names as slice_names


def test_metric_names_reads_selectors_not_functions_labels_or_durations() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (le, schedule) (rate(reminders_timer_run_duration_seconds_bucket"
        '{schedule="calendar-dispatch",result!~"ok|x"}[15m]))) > 2 and on (instance) '
        "time() - reminders_timer_last_success_timestamp_seconds offset 5m > 300 or absent(reminders_outbox_backlog)"
    )
    assert metric_names(expr) == {
        "reminders_timer_run_duration_seconds_bucket",
        "reminders_timer_last_success_timestamp_seconds",
        "reminders_outbox_backlog",
    }
    assert metric_names("max(calendar_reminder_dispatch_backlog) > 1e3") == {
        "calendar_reminder_dispatch_backlog"
    }


def test_alert_rules_pass_promtool() -> None:
    out = subprocess.run(
        [tool("promtool"), "check", "rules", str(ALERTS)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_rules_cover_every_alert_the_seeds_list() -> None:
    text = ALERTS.read_text()
    for alert in (
        "CalendarDispatchNoSuccessfulCycle",  # 000: no successful cycle > 5 min
        "CalendarPendingOverdue",  # 000: Pending with DueAt older than 5 min
        "CalendarDispatchErrors",  # 000: errors rate > 0 sustained
        "DocumentExpiryNoSuccessfulCycle",  # 001: no successful cycle > 26 h
        "DocumentExpiryBacklog",  # 001: backlog > 0 for more than two cycles
        "DocumentExpiryErrors",  # 001: errors rate > 0 sustained
        "OutboxBacklogHigh",  # 000/001: outbox backlog > 1000
        "AutomationRowsOnHold",  # 003: support hold
    ):
        assert f"alert: {alert}\n" in text, alert
    assert "> 300" in text and "> 93600" in text and "> 1000" in text


def runbook_links() -> list[tuple[str, str, str]]:
    """(group, alert, runbook link) for every rule of alerts.yml, in file order."""
    links, group, alert = [], "", ""
    for line in ALERTS.read_text().splitlines():
        if m := re.match(r"\s*- name: (\S+)", line):
            group = m.group(1)
        elif m := re.match(r"\s*- alert: (\S+)", line):
            alert = m.group(1)
        elif m := re.match(r"\s*runbook: (\S+)", line):
            links.append((group, alert, m.group(1)))
    return links


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    for line in markdown.splitlines():
        if m := re.match(r"#+\s+(.*)$", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def test_every_alert_of_an_installed_slice_starts_a_runbook_section() -> None:
    alerts = {a for _, a, _ in runbook_links()}
    assert len(alerts) == len(re.findall(r"- alert: ", ALERTS.read_text())), "alert without runbook"
    checked = 0
    for group, alert, link in runbook_links():
        if group != SHARED and group not in slice_names():
            continue  # that slice's runbook comes with the slice
        path, _, anchor = link.partition("#")
        runbook = ROOT / path
        assert runbook.is_file(), f"{alert}: {path} missing"
        assert anchor in anchors(runbook.read_text()), f"{alert}: no section #{anchor} in {path}"
        checked += 1
    assert checked >= 8


def test_dashboards_are_grafana_json_with_the_seeds_panels() -> None:
    boards = {p.stem: json.loads(p.read_text()) for p in DASHBOARDS.glob("*.json")}
    assert {"calendar-overview", "profile-overview", "automation-overview"} <= set(boards)
    for name, board in boards.items():
        assert board["uid"] == name and board["title"]
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        titles = [p["title"] for p in board["panels"]]
        assert "Background jobs" in titles, f"{name}: the seeds' Background jobs panel row"
    uses = dashboard_uses()
    assert uses and all(metric_names(u.expr) for u in uses), "a panel target selects no metric"
    assert {u.slice for u in rule_uses()} == {"calendar", "profile", "automation", SHARED}


RUNBOOK_BASE_URL = "https://runbooks.example.com/reminders-stream/"
JOB = 'job="reminders-stream"'


def test_every_alert_links_its_runbook_absolute_under_the_base() -> None:
    text = ALERTS.read_text()
    urls = re.findall(r"^\s*runbook_url: (\S+)$", text, re.M)
    assert len(urls) == len(re.findall(r"- alert: ", text)), "alert without runbook_url"
    relative = [link for _, _, link in runbook_links()]
    assert urls == [RUNBOOK_BASE_URL + link for link in relative]


def test_every_selector_of_a_rule_names_the_job() -> None:
    for use in rule_uses():
        for name in metric_names(use.expr):
            assert re.search(rf"\b{name}\{{{JOB}[,}}]", use.expr), (
                f"{use.where}: {name} without {JOB}"
            )


def test_rules_and_a_dashboard_watch_consumer_lag_and_rebalance_storms() -> None:
    text = ALERTS.read_text()
    for alert in ("StreamConsumerLagHigh", "StreamRebalanceStorm", "StreamRebalanceStuck"):
        assert f"alert: {alert}\n" in text, alert
    used = {
        n
        for u in dashboard_uses()
        if u.where.startswith("stream-overview")
        for n in metric_names(u.expr)
    }
    assert {
        "reminders_stream_consumer_lag",
        "reminders_stream_consumer_lag_seconds",
        "reminders_stream_assigned_partitions",
        "reminders_stream_rebalances_total",
        "reminders_stream_rebalance_duration_seconds_bucket",
        "reminders_stream_changelog_recovery_remaining",
        "reminders_stream_processing_latency_seconds_bucket",
        "reminders_build_info",
    } <= used


def test_histogram_buckets_reach_past_every_alert_threshold_on_them() -> None:
    from prometheus_client import CollectorRegistry

    from streams.metrics import Metrics

    registry = CollectorRegistry()
    Metrics(registry)
    top = {
        f.name: max(
            float(s.labels["le"])
            for s in f.samples
            if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
        )
        for f in registry.collect()
        if f.type == "histogram" and any(s.name.endswith("_bucket") for s in f.samples)
    }
    for use in rule_uses():
        found = re.search(r"histogram_quantile\(.*?(\w+)_bucket.*\)\s*>\s*([\d.e]+)", use.expr)
        if found:
            name, threshold = found.group(1), float(found.group(2))
            assert top[name] > threshold, f"{use.where}: {name} buckets stop at {top[name]}"
    # The outbox alert fires on the oldest row's age at 300 s; the lag histogram of the same
    # rows must still tell 300 s from 60 s.
    assert top["reminders_outbox_publish_lag_seconds"] > 300


def test_the_compose_prometheus_config_loads_the_rules_and_scrapes_the_job() -> None:
    config = ALERTS.parent / "prometheus.yml"
    out = subprocess.run(
        [tool("promtool"), "check", "config", str(config)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "job_name: reminders-stream" in config.read_text()


def test_grafana_provisioning_loads_every_dashboard_from_the_mounted_folder() -> None:
    provisioning = DASHBOARDS / "provisioning"
    datasource = (provisioning / "datasources" / "prometheus.yml").read_text()
    assert "type: prometheus" in datasource and "url: http://prometheus:9090" in datasource
    providers = (provisioning / "dashboards" / "reminders.yml").read_text()
    assert "path: /var/lib/grafana/dashboards" in providers
    compose = (ROOT / "docker-compose.yml").read_text()
    assert "./deploy/grafana:/var/lib/grafana/dashboards:ro" in compose
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in compose


def test_every_dashboard_panel_filters_by_the_job_variable() -> None:
    """Each dashboard has a ``job`` variable and every selector of every panel uses it, so a
    Grafana over a Prometheus that scrapes other services shows only these workers."""
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert "job" in variables, f"{path.name}: no job variable"
        assert "label_values(reminders_build_info, job)" in json.dumps(variables["job"])
    for use in dashboard_uses():
        for name in metric_names(use.expr):
            assert re.search(rf'\b{name}\{{job=~"\$job"[,}}]', use.expr), (
                f'{use.where}: {name} without job=~"$job"'
            )


def test_the_rules_render_for_another_runbook_base_and_job(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """python -m devkit.observe.alerts: every runbook_url under the given base, naming an
    existing runbook file, every selector on the given job; the result passes promtool."""
    from devkit.observe import alerts

    assert alerts.RUNBOOK_BASE_URL == RUNBOOK_BASE_URL and f'job="{alerts.JOB}"' == JOB
    base = "https://wiki.example.org/ops/reminders/"
    text = alerts.render(base, job="rs-prod")
    urls = re.findall(r"^\s*runbook_url: (\S+)$", text, re.M)
    assert len(urls) == len(re.findall(r"- alert: ", text)) > 0
    for url in urls:
        assert url.startswith(base + "docs/runbooks/"), url
        path = url.removeprefix(base).split("#", 1)[0]
        assert path.endswith(".md") and (ROOT / path).is_file(), url
    assert "runbooks.example.com" not in text and JOB not in text
    assert 'job="rs-prod"' in text
    rendered = tmp_path / "alerts.yml"
    rendered.write_text(text)
    out = subprocess.run(
        [tool("promtool"), "check", "rules", str(rendered)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for bad in ("runbooks.example.org/x/", "ftp://host/x/", "https://host/no-slash"):
        try:
            alerts.render(bad)
        except ValueError as exc:
            assert "--runbook-base-url" in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted")
