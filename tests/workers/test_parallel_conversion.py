"""Converter threads, framed record batches, background shard writes and their coder.

The threaded paths must give exactly the batches of the single-threaded ones (same keys,
bytes, dead letters and counts), keep failures where they were, and bound what is in
flight.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import platform
import sys
import threading
import time

import pytest

from tests.images import image_samples as samples
from transforms import allocator, sink, worker
from transforms.coders import RecordBatchCoder
from transforms.format.example_codec import decode_example
from transforms.format.tfrecord_format import FramedRecords, frame_records
from transforms.images.convert import ConvertImages, ImageConfig, plan_image_folder
from transforms.ordered_pool import default_threads, ordered_map
from transforms.records import RecordBatch
from transforms.sink import _BackgroundIO
from transforms.tabular.spec import ConversionSpec, FeatureSpec
from transforms.tabular.transform import ConvertTabular, TabularConfig, plan_tabular

# ------------------------------------------------------------------------ ordered_map


def test_ordered_map_keeps_input_order_whatever_finishes_first():
    def slow_for_small(x):
        time.sleep(0.002 * (10 - x % 10))
        return x * x

    assert list(ordered_map(slow_for_small, range(40), threads=4)) == [x * x for x in range(40)]


def test_ordered_map_bounds_items_in_flight():
    started, lock = [], threading.Lock()
    peak = [0]
    running = [0]

    def work(x):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.005)
        with lock:
            running[0] -= 1
        return x

    def items():
        for i in range(30):
            started.append(i)
            yield i

    consumed = 0
    for _ in ordered_map(work, items(), threads=3):
        consumed += 1
        # Items are read at most threads + 1 ahead of what the consumer has taken.
        assert len(started) - consumed <= 3
    assert consumed == 30
    assert peak[0] <= 3


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


# --------------------------------------------------------------------- tabular threads

SPEC = ConversionSpec(features=(
    FeatureSpec(name="id", type="int64"),
    FeatureSpec(name="score", type="float"),
    FeatureSpec(name="name", type="string"),
))


def _tabular_batches(path, threads: int, batch_rows: int = 64):
    fn = ConvertTabular(TabularConfig(spec=SPEC, fmt="csv", batch_rows=batch_rows, threads=threads))
    fn.setup()
    return [b for unit in plan_tabular(str(path), "csv") for b in fn.process(unit)]


def _as_tuples(batches):
    return [(b.key, b.split, list(b.records), list(b.dead_letters), b.input_count) for b in batches]


def test_threaded_tabular_conversion_gives_the_same_batches(tmp_path):
    lines = ["id,score,name"]
    for i in range(40000):
        if i % 997 == 5:
            lines.append(f"not-an-int,{i}.5,row{i}")  # a dead letter now and then
        else:
            lines.append(f"{i},{i}.25,név{i}")
    path = tmp_path / "rows.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    serial = _tabular_batches(path, threads=1)
    threaded = _tabular_batches(path, threads=3)
    assert len(serial) > 10  # many chunks, so the pool really had work in flight
    assert _as_tuples(threaded) == _as_tuples(serial)
    assert all(isinstance(b.records, FramedRecords) for b in threaded if b.records)
    assert sum(len(b.dead_letters) for b in threaded) == sum(1 for i in range(40000) if i % 997 == 5)


def test_threaded_tabular_conversion_reports_a_file_failing_midway(tmp_path):
    rows = "\n".join(f"{i},{i}.5,x{i}" for i in range(300000))
    path = tmp_path / "broken.csv.gz"
    whole = gzip.compress(("id,score,name\n" + rows + "\n").encode())
    path.write_bytes(whole[: len(whole) * 2 // 3])  # truncated gzip stream

    # How far pyarrow's read-ahead gets before the error varies run to run (threads or
    # not), so each run is checked on its own: a prefix of the rows, then the failure.
    for threads in (1, 3):
        batches = _tabular_batches(path, threads=threads, batch_rows=32)
        assert not any(b.dead_letters for b in batches[:-1])
        letters = [json.loads(d) for d in batches[-1].dead_letters]
        assert [d["reason"] for d in letters] == ["unreadable_file"], threads
        ids = [decode_example(r)["id"][1][0] for b in batches for r in b.records]
        assert 0 < len(ids) < 300000
        assert ids == list(range(len(ids)))
        assert f"after {len(ids)} rows" in letters[0]["message"]
        assert sum(b.input_count for b in batches) == len(ids) + 1


# ---------------------------------------------------------------------- image threads


def test_threaded_image_conversion_gives_the_same_batches(tmp_path):
    jpeg = samples.encode(samples.rgb(), "JPEG", quality=85)
    png = samples.encode(samples.gray(), "PNG")
    for i in range(24):
        label = "cat" if i % 2 else "dog"
        os.makedirs(tmp_path / label, exist_ok=True)
        data = jpeg if i % 3 else png
        if i == 7:
            data = b"\xff\xd8 not really a jpeg"
        (tmp_path / label / f"{i:03d}.jpg").write_bytes(data)
    plan = plan_image_folder(str(tmp_path), images_per_unit=10)

    def run(threads):
        fn = ConvertImages(ImageConfig(threads=threads))
        fn.setup()
        return [b for unit in plan.work_units for b in fn.process(unit)]

    serial, threaded = run(1), run(4)
    assert _as_tuples(threaded) == _as_tuples(serial)
    letters = [json.loads(d) for b in threaded for d in b.dead_letters]
    assert [d["filename"] for d in letters] == ["cat/007.jpg"]
    assert sum(len(b.records) for b in threaded) == 23


# -------------------------------------------------------------------- FramedRecords


def test_framed_records_read_as_their_payloads():
    payloads = [b"", b"a", "é".encode() * 50, bytes(range(256)) * 3]
    framed = FramedRecords.frame(payloads)
    assert framed.data == frame_records(payloads)
    assert list(framed) == payloads and framed == payloads and len(framed) == 4
    assert framed[2] == payloads[2] and framed[-1] == payloads[-1]
    assert framed[1:3] == payloads[1:3]
    assert framed[1:3].data == frame_records(payloads[1:3])
    assert framed[::2] == payloads[::2]
    assert list(framed.framed_sizes()) == [len(p) + 16 for p in payloads]
    assert pickle.loads(pickle.dumps(framed)) == framed
    with pytest.raises(IndexError):
        framed[4]
    with pytest.raises(ValueError):
        FramedRecords(framed.data, framed.ends[:-1])  # ends must cover the data


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


# ---------------------------------------------------------------------------- coder


def test_record_batch_coder_round_trips_and_estimates_without_encoding(monkeypatch):
    batch = RecordBatch(key="00000001:00000000", split="train",
                        records=FramedRecords.frame([b"x" * 100, b"y" * 50]),
                        dead_letters=[b'{"reason": "bad"}'], input_count=3)
    coder = RecordBatchCoder()
    decoded = coder.decode(coder.encode(batch))
    assert decoded == batch
    monkeypatch.setattr(pickle, "dumps", lambda *a, **k: pytest.fail("estimate_size encoded"))
    estimate = coder.estimate_size(batch)
    assert 100 + 16 + 50 + 16 + 17 <= estimate < 400


# -------------------------------------------------------------------------- allocator


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="mallopt thresholds are a glibc feature")
def test_retain_freed_memory_is_applied_once_and_by_every_worker_setup(monkeypatch):
    assert allocator.retain_freed_memory() is True
    assert allocator.retain_freed_memory() is True  # idempotent
    calls = []
    monkeypatch.setattr(worker, "retain_freed_memory", lambda: calls.append(1) or True)
    spec = ConversionSpec(features=(FeatureSpec(name="a", type="int64"),))
    ConvertTabular(TabularConfig(spec=spec, fmt="csv")).setup()
    ConvertImages(ImageConfig()).setup()
    sink._WriteRollingShards(sink.SinkConfig(output_dir="/tmp/unused")).setup()
    sink._WriteGroupedShard(sink.SinkConfig(output_dir="/tmp/unused")).setup()
    assert len(calls) == 4


@pytest.mark.parametrize("threads", [-1, 1.5, "2"])
def test_both_converter_configs_refuse_a_bad_thread_count(threads):
    spec = ConversionSpec(features=(FeatureSpec(name="a", type="int64"),))
    with pytest.raises(ValueError, match="threads must be 0"):
        TabularConfig(spec=spec, fmt="csv", threads=threads)
    with pytest.raises(ValueError, match="threads must be 0"):
        ImageConfig(threads=threads)
