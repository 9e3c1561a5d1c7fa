"""A broker's authorization error codes become AccessDenied: the setting that picks the principal,
the operation and the resource to grant (docs/deploy.md, "Kafka ACLs")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from streams.kafka_access import (
    AccessDenied,
    denied,
    faust_internal_topics,
    principal_setting,
    raise_denied,
)
from streams.settings import Settings
from streams.startup_wait import DependencyConfigError


def sasl(**extra: Any) -> Settings:
    return Settings(
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_username="reminders",
        kafka_sasl_password="s3cret-pw",
        **extra,
    )


def test_a_topic_authorization_error_names_the_principal_setting_operation_and_topic() -> None:
    found = denied(sasl(), 29, "Create", "reminders-table-changelog")
    assert isinstance(found, AccessDenied) and isinstance(found, DependencyConfigError)
    text = str(found)
    assert text.startswith("setting KAFKA_SASL_USERNAME: ")
    assert "User:reminders" in text and "Create on Topic 'reminders-table-changelog'" in text
    assert "s3cret-pw" not in text
    assert found.setting == "KAFKA_SASL_USERNAME"


def test_group_and_cluster_codes_and_others_are_not_denials() -> None:
    group = denied(sasl(), 30, "Read", "reminders")
    assert group is not None and "Read on Group 'reminders'" in str(group)
    assert denied(sasl(), 31, "Create", "x") is not None
    for code in (0, 3, 36, 7):  # none, unknown topic, already exists, request timed out
        assert denied(sasl(), code, "Create", "x") is None


def test_raise_denied_raises_for_the_first_refused_resource_only() -> None:
    raise_denied(sasl(), [("a", 0), ("b", 36)], "Create")
    with pytest.raises(AccessDenied) as raised:
        raise_denied(sasl(), [("a", 0), ("b", 29), ("c", 29)], "DescribeConfigs")
    assert raised.value.name == "b" and raised.value.operation == "DescribeConfigs"


def test_the_principal_is_the_sasl_user_or_the_client_certificate() -> None:
    assert principal_setting(sasl()) == "KAFKA_SASL_USERNAME"
    assert principal_setting(Settings()) == "KAFKA_SECURITY_PROTOCOL"


def test_faust_internal_topics_are_the_changelogs_and_the_leader_topic() -> None:
    def table(name: str) -> Any:
        return SimpleNamespace(changelog_topic=SimpleNamespace(get_topic_name=lambda: name))

    app = SimpleNamespace(
        tables={"a": table("reminders-a-changelog"), "b": table("reminders-b-changelog")},
        conf=SimpleNamespace(id="reminders", topic_disable_leader=False),
    )
    assert faust_internal_topics(app) == [
        "reminders-__assignor-__leader",
        "reminders-a-changelog",
        "reminders-b-changelog",
    ]
    app.conf.topic_disable_leader = True
    assert "reminders-__assignor-__leader" not in faust_internal_topics(app)


def test_docs_list_every_acl_row_the_code_requires() -> None:
    from pathlib import Path

    from streams.kafka_access import required_acls

    docs = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    rows = [line for line in docs.splitlines() if line.startswith("| worker") or "(hook)" in line]
    for rule in required_acls(Settings()):
        expected = f"{rule.resource} {rule.pattern} `{rule.name}` | {', '.join(rule.operations)} |"
        assert any(expected in row for row in rows), expected


def test_changelog_configs_are_those_faust_would_create() -> None:
    from streams.kafka_access import faust_changelog_configs

    def table(name: str, **kw: Any) -> Any:
        topic = SimpleNamespace(get_topic_name=lambda: name, config=None, retention=None, **kw)
        return SimpleNamespace(changelog_topic=topic)

    app = SimpleNamespace(
        tables={
            "a": table("r-a-changelog", compacting=True, deleting=None),
            "b": table("r-b-changelog", compacting=True, deleting=True),
        }
    )
    app.tables["b"].changelog_topic.retention = 3600.0
    app.tables["b"].changelog_topic.config = {"min.insync.replicas": 2}
    assert faust_changelog_configs(app) == {
        "r-a-changelog": {"cleanup.policy": "compact"},
        "r-b-changelog": {
            "cleanup.policy": "compact,delete",
            "retention.ms": "3600000",
            "min.insync.replicas": "2",
        },
    }


def test_without_declaring_the_worker_needs_no_create() -> None:
    from streams.kafka_access import required_acls

    def worker_ops(declare: bool) -> set[str]:
        rules = required_acls(Settings(kafka_declare_internal_topics=declare))
        return {op for r in rules if r.who == "worker" for op in r.operations}

    assert "Create" in worker_ops(True) and "Create" not in worker_ops(False)


def test_any_command_refused_by_an_acl_names_the_principal_setting() -> None:
    from aiokafka.errors import TopicAuthorizationFailedError

    from streams.cli import _refusal

    try:
        try:
            raise TopicAuthorizationFailedError("pin.x")
        except TopicAuthorizationFailedError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as exc:
        text = _refusal(sasl(), exc)
    assert text is not None and text.startswith("setting KAFKA_SASL_USERNAME: Kafka refused")
    assert "s3cret-pw" not in text
    assert _refusal(sasl(), RuntimeError("a bug")) is None
