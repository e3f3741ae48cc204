"""Forked converter processes: `transforms.forked_pool` and the local runner's WorkUnitGroup.

The forked path must give exactly what converting the items one by one gives (same
results, same order), raise failures where they happened, stop its children however the
consumer stops, and bound what waits in the parent.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest

from pipeline import cli
from pipeline.graph import ConversionPlan, converting_ahead, in_process_plan
from pipeline.spec import ConversionSpec, FeatureSpec
from transforms import forked_pool, tabular
from transforms.forked_pool import (
    WorkerDiedError,
    fork_available,
    forked_map,
    started_ahead,
    take_started,
)
from transforms.records import WorkUnit, WorkUnitGroup
from transforms.tabular import ConvertTabular, TabularConfig, plan_tabular
from transforms.tfrecord_format import FramedRecords

pytestmark = pytest.mark.skipif(not fork_available(), reason="forked_map forks on Linux only")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _uneven(n: int):
    """Item n yields n results after a delay that makes later items finish first."""
    time.sleep(0.002 * (6 - n % 6))
    for i in range(n):
        yield (n, i, os.getpid())


# ------------------------------------------------------------------------ forked_map


@pytest.mark.parametrize("receive_ahead", [False, True])
@pytest.mark.parametrize("processes, count", [(2, 12), (3, 7), (8, 3), (2, 2)])
def test_results_come_in_item_order_as_a_plain_loop_gives_them(processes, count, receive_ahead):
    items = list(range(count))
    got = list(forked_map(_uneven, items, processes, receive_ahead=receive_ahead))
    assert [r[:2] for r in got] == [(n, i) for n in items for i in range(n)]
    pids = {r[2] for r in got}
    assert os.getpid() not in pids  # computed in children ...
    assert len(pids) == min(processes, count - 1)  # ... all of them (item 0 yields nothing)


def test_no_fork_for_one_process_one_item_or_where_fork_is_unavailable(monkeypatch):
    here = os.getpid()
    assert {r[2] for r in forked_map(_uneven, [1, 2, 3], processes=1)} == {here}
    assert {r[2] for r in forked_map(_uneven, [3], processes=4)} == {here}
    assert list(forked_map(_uneven, [], processes=4)) == []
    monkeypatch.setattr(forked_pool, "fork_available", lambda: False)
    assert {r[2] for r in forked_map(_uneven, [1, 2, 3], processes=4)} == {here}


def test_uneven_items_are_balanced_over_the_children():
    # One long item first: the other child must take every other item meanwhile.
    def work(n):
        time.sleep(0.5 if n == 0 else 0.01)
        yield n, os.getpid()

    got = list(forked_map(work, range(8), processes=2))
    assert [n for n, _ in got] == list(range(8))
    first = got[0][1]
    assert all(pid != first for _, pid in got[1:])


def test_what_waits_in_the_parent_is_bounded_and_the_results_are_complete():
    chunk = 256 * 1024

    def big(n):
        for i in range(12):
            yield bytes([n]) * chunk + i.to_bytes(4, "little")

    results = forked_map(big, range(6), processes=3, max_buffered_bytes=chunk)
    got = []
    for result in results:
        got.append(result)
        time.sleep(0.005)  # a slow consumer: the children run ahead until the bound stops them
    assert got == [bytes([n]) * chunk + i.to_bytes(4, "little") for n in range(6) for i in range(12)]
    message = len(pickle.dumps(got[0], protocol=pickle.HIGHEST_PROTOCOL))
    # Each child may hold the bound plus the one message that crossed it.
    assert chunk < results.peak_buffered_bytes <= 3 * (chunk + message)


def _receiving_ahead() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "forked-map-receive-ahead"]


def _wait_for(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_receiving_ahead_takes_results_before_the_first_next_within_a_shared_bound():
    chunk = 256 * 1024

    def big(n):
        for i in range(12):
            yield bytes([n]) * chunk + i.to_bytes(4, "little")

    results = forked_map(big, range(6), processes=3, max_buffered_bytes=3 * chunk,
                         receive_ahead=True)
    message = len(pickle.dumps(b"x" * (chunk + 4), protocol=pickle.HIGHEST_PROTOCOL))
    # Nobody has asked for a result yet: the thread receives up to each child's share of
    # the bound (a third of it here), plus the one message that crosses it.
    assert _wait_for(lambda: results.peak_buffered_bytes > 2 * chunk)
    time.sleep(0.2)  # time to overshoot, if the shares did not hold
    assert results.peak_buffered_bytes <= 3 * (chunk + message)
    assert len(_receiving_ahead()) == 1
    got = []
    for result in results:
        got.append(result)
        time.sleep(0.002)  # a slow consumer: children run ahead up to the whole bound each
    assert not _receiving_ahead()  # stopped by the first next()
    assert got == [bytes([n]) * chunk + i.to_bytes(4, "little") for n in range(6) for i in range(12)]
    assert results.peak_buffered_bytes <= 3 * (3 * chunk + message)


def test_closing_before_the_first_next_stops_the_receiver_and_the_children():
    def endless(n):
        while True:
            yield n

    results = forked_map(endless, range(4), processes=2, receive_ahead=True)
    assert _wait_for(lambda: results.peak_buffered_bytes > 0)
    pids = results.pids
    results.close()
    assert not any(_alive(pid) for pid in pids)
    assert not _receiving_ahead()


def test_started_results_are_taken_once_and_closed_at_exit_if_nobody_took_them():
    def endless(n):
        while True:
            yield n

    with started_ahead("k1", forked_map(endless, range(4), 2, receive_ahead=True)):
        taken = take_started("k1")
        assert take_started("k1") is None and take_started("other") is None
        assert next(taken) == 0
    assert next(taken) == 0  # taken: the block's exit leaves it to its taker
    taken.close()
    untaken = forked_map(endless, range(4), 2, receive_ahead=True)
    refused = forked_map(endless, range(4), 2, receive_ahead=True)
    with started_ahead("k2", untaken):
        with pytest.raises(ValueError, match="already started"), started_ahead("k2", refused):
            pass
        assert not any(_alive(pid) for pid in refused.pids)  # refused: stopped at once
        assert all(_alive(pid) for pid in untaken.pids)
    assert not any(_alive(pid) for pid in untaken.pids)
    assert take_started("k2") is None


def _framed_in_place(payloads: list[bytes]) -> FramedRecords:
    """`payloads` framed by `FramedRecords.complete`, as the vectorised encoder frames."""
    buffer = np.frombuffer(FramedRecords.frame(payloads).data, np.uint8).copy()
    ends = np.cumsum([len(p) + 16 for p in payloads])
    buffer[(ends[:, None] - np.arange(1, 5)).ravel()] = 0  # complete() fills the footers
    return FramedRecords.complete(buffer, np.array([len(p) for p in payloads]))


def test_framed_records_and_arrays_cross_out_of_band_and_arrive_intact():
    payloads = [bytes([i % 251]) * (i * 37 % 1000) for i in range(300)]

    def work(n):
        yield n, FramedRecords.frame(payloads[n:]), _framed_in_place(payloads[n:]), np.arange(n, n + 9)

    got = list(forked_map(work, range(4), processes=2))
    assert [n for n, *_ in got] == [0, 1, 2, 3]
    for n, framed, in_place, numbers in got:
        expected = FramedRecords.frame(payloads[n:])
        assert framed == expected and list(framed) == payloads[n:]
        assert in_place == expected and bytes(in_place.data) == expected.data
        assert numbers.tolist() == list(range(n, n + 9))
        # Out of band: the records are a read-only view of the buffer read from the pipe.
        assert isinstance(framed.data, memoryview) and framed.data.readonly


@pytest.mark.parametrize("receive_ahead", [False, True])
def test_an_exception_is_raised_at_its_item_after_every_earlier_result(receive_ahead):
    def work(n):
        yield n
        if n == 3:
            raise ValueError(f"bad item {n}")
        yield -n

    results = forked_map(work, range(8), processes=3, receive_ahead=receive_ahead)
    got = []
    with pytest.raises(ValueError, match="bad item 3") as caught:
        for result in results:
            got.append(result)
    assert got == [0, 0, 1, -1, 2, -2, 3]
    if hasattr(caught.value, "__notes__"):  # Python 3.11+
        assert "forked converter process" in caught.value.__notes__[0]
        assert "bad item 3" in caught.value.__notes__[0]
    assert not any(_alive(pid) for pid in results.pids)


class _Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("no pickling")


def test_an_exception_that_cannot_be_pickled_arrives_as_its_text():
    def work(n):
        yield n
        if n == 1:
            raise _Unpicklable("lock held")

    with pytest.raises(RuntimeError, match="_Unpicklable: lock held"):
        list(forked_map(work, range(4), processes=2))


def test_a_child_that_dies_is_reported_with_its_item():
    def work(n):
        yield n
        if n == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        yield -n

    got = []
    with pytest.raises(WorkerDiedError, match=r"killed by SIGKILL while converting 2"):
        for result in forked_map(work, range(6), processes=2):
            got.append(result)
    assert got == [0, 0, 1, -1, 2]


def test_closing_early_kills_and_reaps_the_children():
    def endless(n):
        while True:
            yield n

    results = forked_map(endless, range(4), processes=2)
    assert next(results) == 0
    pids = results.pids
    assert all(_alive(pid) for pid in pids)
    results.close()
    assert not any(_alive(pid) for pid in pids)
    with pytest.raises(StopIteration):
        next(results)


def test_a_consumer_failure_inside_closing_stops_the_children():
    import contextlib

    def endless(n):
        while True:
            yield n

    results = forked_map(endless, range(4), processes=2)
    with pytest.raises(KeyError), contextlib.closing(results):
        for _ in results:
            raise KeyError("downstream failed")
    assert not any(_alive(pid) for pid in results.pids)


# ------------------------------------------------------------- the tabular converter

SPEC = ConversionSpec(
    features=(
        FeatureSpec(name="id", type="int64"),
        FeatureSpec(name="score", type="float"),
        FeatureSpec(name="name", type="string"),
    ),
    splits={"train": 3, "eval": 1},
)


def _write_parts(folder, parts: int = 5, rows: int = 3000):
    folder.mkdir()
    for part in range(parts):
        lines = ["id,score,name"]
        for i in range(part * rows, (part + 1) * rows):
            lines.append(f"x{i},1.5,bad" if i % 499 == 7 else f"{i},{i}.25,név{i}")
        (folder / f"part-{part}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _batches(element, fn):
    return [(b.key, b.split, list(b.records), list(b.dead_letters), b.input_count)
            for b in fn.process(element)]


def test_a_work_unit_group_gives_the_batches_of_its_units_one_by_one(tmp_path):
    _write_parts(tmp_path / "in")
    units = plan_tabular(str(tmp_path / "in" / "*.csv"), "csv")
    # A unit whose file vanished after planning: one dead letter, in its place.
    units.insert(2, WorkUnit(path=str(tmp_path / "in" / "gone.csv"), index=99))
    fn = ConvertTabular(TabularConfig(spec=SPEC, fmt="csv", batch_rows=500))
    fn.setup()
    one_by_one = [batch for unit in units for batch in _batches(unit, fn)]
    grouped = _batches(WorkUnitGroup(tuple(units), processes=3), fn)
    assert grouped == one_by_one
    letters = [json.loads(d) for b in grouped for d in b[3]]
    assert {d["reason"] for d in letters} == {"invalid_int", "missing_file"}
    assert sum(b[4] for b in grouped) == 5 * 3000 + 1


def test_in_process_plan_groups_the_units_only_when_several_processes_can_help():
    units = [WorkUnit(path=f"f{i}.csv", index=i) for i in range(3)]
    plan = ConversionPlan(converter_label="ConvertCsv", work_units=units, converter=None,
                          local_processes=8)
    grouped = in_process_plan(plan)
    [group] = grouped.work_units
    assert group == WorkUnitGroup(tuple(units), processes=3, key=group.key)
    assert group.key and group.key != in_process_plan(plan).work_units[0].key
    for single in (ConversionPlan("ConvertCsv", units, None, local_processes=1),
                   ConversionPlan("ConvertCsv", units[:1], None, local_processes=8)):
        assert in_process_plan(single) is single


def _convert(tmp_path, name: str, *extra: str) -> dict:
    out = tmp_path / name
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.to_yaml(), encoding="utf-8")
    code = cli.run(["convert", "--input", str(tmp_path / "in" / "*.csv"), "--format", "csv",
                    "--spec", str(spec), "--output", str(out), "--compression", "gzip",
                    "--batch-rows", "700", "--quiet", *extra])
    assert code == 0
    return json.loads((out / "manifest.json").read_text())


def test_the_cli_converts_on_forked_processes_with_the_same_output(tmp_path, monkeypatch):
    _write_parts(tmp_path / "in")
    calls = []
    real = tabular.forked_map

    def spy(fn, items, processes, *args, **kwargs):
        calls.append((len(items), processes, kwargs.get("receive_ahead")))
        return real(fn, items, processes, *args, **kwargs)

    monkeypatch.setattr(tabular, "forked_map", spy)
    serial = _convert(tmp_path, "serial", "--converter-processes", "1")
    assert calls == []
    forked = _convert(tmp_path, "forked", "--converter-processes", "2")
    # Started by the launcher before the pipeline ran, and taken over by the DoFn: once.
    assert calls == [(5, 2, True)]
    assert forked["shards"] == serial["shards"]  # names, records, bytes and sha256
    assert forked["counts"] == serial["counts"]
    assert forked["counts"]["dead_letter"] == sum(1 for i in range(15000) if i % 499 == 7)
    for shard in serial["shards"]:
        assert (tmp_path / "forked" / shard["path"]).read_bytes() == \
            (tmp_path / "serial" / shard["path"]).read_bytes()


@pytest.mark.parametrize("argv, parallel, expected", [
    ([], False, True),  # small local input: one process, so the converter forks
    (["--direct_running_mode=in_memory"], True, True),
    ([], True, False),  # large local input: Beam's own worker processes
    (["--direct_running_mode=multi_processing"], False, False),
    (["--runner=DataflowRunner"], False, False),
])
def test_only_the_in_process_local_runner_groups_work_units(argv, parallel, expected):
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.runners import runner_for, runs_in_process

    options = PipelineOptions(argv)
    with runner_for(options, argv, parallel):
        assert runs_in_process(options) is expected


def test_converting_ahead_is_taken_over_by_the_converter_or_stopped(tmp_path):
    _write_parts(tmp_path / "in")
    units = plan_tabular(str(tmp_path / "in" / "*.csv"), "csv")
    fn = ConvertTabular(TabularConfig(spec=SPEC, fmt="csv", batch_rows=500))
    plan = in_process_plan(ConversionPlan("ConvertCsv", units, fn, local_processes=2))
    [group] = plan.work_units
    expected = _batches(WorkUnitGroup(group.units, processes=1), fn)
    with converting_ahead(plan):
        started = forked_pool._started[group.key]
        assert _wait_for(lambda: started.peak_buffered_bytes > 0)  # converting already
        # The runner's copy of the DoFn takes the running conversion over.
        assert _batches(group, pickle.loads(pickle.dumps(fn))) == expected
    assert take_started(group.key) is None
    with converting_ahead(plan):  # a run that fails before its converter starts
        pids = forked_pool._started[group.key].pids
    assert not any(_alive(pid) for pid in pids)
    assert not _receiving_ahead()
