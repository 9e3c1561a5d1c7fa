"""What the service's Kafka principal may do, said in the words of the ACL to grant.

A broker with an authorizer answers a request the principal has no ACL for with an
authorization error code inside the response (or, for the group coordinator, an exception):
read bare, that is a ``TopicAuthorizationFailedError`` traceback or a wait that times out.
Here it becomes ``AccessDenied``: a ``DependencyConfigError`` naming the setting that picks
the principal (KAFKA_SASL_USERNAME, or KAFKA_SSL_CERTFILE for mutual TLS), the operation and
the resource, so ``streams topics`` and the worker exit 2 saying which ACL is missing
(docs/deploy.md, "Kafka ACLs", lists them all).

``check_worker_access`` is the worker's check before Faust starts: every topic it reads or
writes described, its consumer group's coordinator found, and Faust's own topics (table
changelogs, the leader topic) creatable, since Faust sends CreateTopics for them at every
start, existing or not (a CreateTopics with ``validate_only`` asks without creating).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    GroupAuthorizationFailedError,
    GroupCoordinatorNotAvailableError,
)
from aiokafka.protocol.metadata import MetadataRequest

from streams.kafka_client import client_options
from streams.settings import Settings
from streams.startup_wait import DependencyConfigError

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
_RESOURCE = {
    TOPIC_AUTHORIZATION_FAILED: "Topic",
    GROUP_AUTHORIZATION_FAILED: "Group",
    CLUSTER_AUTHORIZATION_FAILED: "Cluster",
}


@dataclass(frozen=True)
class AclRule:
    """One row of docs/deploy.md's "Kafka ACLs": who needs ``operations`` on a resource
    pattern (the tests grant exactly these on a broker with an authorizer)."""

    who: str  # "worker" or "topics" (the hook)
    resource: str  # "Topic" or "Group"
    pattern: str  # "prefixed" or "literal"
    name: str
    operations: tuple[str, ...]


def required_acls(settings: Settings) -> list[AclRule]:
    """Every ACL the worker (agents, timers, relay) and the ``topics`` hook need."""
    p, app = settings.topic_prefix, settings.app_id
    hook = ("Describe", "Create", "DescribeConfigs", "AlterConfigs")
    faust: tuple[str, ...] = ("Describe", "Read", "Write")
    if settings.kafka_declare_internal_topics:
        faust += ("Create",)
    return [
        AclRule("worker", "Topic", "prefixed", f"{p}pin.", ("Describe", "Read", "Write")),
        # The owner-work topic and its DLQ, whose retention the worker checks at start.
        AclRule(
            "worker",
            "Topic",
            "prefixed",
            f"{p}profile.",
            ("Describe", "Read", "Write", "DescribeConfigs"),
        ),
        # Faust's table changelogs and leader topic: CreateTopics at every start, unless
        # KAFKA_DECLARE_INTERNAL_TOPICS=false.
        AclRule("worker", "Topic", "prefixed", f"{app}-", faust),
        AclRule("worker", "Group", "literal", app, ("Describe", "Read")),
        AclRule("topics", "Topic", "prefixed", f"{p}pin.", hook),
        AclRule("topics", "Topic", "prefixed", f"{p}profile.", hook),
        # Faust's table changelogs, made by the hook too.
        AclRule("topics", "Topic", "prefixed", f"{app}-", ("Describe", "Create")),
    ]


def principal_setting(settings: Settings) -> str:
    """The setting that decides who the brokers see: the SASL user, or the client certificate."""
    if settings.kafka_security_protocol.startswith("SASL_"):
        return "KAFKA_SASL_USERNAME"
    if settings.kafka_ssl_certfile is not None:
        return "KAFKA_SSL_CERTFILE"
    return "KAFKA_SECURITY_PROTOCOL"


def _principal(settings: Settings) -> str:
    if settings.kafka_security_protocol.startswith("SASL_"):
        return f"User:{settings.kafka_sasl_username}"
    if settings.kafka_ssl_certfile is not None:
        return "the client certificate's subject"
    return "User:ANONYMOUS"


class AccessDenied(DependencyConfigError):
    """The broker refused ``operation`` on a resource for want of an ACL."""

    def __init__(self, settings: Settings, operation: str, resource: str, name: str) -> None:
        super().__init__(
            principal_setting(settings),
            f"Kafka denied {_principal(settings)} {operation} on {resource} {name!r}"
            f" ({resource}AuthorizationFailed): grant {operation} on {resource} {name!r}"
            ' (a prefixed ACL covers it; docs/deploy.md, "Kafka ACLs")',
        )
        self.operation = operation
        self.resource = resource
        self.name = name


def denied(settings: Settings, code: int, operation: str, name: str) -> AccessDenied | None:
    """``AccessDenied`` for an authorization ``code`` of a response; None for any other code."""
    resource = _RESOURCE.get(code)
    if resource is None:
        return None
    return AccessDenied(settings, operation, resource, name if resource != "Cluster" else "")


def raise_denied(settings: Settings, results: Iterable[tuple[str, int]], operation: str) -> None:
    """Raise for the first (name, error code) pair that is an authorization error."""
    for name, code in results:
        found = denied(settings, code, operation, name)
        if found is not None:
            raise found


def faust_changelog_configs(app: object) -> dict[str, dict[str, str]]:
    """Each table changelog's topic configuration as Faust would create it (cleanup policy,
    retention, the table's extra configs), for ``streams topics`` to make them itself."""
    out: dict[str, dict[str, str]] = {}
    for table in app.tables.values():  # type: ignore[attr-defined]
        topic = table.changelog_topic
        policy = [
            name for name, on in (("compact", topic.compacting), ("delete", topic.deleting)) if on
        ]
        config = {str(k): str(v) for k, v in (topic.config or {}).items()}
        if policy:
            config["cleanup.policy"] = ",".join(policy)
        if topic.retention:
            config["retention.ms"] = str(int(topic.retention * 1000))
        out[topic.get_topic_name()] = config
    return out


