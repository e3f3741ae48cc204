"""Large text files cut at record starts by the workers (`range_cuts`: `scan_range`, `cuts_of`,
`CutRangesInWorkers`): each range counted on its own, the chain finds exactly the
true record starts among the candidates, the launcher reads none of the file, and the units
read every row once, as the whole file does."""

from __future__ import annotations

import collections
import dataclasses
import io
import pathlib
import pickle
import random

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from tests.tabular.test_splittable import (
    SEEDS,
    _expected_boundaries,
    _jsonl,
    _rows,
    _tricky_csv,
    byte_soup,
)
from transforms.records import WorkUnit
from transforms.tabular import split_units
from transforms.tabular.byte_ranges import TextDialect, count_range
from transforms.tabular.plan import plan_tabular
from transforms.tabular.range_cuts import CutRangesInWorkers, cuts_of, scan_range
from transforms.tabular.split_units import split_text_units, text_dialect

CSV = TextDialect("csv", quote=0x22, delimiter=0x2C, header=True, bom=True)


def _worker_cut(data: bytes, targets, dialect: TextDialect, block_bytes: int, rng):
    cuts = [0, *targets, len(data)]
    f = io.BytesIO(data)
    scans = [scan_range(f, k, cuts, dialect, block_bytes) for k in range(len(cuts) - 1)]
    rng.shuffle(scans)  # the side input comes in any order
    return cuts_of(scans, len(data), dialect)


def test_the_chain_finds_exactly_the_first_record_start_after_each_target():
    """Random byte soup of quotes, delimiters and line ends (empty and one-byte files too),
    tiny blocks, ranges in any order: the boundaries, in file order, are the first record
    starts at or after the targets that a byte-by-byte reading of the whole file finds (after
    the header), with the same rows and lines before them; the file's end state (an unclosed
    quote) is the whole-file count's.

    A quarter of the files open with blank lines and half have a target in their first bytes,
    so that ranges starting before the header's end (outside quotes and inside them: the rare
    cases) come up at every block size. 1,000 seeds hit every class of case (block size x how
    the chain places each range x the quote state and whether the header has ended at its
    start; the fast and general paths; CRLF before a cut; BOM x header x open quote) that
    7,000 seeds of the former generators hit, as do 800 seeds from 0, 1,000, ... or 6,000."""
    boundaries = 0
    for seed in range(1000):
        rng = random.Random(seed)
        data, header = byte_soup(rng, 0, 80)
        if rng.random() < 0.25:  # blank lines open the file (after its byte order mark)
            body = data.removeprefix(b"\xef\xbb\xbf")
            data = data[:len(data) - len(body)] + rng.choice([b"\n", b"\r\n", b"\n\n", b"\r\n\n"]) + body
        targets = {rng.randint(1, max(len(data) - 1, 1)) for _ in range(rng.randint(0, 4))}
        if rng.random() < 0.5:
            targets.add(rng.randint(1, 12))  # in the header, often
        targets = sorted(t for t in targets if t < len(data))
        dialect = TextDialect("csv", quote=0x22, delimiter=0x2C, header=header, bom=True)
        scan, owners = _worker_cut(data, targets, dialect, rng.choice([1, 2, 5, 64]), rng)
        expected = _expected_boundaries(data, targets, header)
        assert [(b.offset, b.rows_before, b.lines_before) for b in scan.boundaries] == expected, \
            (seed, data, targets)
        assert sorted(owners) == [b.offset for b in scan.boundaries]
        whole = [count_range(io.BytesIO(data).read, 0, dialect, **size)[0].quoted_at_end
                 for size in ({}, {"block_bytes": 64})]
        assert [scan.open_quote] * 2 == whole, (seed, data)
        boundaries += len(expected)
    assert boundaries > 1000  # most candidates are record starts


def test_the_second_reading_stops_where_the_two_states_meet():
    """A range is counted as if its start were inside quotes too; that reading joins the
    first one at the first block end where their states agree, so it costs about a block."""
    data = b"id,text\n" + b"".join(b'%d,"a ""quoted"" field"\n' % i for i in range(5000))
    outside, inside = count_range(io.BytesIO(data[8:]).read, 8, CSV, block_bytes=4096)
    assert len(outside.paths) > 20 and len(inside.paths) == 1, (outside.paths, inside.paths)
    assert outside.records == 5000 and not outside.quoted_at_end
    # Inside quotes at the start, the first line's opening quote closes the field instead:
    # that line end still ends the record (one begun before the range), so both count alike.
    assert inside == outside


