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

from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import GroupAuthorizationFailedError
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


def faust_internal_topics(app: object) -> list[str]:
    """The topics Faust declares (CreateTopics) at every start: the tables' changelogs and,
    unless disabled, the leader topic."""
    names = {table.changelog_topic.get_topic_name() for table in app.tables.values()}  # type: ignore[attr-defined]
    conf = app.conf  # type: ignore[attr-defined]
    if not conf.topic_disable_leader:
        names.add(f"{conf.id}-__assignor-__leader")
    return sorted(names)


async def check_worker_access(
    settings: Settings, topics: list[str], declared: list[str], group: str
) -> None:
    """AccessDenied unless the principal may describe ``topics``, find ``group``'s
    coordinator and create ``declared`` (validate only)."""
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
        try:
            await admin.find_coordinator(group)
        except GroupAuthorizationFailedError:
            raise AccessDenied(settings, "Read", "Group", group) from None
    finally:
        await admin.close()