def faust_internal_topics(app: object) -> list[str]:
    """The topics Faust declares (CreateTopics) at every start: the tables' changelogs and,
    unless disabled, the leader topic."""
    names = {table.changelog_topic.get_topic_name() for table in app.tables.values()}  # type: ignore[attr-defined]
    conf = app.conf  # type: ignore[attr-defined]
    if not conf.topic_disable_leader:
        names.add(f"{conf.id}-__assignor-__leader")
    return sorted(names)


async def check_worker_access(
    settings: Settings,
    topics: list[str],
    declared: list[str],
    group: str,
    configs: list[str] | None = None,
) -> None:
    """AccessDenied unless the principal may describe ``topics``, find ``group``'s
    coordinator, create ``declared`` (validate only) and read the configuration of
    ``configs`` (the DLQs whose retention the worker checks itself)."""
    admin = AIOKafkaAdminClient(**client_options(settings), request_timeout_ms=10_000)
    await admin.start()
    try:
        # describe_topics() would let a broker with auto.create.topics.enable create them.
        request = MetadataRequest(topics, allow_auto_topic_creation=False)
        described = (await admin._send_request(request)).to_object()["topics"]
        raise_denied(settings, ((t["topic"], t["error_code"]) for t in described), "Describe")
        if declared:
            new = [
                NewTopic(n, settings.topic_partitions, settings.kafka_replication_factor)
                for n in declared
            ]
            response = await admin.create_topics(new, validate_only=True)
            raise_denied(settings, ((e[0], e[1]) for e in response.topic_errors), "Create")
        if configs:
            resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in configs]
            for response in await admin.describe_configs(resources):
                found = response.to_object()["resources"]
                pairs = ((r["resource_name"], r["error_code"]) for r in found)
                raise_denied(settings, pairs, "DescribeConfigs")
        await _group_described(settings, admin, group)
    finally:
        await admin.close()


async def _group_described(settings: Settings, admin: AIOKafkaAdminClient, group: str) -> None:
    """FindCoordinator for ``group`` (Describe on the group). Only a refusal matters here: a
    coordinator not there yet (a new cluster makes __consumer_offsets on the first request)
    is the consumer's to wait for."""
    for _ in range(20):
        try:
            await admin.find_coordinator(group)
            return
        except GroupAuthorizationFailedError:
            raise AccessDenied(settings, "Read", "Group", group) from None
        except (GroupCoordinatorNotAvailableError, CoordinatorLoadInProgressError):
            await asyncio.sleep(0.5)
