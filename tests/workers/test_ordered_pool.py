"""`transforms.ordered_pool.ordered_map`: results in input order whatever finishes first,
a bounded number of items in flight, failures raised where they happened.

Threads are coordinated with events and barriers, never with sleeps, so each test forces
the interleaving it checks on every run.
"""

from __future__ import annotations

import threading

import pytest

from transforms.ordered_pool import check_threads, default_threads, ordered_map

# Long enough for any loaded machine; reached only when ordered_map is broken.
DEADLOCK_SECONDS = 30


def test_ordered_map_keeps_input_order_whatever_finishes_first():
    threads, items = 4, range(40)
    finished, lock = [], threading.Lock()
    # The first item of each group of `threads` waits until the rest of its group finished,
    # so every group finishes out of input order.
    rest_done = {x: threading.Event() for x in items if x % threads == 0}
    left = {x: threads - 1 for x in rest_done}

    def last_of_its_group(x):
        leader = x - x % threads
        if x == leader:
            assert rest_done[leader].wait(DEADLOCK_SECONDS), f"items after {x} never ran"
        with lock:
            finished.append(x)
            if x != leader:
                left[leader] -= 1
                if not left[leader]:
                    rest_done[leader].set()
        return x * x

    assert list(ordered_map(last_of_its_group, items, threads=threads)) == [x * x for x in items]
    assert sorted(finished) == list(items)
    assert finished.index(1) < finished.index(0)  # really finished out of order


def test_ordered_map_bounds_items_in_flight():
    threads = 3
    started, lock = [], threading.Lock()
    peak = [0]
    running = [0]
    # Each call waits for `threads` calls to run at once: the bound is reached, every round.
    all_running = threading.Barrier(threads, timeout=DEADLOCK_SECONDS)

    def work(x):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        all_running.wait()
        with lock:
            running[0] -= 1
        return x

    def items():
        for i in range(30):
            started.append(i)
            yield i

    consumed = 0
    for _ in ordered_map(work, items(), threads=threads):
        consumed += 1
        # Items are read at most threads + 1 ahead of what the consumer has taken.
        assert len(started) - consumed <= threads
    assert consumed == 30
    assert peak[0] == threads


def test_ordered_map_delivers_earlier_results_before_a_failing_source():
    def items():
        yield from range(5)
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        for value in ordered_map(lambda x: x + 100, items(), threads=2):
            got.append(value)
    assert got == [100, 101, 102, 103, 104]


def test_ordered_map_raises_a_failing_call_at_its_position():
    def fn(x):
        if x == 3:
            raise ValueError("bad item 3")
        return x

    got = []
    with pytest.raises(ValueError, match="bad item 3"):
        for value in ordered_map(fn, range(10), threads=3):
            got.append(value)
    assert got == [0, 1, 2]


def test_ordered_map_with_one_thread_is_plain_map_on_the_calling_thread():
    caller = threading.get_ident()
    assert list(ordered_map(lambda x: threading.get_ident(), range(3), threads=1)) == [caller] * 3
    assert default_threads() >= 1


@pytest.mark.parametrize("threads", [-1, 1.5, "2"])
def test_check_threads_refuses_what_is_not_a_thread_count(threads):
    with pytest.raises(ValueError, match="threads must be 0"):
        check_threads(threads)
    check_threads(0)
    check_threads(2)
