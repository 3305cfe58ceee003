"""LiveConsumeQueue, the broker's view of a consume queue: whatever the dispatch worker has filed so far,
every entry put is read back, in order, from the files below the worker's mark and from memory above it."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings, strategies as st

from rocketmesh.broker.store.index.consume_queue import ENTRY, ConsumeQueue, LiveConsumeQueue

PER_FILE = 50  # entries a file: reads cross file ends often
FILE_SIZE = PER_FILE * 20

#: Steps: ("put", n) appends n entries; ("file", k) has the worker file k more of the entries put.
steps = st.lists(st.one_of(st.tuples(st.just("put"), st.integers(1, 700)),
                           st.tuples(st.just("file"), st.integers(0, 700))), min_size=1, max_size=25)


def entry(i: int) -> tuple[int, int, int]:
    return (1000 + i * 100, 90 + i % 7, i * 31)


@settings(max_examples=60, deadline=None)
@given(steps=steps, reads=st.lists(st.tuples(st.integers(0, 20_000), st.integers(1, 300)), max_size=8))
def test_every_entry_put_is_read_back_whether_filed_or_not(steps, reads) -> None:
    with tempfile.TemporaryDirectory() as root:
        writer = ConsumeQueue("T", 0, root, FILE_SIZE)  # the dispatch worker's side
        live = LiveConsumeQueue("T", 0, root, FILE_SIZE)
        live.load(following=True)
        put = filed = 0
        for kind, n in steps:
            if kind == "put":
                for i in range(put, put + n):
                    assert live.append(*entry(i)) == i  # appending assigns the offset
                put += n
            else:
                upto = min(put, filed + n)
                if upto > filed:
                    writer.put_run(filed, [ENTRY.pack(*entry(i)) for i in range(filed, upto)],
                                   sum(entry(upto - 1)[:2]))
                    filed = upto
                live.persisted(filed)
            assert live.max_offset == put
            assert live.persisted_offset <= filed
            for start, count in reads:
                start %= put + 1
                got = []
                idx = start
                while idx < put and len(got) < count:
                    chunk = list(live.iter_from(idx, count - len(got)))
                    assert chunk, f"nothing readable at {idx} of {put} (filed {filed})"
                    got += chunk
                    idx = chunk[-1][0] + 1
                assert got == [(i, *entry(i)) for i in range(start, min(put, start + count))]
            if put:
                assert live.get(put - 1) == entry(put - 1)
                assert live.get(filed // 2) == entry(filed // 2) if filed else True
            assert live.get(put) is None
        writer.shutdown()
        live.queue.shutdown()


def test_a_replicated_record_s_offset_moves_the_queue_on_and_an_old_one_is_skipped() -> None:
    with tempfile.TemporaryDirectory() as root:
        live = LiveConsumeQueue("T", 0, root, FILE_SIZE)
        assert live.skip_to(40)  # a slave that started from its master's first file
        assert live.append(*entry(40)) == 40
        assert live.min_offset == 40 and live.max_offset == 41
        assert not live.skip_to(12)  # the queue has it already
        assert live.get(40) == entry(40) and live.get(39) is None
