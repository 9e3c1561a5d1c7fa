"""Grant and revoke Kafka ACLs as the stack's super user (a stack with STACK_KAFKA_ACLS=true):
the tests give the service exactly the ACLs docs/deploy.md lists (``required_acls``), then
take one away. aiokafka has no ACL methods; its protocol classes (CreateAcls and DeleteAcls
v1, which Kafka 4 still serves) are sent through the admin client."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import for_code
from aiokafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest

from streams.kafka_access import AclRule

# Kafka's enums (org.apache.kafka.common.resource / acl).
RESOURCE = {"Topic": 2, "Group": 3, "Cluster": 4}
PATTERN = {"literal": 3, "prefixed": 4}
OPERATION = {
    "All": 2,
    "Read": 3,
    "Write": 4,
    "Create": 5,
    "Delete": 6,
    "Alter": 7,
    "Describe": 8,
    "DescribeConfigs": 10,
    "AlterConfigs": 11,
}
ALLOW = 3


def _bindings(rules: Iterable[AclRule], principal: str) -> list[tuple[Any, ...]]:
    return [
        (RESOURCE[r.resource], r.name, PATTERN[r.pattern], principal, "*", OPERATION[op], ALLOW)
        for r in rules
        for op in r.operations
    ]


async def _send(admin_options: dict[str, Any], requests: list[Any]) -> None:
    admin = AIOKafkaAdminClient(**admin_options)
    await admin.start()
    try:
        for request in requests:
            response = (await admin._send_request(request)).to_object()
            results = response.get("creation_responses") or response.get("filter_responses", [])
            for result in results:
                if result["error_code"]:
                    raise for_code(result["error_code"])(result["error_message"])
    finally:
        await admin.close()


async def grant(admin_options: dict[str, Any], principal: str, rules: Iterable[AclRule]) -> None:
    """Allow ``principal`` (``User:name``) every operation of ``rules``, from any host."""
    await _send(admin_options, [CreateAclsRequest(*b) for b in _bindings(rules, principal)])


async def revoke(admin_options: dict[str, Any], principal: str, rules: Iterable[AclRule]) -> None:
    """Remove exactly those bindings again."""
    await _send(admin_options, [DeleteAclsRequest(*b) for b in _bindings(rules, principal)])
