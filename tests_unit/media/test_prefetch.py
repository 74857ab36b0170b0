"""The prefetcher behind every decode: started at once, bounded, errors handed over, nothing left running."""

from __future__ import annotations

import gc
import threading
from collections.abc import Generator

import pytest

from h3bench.media.prefetch import Prefetch, prefetch

WAIT_S = 30  # generous: these waits end as soon as the other thread acts, under any load


def counting(limit: int, produced: list[int], closed: threading.Event) -> Generator[int, None, None]:
    try:
        for value in range(limit):
            produced.append(value)
            yield value
    finally:
        closed.set()


def test_each_prefetch_starts_producing_before_anything_is_consumed() -> None:
    # The first file's first item waits for the second file to have started: a prefetcher that started
    # only at its first `next` would leave the second one idle, and the first would never finish.
    second_started = threading.Event()

    def first() -> Generator[str, None, None]:
        assert second_started.wait(WAIT_S), "the second prefetcher had not started"
        yield "first"

    def second() -> Generator[str, None, None]:
        second_started.set()
        yield "second"

    a, b = prefetch(first(), 2, name="first"), prefetch(second(), 2, name="second")
    try:
        assert next(a) == "first"
        assert next(b) == "second"
    finally:
        a.close()
        b.close()


def test_the_producer_runs_at_most_depth_ahead() -> None:
    produced: list[int] = []
    closed = threading.Event()
    stream = prefetch(counting(1000, produced, closed), 3)
    try:
        for consumed in range(1, 50):
            assert next(stream) == consumed - 1
            # `depth` items wait in the buffer, and one more may be in the producer's hands.
            assert len(produced) <= consumed + 3 + 1
    finally:
        stream.close()
    assert closed.is_set()


def test_all_items_arrive_in_order_then_the_stream_ends() -> None:
    produced: list[int] = []
    closed = threading.Event()
    stream = prefetch(counting(25, produced, closed), 4)
    assert list(stream) == list(range(25))
    assert closed.is_set()
    with pytest.raises(StopIteration):
        next(stream)


def test_an_error_in_the_producer_is_raised_in_the_consumer_after_the_items_before_it() -> None:
    def failing() -> Generator[int, None, None]:
        yield 1
        yield 2
        raise ValueError("the third frame is corrupt")

    stream = prefetch(failing(), 2)
    assert next(stream) == 1
    assert next(stream) == 2
    with pytest.raises(ValueError, match="third frame is corrupt"):
        next(stream)
    with pytest.raises(StopIteration):
        next(stream)


def test_closing_stops_a_producer_blocked_on_a_full_buffer_and_closes_its_items() -> None:
    produced: list[int] = []
    closed = threading.Event()
    stream = prefetch(counting(10**9, produced, closed), 2, name="blocked")
    assert next(stream) == 0
    stream.close()
    assert closed.is_set()
    assert not any(t.name == "blocked" for t in threading.enumerate())
    stream.close()  # a second close is harmless


def test_a_prefetch_dropped_unread_stops_its_thread_and_closes_its_items() -> None:
    produced: list[int] = []
    closed = threading.Event()
    stream: Prefetch[int] | None = prefetch(counting(10**9, produced, closed), 2, name="abandoned")
    thread = next(t for t in threading.enumerate() if t.name == "abandoned")
    del stream
    gc.collect()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert closed.is_set()
