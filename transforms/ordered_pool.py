"""An ordered, bounded thread-pool map for the converters (Beam-free).

A work unit's chunks (or images) can be converted on a few threads: Arrow, numpy, hashlib,
Pillow and the CRC of large buffers release the GIL. On the 2-core development machine the
gain was small (under 0.2 s per 2M CSV rows; images were slower: their work is mostly
Python), so the converters default to one thread; more pay off with more cores or image
resizing. Results come in input order (output bytes do not depend on thread timing), with
at most `threads + 1` items in flight (memory bounded by the chunk size, not the input's).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["check_threads", "default_threads", "ordered_map"]

T = TypeVar("T")
R = TypeVar("R")


def default_threads() -> int:
    """The CPUs this process may run on (what `threads=0` means)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_threads(threads: int) -> None:
    """Raises ValueError unless `threads` is a converter thread count: 0 (one per CPU) or more."""
    if not isinstance(threads, int) or threads < 0:
        raise ValueError(f"threads must be 0 (one per CPU) or a positive integer, got {threads!r}")


def ordered_map(fn: Callable[[T], R], items: Iterable[T], threads: int) -> Iterator[R]:
    """`map(fn, items)` with up to `threads` calls of `fn` running at once, `items` consumed on
    the calling thread a bounded distance ahead. An exception from `fn` is raised when its
    result is due; one from `items` after every result already submitted. Closing the
    iterator cancels what has not started and waits for what has."""
    if threads <= 1:
        yield from map(fn, items)
        return
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="convert")
    pending: collections.deque = collections.deque()
    source = iter(items)
    try:
        while True:
            try:
                item = next(source)
            except StopIteration:
                break
            except Exception:
                while pending:
                    yield pending.popleft().result()
                raise
            pending.append(pool.submit(fn, item))
            if len(pending) > threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
