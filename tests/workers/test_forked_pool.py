"""Forked converter processes: `transforms.forked_pool` and the local runner's `ConvertOnForkedProcesses`.

The forked path must give exactly what converting the items one by one gives (same
results, same order), raise failures where they happened, stop its children however the
consumer stops, and bound what waits in the parent.
"""

from __future__ import annotations

import json
import os
import signal
import time

import apache_beam as beam
import numpy as np
import psutil
import pytest

from pipeline import cli
from pipeline.graph import ConversionPlan, ConvertOnForkedProcesses, local_processes
from transforms import forked_pool
from transforms.forked_pool import (
    WorkerDiedError,
    fork_available,
    forked_map,
)
from transforms.format.tfrecord_format import FramedRecords
from transforms.records import WorkUnit
from transforms.shard_writers import SinkConfig
from transforms.sink import ConvertAndWrite
from transforms.tabular.plan import plan_tabular
from transforms.tabular.spec import ConversionSpec, FeatureSpec
from transforms.tabular.transform import ConvertTabular, TabularConfig
from transforms.unit_result import UnitResult

pytestmark = pytest.mark.skipif(not fork_available(), reason="forked_map forks on Linux only")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# Long enough for any loaded machine; reached only when forked_map is broken.
DEADLOCK_SECONDS = 30


def _wait_for_file(path) -> None:
    """Waits until another process creates `path`; fails the test rather than hang."""
    deadline = time.monotonic() + DEADLOCK_SECONDS
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared: a child never ran"
        time.sleep(0.001)


def _results(n: int):
    """Item n yields n results, tagged with the process that computed them."""
    for i in range(n):
        yield (n, i, os.getpid())


def _later_items_first(folder, count: int):
    """`_results`, but each even item waits until the item after it has finished, so items
    finish out of order on every run (coordinated through files: they run in children)."""

    def work(n: int):
        if n % 2 == 0 and n + 1 < count:
            _wait_for_file(folder / f"finished-{n + 1}")
        results = list(_results(n))
        (folder / f"finished-{n}").touch()
        yield from results

    return work


# ------------------------------------------------------------------------ forked_map


def _children() -> set[int]:
    """Process ids of this process's living children (zombies are not alive)."""
    return {p.pid for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE}


@pytest.mark.parametrize("processes, count", [(2, 12), (3, 7), (8, 3), (2, 2)])
def test_results_come_in_item_order_as_a_plain_loop_gives_them(processes, count, tmp_path):
    items = list(range(count))
    got = list(forked_map(_later_items_first(tmp_path, count), items, processes))
    assert [r[:2] for r in got] == [(n, i) for n in items for i in range(n)]
    assert os.getpid() not in {r[2] for r in got}  # computed in children


def test_no_fork_for_one_process_one_item_or_where_fork_is_unavailable(monkeypatch):
    here = os.getpid()
    assert {r[2] for r in forked_map(_results, [1, 2, 3], processes=1)} == {here}
    assert {r[2] for r in forked_map(_results, [3], processes=4)} == {here}
    assert list(forked_map(_results, [], processes=4)) == []
    monkeypatch.setattr(forked_pool, "fork_available", lambda: False)
    assert {r[2] for r in forked_map(_results, [1, 2, 3], processes=4)} == {here}


def test_a_child_takes_the_next_item_while_another_is_still_busy(tmp_path):
    # Item 0 blocks until item 2 has been converted: only possible if the child that
    # finished item 1 takes item 2 while item 0's child is still busy.
    marker = tmp_path / "item-2-done"

    def work(n):
        if n == 0:
            _wait_for_file(marker)
        elif n == 2:
            marker.touch()
        yield n, os.getpid()

    got = list(forked_map(work, range(3), processes=2))
    assert [n for n, _ in got] == [0, 1, 2]
    assert got[0][1] != got[2][1] == got[1][1]


def _wait_until_blocked(folder) -> None:
    """Waits until every child that produced a result (its pid is in the names in `folder`)
    can run no further: blocked on a pipe (writing a result the parent does not take, or
    reading for an item) or gone. The kernel says so (`/proc/PID/wchan`): no clock decides."""
    deadline = time.monotonic() + DEADLOCK_SECONDS
    while True:
        pids = {int(name.rsplit("-", 1)[1]) for name in os.listdir(folder)}
        states = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/wchan") as wchan, open(f"/proc/{pid}/stat") as stat:
                    states.append("pipe" in wchan.read() or stat.read().split(")")[1].split()[0] == "Z")
            except FileNotFoundError:  # reaped
                states.append(True)
        if pids and all(states):
            return
        assert time.monotonic() < deadline, "the children never stopped: what waits is unbounded"
        time.sleep(0.001)


