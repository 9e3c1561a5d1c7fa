"""How bench/expiry_parts.py shapes a run's chunks."""

import uuid

from bench.expiry_parts import run_chunks
from streams.slices.profile.owners import OWNERS_PER_TRANSACTION


def test_run_chunks_sort_each_batch_and_cut_it_into_transactions() -> None:
    owners = [uuid.uuid4() for _ in range(2 * 1_200 + 300)]
    chunks = run_chunks(owners, 1_200)
    size = OWNERS_PER_TRANSACTION
    # Every owner once, in the same batches, each batch sorted, no chunk across two batches.
    assert [o for c in chunks for o in c] == [
        *sorted(owners[:1_200]),
        *sorted(owners[1_200:2_400]),
        *sorted(owners[2_400:]),
    ]
    assert [len(c) for c in chunks] == [size, size, 200, size, size, 200, 300]


def test_a_batch_smaller_than_a_transaction_is_one_chunk() -> None:
    owners = [uuid.uuid4() for _ in range(3)]
    assert run_chunks(owners, 10) == [sorted(owners)]
