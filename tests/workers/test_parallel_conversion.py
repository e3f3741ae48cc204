"""Background shard writes (`transforms.shard_writers._BackgroundIO`).

The rest of this file moved to the tests of each part (tests/workers/test_ordered_pool.py,
test_worker_setup.py, tests/tabular/test_threads.py, tests/images/test_threads.py,
tests/format/test_framed_records.py); these tests go to tests/sink/ with the sink's split.
"""

from __future__ import annotations

import time

import pytest

from transforms.shard_writers import _BackgroundIO

# ------------------------------------------------------------- background shard writes


def test_background_io_runs_writes_in_order_and_bounds_them():
    io = _BackgroundIO()
    order = []
    for i in range(10):
        io.submit(lambda i=i: (time.sleep(0.001), order.append(i)))
        assert len(io._pending) <= _BackgroundIO.MAX_PENDING
    io.drain()
    io.shutdown()
    assert order == list(range(10))


def test_background_io_raises_a_failed_write():
    io = _BackgroundIO()
    io.submit(lambda: (_ for _ in ()).throw(OSError("no space left on device")))
    with pytest.raises(OSError, match="no space"):
        io.drain()
    io.shutdown()