def test_what_waits_in_the_parent_is_bounded_and_the_results_are_complete(tmp_path):
    chunk = 256 * 1024

    def big(n):
        for i in range(12):
            (tmp_path / f"{n}-{i}-{os.getpid()}").touch()  # produced: seen through the folder
            yield bytes([n]) * chunk + i.to_bytes(4, "little")

    results = forked_map(big, range(6), processes=3, max_buffered_bytes=chunk)
    taken = [next(results) for _ in range(12)]  # item 0's: the parent reads the others meanwhile
    _wait_until_blocked(tmp_path)  # as far as the children can run while the consumer waits
    produced = len(os.listdir(tmp_path))
    # Item 0's 12; items 1 and 2: the bound plus the message that crossed it, plus a pipe's
    # worth each. Without the bound, items 1 and 2 would be produced whole (36 results).
    assert produced <= 12 + 2 * (2 + 1024 * 1024 // chunk + 1)
    got = [*taken, *results]
    assert got == [bytes([n]) * chunk + i.to_bytes(4, "little") for n in range(6) for i in range(12)]


def _framed_in_place(payloads: list[bytes]) -> FramedRecords:
    """`payloads` framed by `FramedRecords.complete`, as the vectorised encoder frames."""
    buffer = np.frombuffer(FramedRecords.frame(payloads).data, np.uint8).copy()
    ends = np.cumsum([len(p) + 16 for p in payloads])
    buffer[(ends[:, None] - np.arange(1, 5)).ravel()] = 0  # complete() fills the footers
    return FramedRecords.complete(buffer, np.array([len(p) for p in payloads]))


def test_framed_records_and_arrays_arrive_intact():
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


def test_an_exception_is_raised_at_its_item_after_every_earlier_result():
    def work(n):
        yield n
        if n == 3:
            raise ValueError(f"bad item {n}")
        yield -n

    others = _children()  # processes other tests left running are not ours to count
    results = forked_map(work, range(8), processes=3)
    got = []
    with pytest.raises(ValueError, match="bad item 3") as caught:
        for result in results:
            got.append(result)
    assert got == [0, 0, 1, -1, 2, -2, 3]
    if hasattr(caught.value, "__notes__"):  # Python 3.11+
        assert "forked converter process" in caught.value.__notes__[0]
        assert "bad item 3" in caught.value.__notes__[0]
    assert not _children() - others


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

    others = _children()
    results = forked_map(endless, range(4), processes=2)
    assert next(results) == 0
    assert len(_children() - others) == 2
    results.close()
    assert not _children() - others
    with pytest.raises(StopIteration):
        next(results)


def test_a_consumer_failure_inside_closing_stops_the_children():
    import contextlib

    def endless(n):
        while True:
            yield n

    others = _children()
    results = forked_map(endless, range(4), processes=2)
    with pytest.raises(KeyError), contextlib.closing(results):
        for _ in results:
            raise KeyError("downstream failed")
    assert not _children() - others


# ------------------------------------------------------------- the tabular converter

SPEC = ConversionSpec(
    features=(
        FeatureSpec(name="id", type="int64"),
        FeatureSpec(name="score", type="float"),
        FeatureSpec(name="name", type="string"),
    ),
    splits={"train": 3, "eval": 1},
)


def _write_parts(folder, parts: int = 5, rows: int = 1000):
    """CSV parts of `rows` rows each, a bad row in 499 (a dead letter); more rows than the
    converters' `--batch-rows 700`: each part converts in two batches."""
    folder.mkdir()
    for part in range(parts):
        lines = ["id,score,name"]
        for i in range(part * rows, (part + 1) * rows):
            lines.append(f"x{i},1.5,bad" if i % 499 == 7 else f"{i},{i}.25,név{i}")
        (folder / f"part-{part}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _batches(element, fn):
    return [(b.key, b.split, list(b.records), list(b.dead_letters), b.input_count)
            for b in fn.process(element)]


class _Pids(beam.DoFn):
    def process(self, unit):
        yield unit.index, os.getpid()


def test_the_local_runner_converts_its_units_on_forked_processes_in_unit_order():
    units = tuple(WorkUnit(path=f"f{i}.csv", index=i) for i in range(6))
    step = ConvertOnForkedProcesses(_Pids(), processes=2)
    step.setup()
    seen = list(step.process(units))
    assert [index for index, _ in seen] == list(range(6))
    pids = {pid for _, pid in seen}
    assert os.getpid() not in pids and len(pids) == 2


def test_local_processes_fork_only_when_several_processes_and_units_can_help():
    units = [WorkUnit(path=f"f{i}.csv", index=i) for i in range(3)]
    assert local_processes(ConversionPlan("ConvertCsv", units, None, local_processes=8)) == 3
    assert local_processes(ConversionPlan("ConvertCsv", units, None, local_processes=1)) == 1
    assert local_processes(ConversionPlan("ConvertCsv", units[:1], None, local_processes=8)) == 1


def test_forked_children_write_their_own_shards_and_send_only_unit_results(tmp_path):
    """No converted byte passes through the parent: it receives one UnitResult per unit."""
    _write_parts(tmp_path / "in")
    units = tuple(plan_tabular(str(tmp_path / "in" / "*.csv"), "csv"))
    config = SinkConfig(output_dir=str(tmp_path / "out"), run_id="forked")
    step = ConvertOnForkedProcesses(
        ConvertAndWrite(ConvertTabular(TabularConfig(spec=SPEC, fmt="csv", batch_rows=500)), config),
        processes=2)
    step.setup()
    results = list(step.process(units))
    assert all(isinstance(result, UnitResult) for result in results)
    assert [result.owner for result in results] == sorted(result.owner for result in results)
    assert sum(part.input for result in results for part in result.splits) == 5 * 1000
    assert all(os.path.exists(file.temp_path) for result in results for file in result.files)


def _convert_argv(tmp_path, name: str, *extra: str) -> list[str]:
    """The CLI arguments converting the parts under `tmp_path / "in"` into `tmp_path / name`
    (their bad rows committed as dead letters)."""
    spec = tmp_path / "spec.yaml"
    if not spec.exists():  # written once: the folder is shared by the runs compared
        spec.write_text(SPEC.to_yaml(), encoding="utf-8")
    return ["convert", "--input", str(tmp_path / "in" / "*.csv"), "--format", "csv",
            "--spec", str(spec), "--output", str(tmp_path / name), "--compression", "gzip",
            "--batch-rows", "700", "--quiet", "--max-error-rate", "1", *extra]


def _convert(tmp_path, name: str, *extra: str) -> dict:
    assert cli.run(_convert_argv(tmp_path, name, *extra)) == 0
    return json.loads((tmp_path / name / "manifest.json").read_text())


def _split_records(output, manifest: dict) -> dict[str, list[bytes]]:
    """Every split's records, shard after shard in name order (CRCs checked)."""
    from transforms.format.tfrecord_reader import iter_records

    records: dict[str, list[bytes]] = {}
    for shard in sorted(manifest["shards"], key=lambda s: s["path"]):
        with open(output / shard["path"], "rb") as handle:
            records.setdefault(shard["split"], []).extend(
                bytes(info.payload) for info in iter_records(handle, "gzip"))
    return records


def _dead_letters(output) -> list[str]:
    return sorted(line for path in (output / "dead_letter").glob("*.jsonl")
                  for line in path.read_text().splitlines())


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    """The parts under `in` and their conversion on one process into `serial`, in a folder
    made once for the tests comparing other runs with it: read only, its outputs beside it."""
    folder = tmp_path_factory.mktemp("parts")
    _write_parts(folder / "in")
    return folder, _convert(folder, "serial", "--converter-processes", "1")


def test_the_cli_gives_the_same_bytes_on_one_or_two_processes(serial_run):
    tmp_path, serial = serial_run
    forked = _convert(tmp_path, "forked", "--converter-processes", "2")
    assert forked["counts"] == serial["counts"]
    assert forked["counts"]["dead_letter"] == sum(1 for i in range(5000) if i % 499 == 7)
    assert forked["shards"] == serial["shards"]
    assert forked["dead_letter_files"] == serial["dead_letter_files"]
    assert _split_records(tmp_path / "forked", forked) == _split_records(tmp_path / "serial", serial)
    assert _dead_letters(tmp_path / "forked") == _dead_letters(tmp_path / "serial")


def test_beams_worker_processes_give_the_same_records_without_noise(serial_run):
    """Beam's own multi-process mode (chosen by the user, or by default for large inputs that
    cannot fork): the same records and dead letters as one process, nothing on stderr."""
    from tests.e2e.forked_console import console

    tmp_path, serial = serial_run
    # Not in-process: Beam's workers log through the launcher's logging, which the in-process
    # CLI of other tests has already configured. The console entry point in a process of its
    # own, forked from the fork server (which imported Beam once and configured no logging).
    done = console(_convert_argv(tmp_path, "workers", "--direct_running_mode=multi_processing",
                                 "--direct_num_workers=2"), tmp_path / "workers-console")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # --quiet, and Beam's worker start-up warning is not shown
    workers = json.loads((tmp_path / "workers" / "manifest.json").read_text())
    assert workers["counts"] == serial["counts"]
    # Bundles may fall differently, so shards may hold the records in another order.
    ours = _split_records(tmp_path / "workers", workers)
    theirs = _split_records(tmp_path / "serial", serial)
    assert {split: sorted(records) for split, records in ours.items()} == \
        {split: sorted(records) for split, records in theirs.items()}
    assert _dead_letters(tmp_path / "workers") == _dead_letters(tmp_path / "serial")


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
