"""Secret fields never reach the DLQ: PayloadCipher is removed (at any depth, any case) or the
whole value withheld when it cannot be parsed; the header says so and replay refuses it."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.contracts import PERSON_DOCUMENTS
from streams.dlq.cli import summary
from streams.dlq.redact import redact
from streams.dlq.replay import ReplayResult
from streams.dlq.rules import SKIP_REDACTED, decide
from streams.dlq.send import send_to_dlq

CIPHER = "c2VjcmV0LWNpcGhlci12YWx1ZQ=="
SECRET = PERSON_DOCUMENTS.secret_fields
SRC = PERSON_DOCUMENTS.name


def test_the_person_documents_contract_names_payload_cipher_secret() -> None:
    assert SECRET == ("PayloadCipher",)


def test_payload_cipher_is_removed_and_the_rest_kept() -> None:
    raw = json.dumps({"DocumentId": "d1", "PayloadCipher": CIPHER, "Version": "bad"}).encode()
    out = redact(raw, SECRET)
    assert out.removed == ("PayloadCipher",)
    assert out.value is not None and CIPHER.encode() not in out.value
    assert json.loads(out.value) == {"DocumentId": "d1", "Version": "bad"}


def test_any_case_any_depth_and_duplicate_keys_are_removed() -> None:
    raw = (
        b'{"payloadcipher": "%s", "Nested": [{"PAYLOADCIPHER": "%s"}],'
        b' "PayloadCipher": "%s", "PayloadCipher": "x"}' % ((CIPHER.encode(),) * 3)
    )
    out = redact(raw, SECRET)
    assert out.value is not None and CIPHER.encode() not in out.value
    assert set(out.removed) == {"payloadcipher", "PAYLOADCIPHER", "PayloadCipher"}
    assert json.loads(out.value) == {"Nested": [{}]}


def test_an_escaped_name_is_the_same_field() -> None:
    raw = b'{"Payload\\u0043ipher": "%s"}' % CIPHER.encode()
    out = redact(raw, SECRET)
    assert out.removed == ("PayloadCipher",) and out.value == b"{}"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"PayloadCipher": "%s", oops' % CIPHER.encode(),
        b'\xff{"PayloadCipher": "%s"}' % CIPHER.encode(),
        b"[" * 100_000,
    ],
)
def test_a_value_that_does_not_parse_is_withheld(raw: bytes) -> None:
    assert redact(raw, SECRET).value == b""
    assert redact(raw, SECRET).removed == ("*",)


def test_a_value_without_secret_fields_is_kept_byte_for_byte() -> None:
    raw = b'{ "DocumentId" : "d1",  "Version": 1.50 }'
    assert redact(raw, SECRET).value == raw and redact(raw, SECRET).removed == ()
    assert redact(b"not json", ()).value == b"not json"  # a contract without secrets
    assert redact(None, SECRET).value is None


@given(st.recursive(st.text(), lambda inner: st.dictionaries(st.text(), inner, max_size=4)))
def test_no_secret_key_survives_any_document(doc: object) -> None:
    wrapped = {"PayloadCipher": CIPHER, "Doc": doc, "x": [{"payloadCipher": CIPHER}]}
    out = redact(json.dumps(wrapped).encode(), SECRET)
    assert out.value is not None

    def keys(node: object) -> list[str]:
        if isinstance(node, dict):
            return [k for k, v in node.items() for k in [k, *keys(v)]]
        if isinstance(node, list):
            return [k for item in node for k in keys(item)]
        return []

    assert not any(k.casefold() == "payloadcipher" for k in keys(json.loads(out.value)))


@dataclass
class Msg:
    key: bytes | None
    value: bytes | None
    topic: str = SRC
    partition: int = 2
    offset: int = 41


@dataclass
class Ev:
    message: Msg


@dataclass
class FakeDlq:
    sent: list[dict[str, Any]] = field(default_factory=list)

    async def send(self, **kwargs: Any) -> asyncio.Future[None]:
        self.sent.append(kwargs)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


async def test_the_dlq_record_carries_the_redacted_value_and_says_so() -> None:
    dlq = FakeDlq()
    raw = json.dumps({"PayloadCipher": CIPHER, "Version": "x"}).encode()
    form = await send_to_dlq(
        dlq, Ev(Msg(b"owner", raw)), "Version: bad", "schema", secret_fields=SECRET
    )  # type: ignore[arg-type]
    assert form == "redacted"
    [sent] = dlq.sent
    assert CIPHER.encode() not in sent["value"] and sent["key"] == b"owner"
    assert dict(sent["headers"])["dlq-redacted"] == b"PayloadCipher"


async def test_a_withheld_value_keeps_its_size() -> None:
    dlq = FakeDlq()
    raw = b'{"PayloadCipher": "%s",' % CIPHER.encode()
    form = await send_to_dlq(
        dlq, Ev(Msg(b"owner", raw)), "value is not valid JSON", "json", secret_fields=SECRET
    )  # type: ignore[arg-type]
    assert form == "redacted"
    [sent] = dlq.sent
    h = dict(sent["headers"])
    assert sent["value"] == b"" and h["dlq-redacted"] == b"*"
    assert h["dlq-original-size"] == str(len(raw)).encode()


def test_replay_refuses_a_redacted_record_and_says_why() -> None:
    headers = [
        ("dlq-reason", b"Version: bad"),
        ("dlq-error-kind", b"schema"),
        ("dlq-source-topic", SRC.encode()),
        ("dlq-redacted", b"PayloadCipher"),
    ]
    d = decide(SRC + ".dlq", 0, 5, b"owner", b'{"Version":"x"}', headers, SRC)
    assert d.skip == SKIP_REDACTED and d.redacted == ("PayloadCipher",)
    result = ReplayResult(SRC + ".dlq", SRC, False, None)
    result.skipped[SKIP_REDACTED] = 1
    result.redacted_fields.update(d.redacted)
    text = summary(result)
    assert "skipped redacted 1" in text
    assert "without their secret fields (PayloadCipher) are not replayed" in text
    assert "ask the producer to re-send them" in text