def _raw_units(path: pathlib.Path, fmt: str, count: int) -> list[WorkUnit]:
    """The planner's raw ranges of `path`: about `count`, their record starts left to the
    workers."""
    plan = split_text_units(plan_tabular(str(path), fmt), fmt,
                            work_unit_bytes=-(-path.stat().st_size // count), cut_in_workers=True)
    assert all("cut" in unit.extra for unit in plan.units)
    return list(plan.units)


def _cut(units: list[WorkUnit], dialect: TextDialect, folder: pathlib.Path, where: str
         ) -> list[WorkUnit]:
    """The units the cut gives, in plan order: as the graph's step ("beam") or before the
    run ("now", the scans mapped in this process as a Dask cluster maps them)."""
    if where == "beam":
        return _cut_in_beam(units, dialect, folder)
    cut = CutRangesInWorkers(dialect).cut_now(units, lambda fn, items: [fn(i) for i in items])
    assert [unit.index for unit in cut] == sorted(unit.index for unit in cut)
    return cut


def _cut_in_beam(units: list[WorkUnit], dialect: TextDialect, folder: pathlib.Path
                 ) -> list[WorkUnit]:
    """The units out of the transform, on Beam's local runner (each pickled to `folder`)."""
    return [unit for cut in _cut_in_one_beam_run([(units, dialect)], folder) for unit in cut]


def _cut_in_one_beam_run(groups: list[tuple[list[WorkUnit], TextDialect]], folder: pathlib.Path
                         ) -> list[list[WorkUnit]]:
    """Each group's units out of a transform of its own (its dialect), all in one pipeline on
    Beam's local runner; per group, in plan order (each unit pickled to `folder`)."""
    folder.mkdir()

    def keep(unit: WorkUnit, group: int) -> None:
        name = f"{group}-{pathlib.Path(unit.path).name}-{unit.index}.pickle"
        (folder / name).write_bytes(pickle.dumps(unit))

    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        for k, (units, dialect) in enumerate(groups):
            _ = (pipeline | f"Create{k}" >> beam.Create(units) | f"Cut{k}" >> CutRangesInWorkers(dialect)
                 | f"Keep{k}" >> beam.Map(keep, k))
    found = collections.defaultdict(list)
    for path in folder.iterdir():
        found[int(path.name.split("-", 1)[0])].append(pickle.loads(path.read_bytes()))
    return [sorted(found[k], key=lambda unit: (unit.path, unit.index)) for k in range(len(groups))]


def _tricky_file(folder: pathlib.Path, name: str, fmt: str, rng: random.Random, rows: int
                 ) -> pathlib.Path:
    path = folder / f"{name}.{fmt}"
    if fmt == "csv":
        path.write_bytes(_tricky_csv(rng, rows, crlf=rng.random() < 0.5, bom=rng.random() < 0.5,
                                     final_newline=rng.random() < 0.5))
    else:
        path.write_bytes(_jsonl(rng, rows))
    return path


_WORKER_SEEDS, _LAUNCHER_SEEDS = SEEDS[:12], SEEDS[:6]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> dict:
    """The seeded tests' files with their raw units, and those units cut in ONE Beam run (a
    transform per dialect; its side input holds the ranges of every file of the dialect), so
    that each seed pays no pipeline of its own. Tests only read it: {("worker", seed): (path,
    fmt, raw units, units cut in Beam), ("launcher", seed): (path, size, raw, units cut in Beam)}."""
    folder = tmp_path_factory.mktemp("seeded")
    found = {}
    for seed in _WORKER_SEEDS:
        rng = random.Random(seed)
        fmt = "csv" if seed % 2 else "jsonl"
        path = _tricky_file(folder, f"worker{seed}", fmt, rng, 150)
        found["worker", seed] = (path, fmt, _raw_units(path, fmt, rng.randint(3, 12)))
    for seed in _LAUNCHER_SEEDS:
        rng = random.Random(seed)
        path = _tricky_file(folder, f"launcher{seed}", "csv", rng, 300)
        size = -(-path.stat().st_size // rng.randint(3, 12))
        raw = split_text_units(plan_tabular(str(path), "csv"), "csv", work_unit_bytes=size,
                               cut_in_workers=True).units
        found["launcher", seed] = (path, size, list(raw))
    groups = {}  # dialect -> the keys of its files
    for key, (path, *_) in found.items():
        fmt = path.suffix[1:]
        groups.setdefault(CSV if key[0] == "launcher" else text_dialect(fmt)[0], []).append(key)
    dialects = list(groups)
    cut = _cut_in_one_beam_run([([u for key in groups[d] for u in found[key][2]], d) for d in dialects],
                               folder / "units")
    for dialect, units in zip(dialects, cut, strict=True):
        for key in groups[dialect]:
            mine = [u for u in units if u.path == str(found[key][0])]
            found[key] = (*found[key], mine)
    return found


@pytest.mark.parametrize("where", ["beam", "now"])
@pytest.mark.parametrize("seed", _WORKER_SEEDS)
def test_units_cut_by_the_workers_read_every_row_once(tmp_path, seeded, seed, where):
    """Through the Beam transform, and cut before the run: the units read the rows, raw
    text, row numbers and line numbers of the whole file, CSV with every awkward field and
    JSON Lines."""
    path, fmt, raw, in_beam = seeded["worker", seed]
    dialect, _ = text_dialect(fmt)
    whole = _rows(plan_tabular(str(path), fmt), fmt)
    units = in_beam if where == "beam" else _cut(list(raw), dialect, tmp_path / "units", where)
    assert units and all("cut" not in unit.extra for unit in units)
    if len(units) > 1:  # else no candidate was a record start: the file is read whole
        assert units[0].start == 0 and units[-1].end == path.stat().st_size
        assert all(a.end == b.start for a, b in zip(units, units[1:], strict=False))
    assert sorted(_rows(units, fmt), key=repr) == sorted(whole, key=repr)


@pytest.mark.parametrize("where", ["beam", "now"])
def test_a_file_ending_inside_quotes_or_unreadable_is_one_unit(tmp_path, caplog, where):
    good = tmp_path / "good.csv"
    good.write_bytes(b"id,text\n" + b"".join(b"%d,x\n" % i for i in range(400)))
    unclosed = tmp_path / "open.csv"
    unclosed.write_bytes(good.read_bytes() + b'9999,"never closed\n' + b"tail,x\n" * 50)
    missing = tmp_path / "missing.csv"
    units = [*_raw_units(good, "csv", 4), *_raw_units(unclosed, "csv", 4),
             *(dataclasses.replace(unit, path=str(missing)) for unit in _raw_units(good, "csv", 3))]
    units = [dataclasses.replace(unit, index=k) for k, unit in enumerate(units)]
    cut = _cut(units, CSV, tmp_path / "units", where)
    by_path = {}
    for unit in cut:
        by_path.setdefault(pathlib.Path(unit.path).name, []).append(unit)
    assert len(by_path["good.csv"]) == 4
    for name, index in (("open.csv", 4), ("missing.csv", 8)):
        (whole,) = by_path[name]
        assert (whole.index, whole.start, whole.end) == (index, None, None)
    assert "open.csv: read whole, as one unit: it ends inside a quoted field" in caplog.text
    assert "missing.csv: read whole, as one unit: it could not be read (FileNotFoundError" \
        in caplog.text


@pytest.mark.parametrize("seed", _LAUNCHER_SEEDS)
def test_the_launcher_cuts_the_units_the_workers_cut(tmp_path, seeded, seed):
    """One formulation wherever it runs: the launcher's cut (its threads) and the workers'
    (a Beam step, or tasks before the run) give the same units, byte for byte."""
    path, size, raw, in_beam = seeded["launcher", seed]
    launcher = split_text_units(plan_tabular(str(path), "csv"), "csv", work_unit_bytes=size).units
    assert len(launcher) > 1
    assert list(launcher) == _cut(list(raw), CSV, tmp_path / "now", "now") == in_beam


def test_the_launcher_reads_nothing_of_a_file_the_workers_cut(tmp_path, monkeypatch):
    path = tmp_path / "data.csv"
    path.write_bytes(b"id,text\n" + b"".join(b"%d,x\n" % i for i in range(2000)))

    def no_reading(*args, **kwargs):
        raise AssertionError("the launcher read the file")

    monkeypatch.setattr(split_units, "cut_now", no_reading)
    plan = split_text_units(plan_tabular(str(path), "csv"), "csv", work_unit_bytes=4000,
                            cut_in_workers=True)
    assert len(plan.units) == 4 and plan.cut_in_workers
    assert plan.summary()["files"][str(path)] == \
        "4 byte ranges, cut at record starts by the workers"
    assert [unit.extra["cut"]["range"] for unit in plan.units] == [0, 1, 2, 3]


def test_ranges_of_a_gs_file_are_cut_by_seeking_in_it(tmp_path, gcs_emulator):
    """Workers read their ranges from any Beam filesystem (here a GCS emulator), seeking."""
    from apache_beam.io.filesystems import FileSystems

    data = _tricky_csv(random.Random(3), 400, crlf=False, bom=False, final_newline=True)
    local = tmp_path / "data.csv"
    local.write_bytes(data)
    remote = f"{gcs_emulator}/in/data.csv"
    with FileSystems.create(remote) as handle:
        handle.write(data)
    raw = [dataclasses.replace(unit, path=remote) for unit in _raw_units(local, "csv", 6)]
    units = _cut_in_beam(raw, CSV, tmp_path / "units")
    assert len(units) > 3 and all(unit.path == remote for unit in units)
    on_disk = [dataclasses.replace(unit, path=str(local)) for unit in units]
    assert sorted(_rows(on_disk, "csv"), key=repr) == \
        sorted(_rows(plan_tabular(str(local), "csv"), "csv"), key=repr)
