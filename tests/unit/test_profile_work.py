"""Work items of a document expiry run: owners gathered by a partition that depends on the
owner alone, each owner's identity as fanout_key gives it, replays recognised."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from streams.slices.profile.owner_plan import OwnerPlan
from streams.slices.profile.owners import progress_item
from streams.slices.profile.work import (
    MAX_OWNERS_PER_ITEM,
    OWNER_WORK,
    OwnersWork,
    RunOrder,
    item_key,
    partition_of,
)
from streams.timers.slots import fanout_key

SLOT = datetime(2026, 6, 10, 0, 30, tzinfo=UTC)

instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
).map(lambda d: d.astimezone(timezone(timedelta(hours=3))))


@given(st.uuids(), instants)
def test_an_owners_work_id_is_the_fanout_key_of_its_slot(owner: uuid.UUID, as_of: datetime) -> None:
    order = RunOrder("document-expiry", "run-1", as_of, (30, 7, 1, 0))
    work = order.work(owner)
    assert work.work_id == fanout_key("document-expiry", owner, as_of)
    assert (work.run_id, work.owner_user_id, work.as_of) == ("run-1", owner, as_of)
    assert work.thresholds_days == (30, 7, 1, 0)
    # Its owner's text, formatted once, goes with every copy of the work.
    assert work.owner_key == str(owner)
    assert replace(work, after=owner, notified=True).owner_key == str(owner)
    assert replace(work, owner_key="").owner_key == str(owner)


@given(st.uuids(), st.integers(1, 64))
def test_an_owner_always_goes_to_the_same_partition(owner: uuid.UUID, partitions: int) -> None:
    assert 0 <= partition_of(owner, partitions) < partitions
    assert partition_of(uuid.UUID(str(owner)), partitions) == partition_of(owner, partitions)


def test_owners_spread_over_the_partitions_whatever_their_uuid_version() -> None:
    # Random (v4) ids and time-based (v1) ids whose low bits barely differ.
    for owners in ([uuid.uuid4() for _ in range(4000)], [uuid.uuid1() for _ in range(4000)]):
        counts = Counter(partition_of(o, 4) for o in owners)
        assert len(counts) == 4 and min(counts.values()) > 800


def test_an_item_round_trips_and_keys_on_its_first_owner() -> None:
    owners = [uuid.uuid4() for _ in range(3)]
    item = OwnersWork(
        name="document-expiry",
        run_id="r1",
        as_of=SLOT,
        thresholds_days=[0, 30, 7, 1],
        owner_user_ids=owners,
    )
    again = OwnersWork.model_validate_json(item.to_json())
    assert again == item and again.thresholds_days == [30, 7, 1, 0]
    assert OWNER_WORK.key(item) == str(owners[0])
    assert again.order() == RunOrder("document-expiry", "r1", SLOT, (30, 7, 1, 0))


@pytest.mark.parametrize("count", [0, MAX_OWNERS_PER_ITEM + 1])
def test_an_item_without_owners_or_with_too_many_is_refused(count: int) -> None:
    with pytest.raises(ValidationError):
        OwnersWork(
            name="document-expiry",
            run_id="r1",
            as_of=SLOT,
            thresholds_days=[30],
            owner_user_ids=[uuid.uuid4() for _ in range(count)],
        )


def test_a_record_from_kafka_has_a_key_and_anything_else_has_none() -> None:
    event = SimpleNamespace(message=SimpleNamespace(partition=2, offset=41))
    assert item_key(event) == "2:41"
    assert item_key(None) is None
    assert item_key(MagicMock()) is None  # a test double's attributes are not ints


def test_progress_goes_under_the_record_and_a_continued_owners_end_under_the_owner() -> None:
    owner = uuid.uuid4()
    work = RunOrder("document-expiry", "run-1", datetime(2026, 3, 1, tzinfo=UTC), (30,)).work(owner)
    record = SimpleNamespace(message=SimpleNamespace(partition=1, offset=7))
    plain = OwnerPlan(0, 0, record, work)
    assert progress_item(plain, failed=False) == "1:7"
    plain.resume_after = uuid.uuid4()  # its first chunk ended: continued
    assert progress_item(plain, failed=False) == "1:7"
    continued = OwnerPlan(0, 0, record, replace(work, after=uuid.uuid4()))
    assert progress_item(continued, failed=False) == f"owner:{owner}"  # its last chunk
    assert progress_item(continued, failed=True) == f"owner:{owner}"
    continued.resume_after = uuid.uuid4()  # one more chunk to go
    assert progress_item(continued, failed=False) == "1:7"
    assert progress_item(OwnerPlan(0, 0, None, work), failed=False) is None  # inline


@given(st.uuids(), st.uuids(), st.booleans(), instants)
def test_a_continuation_round_trips_with_its_owner_cursor_and_identity(
    owner: uuid.UUID, after: uuid.UUID, notified: bool, as_of: datetime
) -> None:
    work = RunOrder("document-expiry", "run-1", as_of, (30, 7, 1, 0)).work(owner)
    cont = replace(work, after=after, notified=notified)
    item = OwnersWork.continuation(cont)
    back = OWNER_WORK.model.model_validate_json(item.to_json())
    assert back.works() == [cont]
    assert back.owner_user_ids == [owner] and back.name == "document-expiry"


def test_a_continuation_carries_exactly_one_owner() -> None:
    with pytest.raises(ValidationError, match="exactly one owner"):
        OwnersWork(
            name="document-expiry",
            run_id="run-1",
            as_of=SLOT,
            thresholds_days=[30],
            owner_user_ids=[uuid.uuid4(), uuid.uuid4()],
            after_document_id=uuid.uuid4(),
        )


def test_an_item_of_an_older_worker_is_a_plain_owner_list() -> None:
    owners = [uuid.uuid4(), uuid.uuid4()]
    raw = (
        '{"ContractVersion": 1, "Name": "document-expiry", "RunId": "run-1", '
        f'"AsOf": "{SLOT.isoformat()}", "ThresholdsDays": [30, 7], '
        f'"OwnerUserIds": ["{owners[0]}", "{owners[1]}"]}}'
    )
    works = OWNER_WORK.model.model_validate_json(raw).works()
    assert [(w.owner_user_id, w.after, w.notified) for w in works] == [
        (owners[0], None, False),
        (owners[1], None, False),
    ]
