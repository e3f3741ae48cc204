"""Large CSV/TSV and JSON Lines files cut into byte-range work units (`split_units`,
`byte_ranges`): every row read exactly once at any cut, dead letters at their true row and
line, the same output as the whole file, and the files that stay whole say why."""

from __future__ import annotations

import collections
import csv
import gzip
import io
import json
import pathlib
import random

import pyarrow as pa
import pytest

from pipeline.cli import run
from pipeline.options import output_options
from tests.helpers import in_memory_args
from transforms.manifest import read_manifest
from transforms.records import WorkUnit, batch_key
from transforms.tabular.byte_ranges import TextDialect, count_range, last_record_end, open_quote_start
from transforms.tabular.plan import plan_tabular
from transforms.tabular.range_cuts import cuts_of, scan_range, scan_ranges
from transforms.tabular.read import read_chunks
from transforms.tabular.spec import ConversionSpec, CsvOptions
from transforms.tabular.split_units import (
    MIN_RANGE_BYTES,
    split_text_units,
    text_dialect,
)
from transforms.tfrecord_io import read_tfrecord_file

SEEDS = range(40)
READ_SPEC = ConversionSpec(features=(), include_unlisted=True, csv=CsvOptions())


# ------------------------------------------------------------------------------ inputs

def _cell(rng: random.Random, i: int, newline: str) -> str:
    """A CSV cell of every awkward kind (as written in the file)."""
    return rng.choice([
        f"plain {i}",
        f'"quoted, with a delimiter {i}"',
        f'"two{newline}lines {i}"',
        f'"escaped ""quotes"" {i}"',
        f'"""quoted start"" then{newline}{newline}blank line {i}"',
        f'5" tall {i}',  # a quote inside an unquoted field is an ordinary character
        f"multi-byte é€😀 {i}",
        '""',  # a quoted empty string
        "",  # missing
        f'"{newline}"',  # a field that is one line end
        f"é{i}€",
    ])


def _tricky_csv(rng: random.Random, rows: int, *, crlf: bool, bom: bool,
                final_newline: bool) -> bytes:
    newline = "\r\n" if crlf else "\n"
    lines = ["id,text,n,more"]
    for i in range(rows):
        if rng.random() < 0.03:
            lines.append("")  # a blank line is not a row
        if rng.random() < 0.03:
            lines.append(f'{i},"ragged {newline} row"')  # a ragged row (a dead letter)
            continue
        n = rng.choice([str(i), "", "not-a-number"])
        lines.append(f"{i},{_cell(rng, i, newline)},{n},{_cell(rng, i, newline)}")
    text = newline.join(lines) + (newline if final_newline else "")
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")


def _jsonl(rng: random.Random, rows: int) -> bytes:
    lines = []
    for i in range(rows):
        kind = rng.random()
        if kind < 0.04:
            lines.append(b"")
        elif kind < 0.07:
            lines.append(b"  \t ")  # whitespace only: not a row
        elif kind < 0.10:
            lines.append(b'{"id": %d, "t": "\xff\xfe"}' % i)  # not UTF-8: invalid_encoding
        elif kind < 0.12:
            lines.append(b"[" * 50000)  # nested deeper than the parser follows
        elif kind < 0.15:
            lines.append(b'{"id": %d, "t": ' % i)  # invalid JSON
        else:
            text = rng.choice(["x", "é€😀", "a\nb", 'quote " inside'])  # \n: escaped by JSON
            lines.append(json.dumps({"id": i, "t": text}, ensure_ascii=False).encode())
        if rng.random() < 0.1:
            lines[-1] += b"\r"  # a CRLF line end
    return b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")


# ------------------------------------------------------------------------------ helpers

def _rows(units, fmt: str, spec: ConversionSpec = READ_SPEC) -> list[tuple]:
    """Every row read from the units: (row, raw, details), failures included, in read order."""
    out = []
    for unit in units:
        for chunk in read_chunks(unit, fmt, spec, 64):
            for i in range(chunk.num_rows):
                out.append((int(chunk.row_numbers[i]), chunk.raw(i), chunk.details(i)))
            for failure in chunk.failures:
                out.append((failure.row, failure.raw, failure.details))
    return out


def _range_scans(read_at, size: int, targets, dialect: TextDialect, block_bytes: int = 4096):
    """The ranges of a file (`read_at`: a seekable binary file of `size` bytes) cut at
    `targets`, each counted on its own as the launcher and the workers count them."""
    cuts = [0, *sorted(set(targets)), size]
    return [scan_range(read_at, k, cuts, dialect, block_bytes) for k in range(len(cuts) - 1)]


def _cut(read_at, size: int, targets, dialect: TextDialect, block_bytes: int = 4096):
    """The cut of a file at `targets`, as the launcher and the workers make it: each range
    counted on its own (`_range_scans`), then chained."""
    return cuts_of(_range_scans(read_at, size, targets, dialect, block_bytes), size, dialect)[0]


def _units_at(path: pathlib.Path, fmt: str, targets, csv_options=None) -> list[WorkUnit]:
    """The byte-range units of `path` cut at `targets` (each candidate that is a record start)."""
    dialect, why = text_dialect(fmt, csv_options or CsvOptions())
    assert why is None
    with open(path, "rb") as f:
        scan = _cut(f, path.stat().st_size, targets, dialect)
    return [WorkUnit(str(path), k, start=start, end=end, extra=extra)
            for k, (start, end, extra) in enumerate(scan_ranges(scan))]


def _reference_record_starts(data: bytes, header: bool) -> dict[int, tuple[int, int]]:
    """Byte-by-byte reading as Arrow's CSV parser does: record start after an LF that ends a
    record -> (data rows before, LF bytes before)."""
    starts, i, n = {}, 0, len(data)
    if data.startswith(b"\xef\xbb\xbf"):
        i = 3
    state, record_start, records = "start", i, 0
    counted, lfs = 0, 0  # LF bytes in data[:counted]
    while i < n:
        c = data[i]
        if state == "quoted":
            if c == 0x22:
                if i + 1 < n and data[i + 1] == 0x22:
                    i += 2
                    continue
                state = "field"
            i += 1
            continue
        if c in (0x0A, 0x0D):
            records += i > record_start
            if c == 0x0D and i + 1 < n and data[i + 1] == 0x0A:
                i += 1
            i += 1
            state, record_start = "start", i
            if data[i - 1] == 0x0A and (records or not header):
                counted, lfs = i, lfs + data.count(b"\n", counted, i)
                starts[i] = (records - header, lfs)
            continue
        if state == "start" and c == 0x22:
            state = "quoted"
        else:
            state = "start" if c == 0x2C else "field"
        i += 1
    return starts


def _expected_boundaries(data: bytes, targets, header: bool) -> list[tuple[int, int, int]]:
    """(offset, rows before, lines before) of the first record start at or after each target,
    by the byte-by-byte reading; targets in one record share it."""
    starts = _reference_record_starts(data, header)
    expected = []
    for target in sorted(set(targets)):
        after = [s for s in sorted(starts) if target <= s < len(data)]
        if after and (not expected or expected[-1][0] != after[0]):
            expected.append((after[0], *starts[after[0]]))
    return expected


def _found(scan) -> list[tuple[int, int, int]]:
    return [(b.offset, b.rows_before, b.lines_before) for b in scan.boundaries]


def convert(*args: str) -> int:
    return run(["convert", *args, *in_memory_args()])


def _output(folder: pathlib.Path) -> tuple[dict, list, dict]:
    """(sorted records per split, sorted dead letters, counts) of a committed output."""
    manifest = read_manifest(str(folder))
    records = collections.defaultdict(list)
    for shard in manifest.shards:
        records[shard.split].extend(read_tfrecord_file(str(folder / shard.path)))
    dead = []
    for entry in manifest.dead_letter_files:
        dead += [json.loads(line) for line in (folder / entry.path).read_text().splitlines()]
    return ({split: sorted(values) for split, values in records.items()},
            sorted(dead, key=lambda d: json.dumps(d, sort_keys=True)), manifest.counts.to_dict())


SPEC = """\
features:
  - {name: id, type: int64, required: true}
  - {name: text, type: string}
  - {name: n, type: int64}
  - {name: more, type: string}
splits: {train: 60, test: 40}
split_key: [id]
"""


# ------------------------------------------------------------------------------ the scan

def byte_soup(rng: random.Random, shortest: int, longest: int) -> tuple[bytes, bool]:
    """(Random CSV bytes of quotes, delimiters, line ends and multi-byte characters, sometimes
    after a byte order mark; whether the file has a header)."""
    alphabet = [b"a", b",", b'"', b'""', b"\n", b"\r\n", b"\r", b" ", b"\xc3\xa9"]
    data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(shortest, longest)))
    if rng.random() < 0.2:
        data = b"\xef\xbb\xbf" + data
    return data, rng.random() < 0.5


def test_a_block_is_cut_where_its_last_record_ends_and_an_open_quote_where_its_record_starts():
    """The CSV reader's block cuts (`last_record_end`, from a block's tail where it can) are
    true record starts, none earlier than the block's last LF that ends a record; a file's
    last block ending inside quotes is known with the start of the record left open.

    1,000 seeds hit every class of case that 3,000 did (long or short block x tail or whole
    reading x open quote x a cut at 0 or past a CR, at the block's last LF or later)."""
    dialect = TextDialect("csv", quote=0x22, delimiter=0x2C)
    for seed in range(1000):
        rng = random.Random(seed)
        data, _ = byte_soup(rng, 0, 120)
        data = data.removeprefix(b"\xef\xbb\xbf") * rng.choice([1, 1, 20])  # long: the tail path
        after_lf = _reference_record_starts(data, header=False)
        every = {0, *after_lf, *_reference_record_starts(data.replace(b"\r", b"\n"), False)}
        cut = last_record_end(data, dialect)
        end = len(data.rstrip(b'\r"'))
        assert cut == 0 or cut in every, (seed, data, cut)
        assert cut >= max([s for s in after_lf if s <= end], default=0), (seed, data, cut)
        whole, _ = count_range(io.BytesIO(data).read, 0, dialect)
        opened = open_quote_start(data, dialect)
        assert (opened is not None) == whole.quoted_at_end, (seed, data)
        if opened is not None:
            assert opened in every, (seed, data, opened)
            assert max([s for s in after_lf if s <= len(data)], default=0) <= opened


def _quoted_csv(rng: random.Random, rows: int, line_ends_in_quotes: bool, literal_quote: bool
                ) -> bytes:
    """CSV rows of quoted and unquoted fields (escaped quotes, empty quoted strings, text
    after a closing quote), with line ends inside quotes and a quote inside an unquoted
    field only when asked."""
    cells = ['"cat"', "plain", '"a, b"', '"say ""hi"""', '""', '"x"y', ""]
    if line_ends_in_quotes:
        cells.append('"two\nlines"')
    if literal_quote:
        cells.append('5" tall')
    lines = ["id,a,b"] + [f"{i},{rng.choice(cells)},{rng.choice(cells)}" for i in range(rows)]
    return ("\n".join(lines) + rng.choice(["\n", ""])).encode()


def test_simply_quoted_csv_takes_the_fast_path_and_agrees_with_a_byte_by_byte_reading():
    """Quoted fields without line ends are scanned without the general path, exactly (but
    for the reading of a range as if it started inside quotes); a line end inside quotes
    anywhere falls back to it, exactly too."""
    fast = fell_back = 0
    for seed in range(300):
        rng = random.Random(seed)
        with_line_ends, literal_quote = seed % 3 == 0, seed % 5 == 0
        data = _quoted_csv(rng, rng.randint(1, 40), with_line_ends, literal_quote)
        targets = sorted({rng.randint(1, len(data)) for _ in range(4)})
        block_bytes = rng.choice([7, 30, 100, 4096])
        targets = [t for t in targets if t < len(data)]
        dialect = TextDialect("csv", quote=0x22, delimiter=0x2C, header=True)
        scans = _range_scans(io.BytesIO(data), len(data), targets, dialect, block_bytes)
        scan = cuts_of(scans, len(data), dialect)[0]
        assert _found(scan) == _expected_boundaries(data, targets, True), (seed, data, targets)
        # The blocks read on the general path but for those begun inside quotes (as a range
        # read as if inside is).
        general = [path for one in scans for count in (one.outside, one.inside) if count
                   for path in count.paths if path == "general"]
        # Blocks of 100 bytes and more hold whole rows (but a last row without a line end
        # may be cut in a quote run); a literal quote takes the general path.
        if block_bytes >= 100 and data.endswith(b"\n") and not with_line_ends and not literal_quote:
            assert general == [], (seed, data)
            fast += 1
        fell_back += bool(general)
    assert fast > 20 and fell_back > 20, (fast, fell_back)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_csv_file_split_anywhere_reads_every_row_once(tmp_path, seed):
    rng = random.Random(seed)
    data = _tricky_csv(rng, 150, crlf=rng.random() < 0.5, bom=rng.random() < 0.5,
                       final_newline=rng.random() < 0.5)
    path = tmp_path / "data.csv"
    path.write_bytes(data)
    whole = _rows(plan_tabular(str(path), "csv"), "csv")
    # The right answer, independently: Python's csv module over the whole file.
    records = [r for r in csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")) if r][1:]
    first_cells = [next(csv.reader(io.StringIO(raw, newline="")))[0] for _, raw, _ in whole]
    assert sorted(first_cells) == sorted(r[0] for r in records)
    assert sorted(row for row, _, _ in whole) == list(range(1, len(records) + 1))
    for _ in range(5):
        targets = sorted(rng.sample(range(1, len(data)), rng.randint(1, 12)))
        units = _units_at(path, "csv", targets)
        assert len(units) > 1
        # Cut at the first record start at or after each target, with the counts before it.
        assert [(u.start, u.extra["row_offset"], u.extra["line_offset"]) for u in units[1:]] \
            == _expected_boundaries(data, targets, True)
        split = _rows(units, "csv")
        # The same rows, each once, with the same row numbers and raw text.
        assert sorted(split, key=repr) == sorted(whole, key=repr)


def test_multi_byte_characters_across_every_cut(tmp_path):
    """Cut targets at every byte offset of a file of 2-, 3- and 4-byte characters."""
    lines = ["id,text"] + [f"{i},{'é€😀' * (i % 4)}x" for i in range(40)]
    data = "\n".join(lines).encode()
    path = tmp_path / "data.csv"
    path.write_bytes(data)
    whole = _rows(plan_tabular(str(path), "csv"), "csv")
    read = {}  # the rows of each cut (targets in one record cut alike): each cut read once
    for target in range(1, len(data)):
        units = _units_at(path, "csv", [target])
        cut = tuple((unit.start, unit.end, repr(unit.extra)) for unit in units)
        if cut not in read:
            read[cut] = _rows(units, "csv")
        assert read[cut] == whole, target
    assert len(read) == 41  # a cut before each of the 40 data rows, and none (in the last row)


def test_a_byte_order_mark_is_dropped_at_the_file_start_only(tmp_path):
    """U+FEFF opening a later line is text (as in the whole file), even at a range start."""
    data = "\ufeffid,text\n" + "".join(f"\ufeff{i},\ufeff\n" for i in range(30))
    path = tmp_path / "data.csv"
    path.write_text(data, encoding="utf-8")
    whole = _rows(plan_tabular(str(path), "csv"), "csv")
    assert whole[0][1] == "\ufeff0,\ufeff"
    units = _units_at(path, "csv", range(1, len(data.encode())))
    assert len(units) == 31  # the header alone, then one per line
    assert _rows(units, "csv") == whole


@pytest.mark.parametrize("seed", SEEDS)
def test_a_json_lines_file_split_anywhere_reads_every_line_once(tmp_path, seed):
    rng = random.Random(seed)
    data = _jsonl(rng, 120)
    path = tmp_path / "data.jsonl"
    path.write_bytes(data)
    whole = _rows(plan_tabular(str(path), "jsonl"), "jsonl")
    assert len(whole) == sum(1 for line in data.split(b"\n") if line.strip())
    for _ in range(4):
        targets = sorted(rng.sample(range(1, len(data)), rng.randint(1, 10)))
        split = _rows(_units_at(path, "jsonl", targets), "jsonl")
        # Rows, raw lines and line numbers as in the whole file.
        assert sorted(split, key=repr) == sorted(whole, key=repr)


def test_a_tsv_without_quoting_splits_at_every_line(tmp_path):
    options = CsvOptions(quotechar=None)
    data = "a\tb\n" + "".join(f'{i}\t"{i}\n' for i in range(300))
    path = tmp_path / "data.tsv"
    path.write_text(data)
    spec = ConversionSpec(features=(), include_unlisted=True, csv=options)
    units = _units_at(path, "tsv", range(100, len(data), 97), options)
    assert len(units) > 10
    rows = _rows(units, "tsv", spec)
    assert [row for row, _, _ in rows] == list(range(1, 301))
    assert rows == _rows(plan_tabular(str(path), "tsv"), "tsv", spec)


# ------------------------------------------------------------------------------ planning

def _big_csv(path: pathlib.Path, rows: int = 2000, bad_row: int | None = None) -> bytes:
    lines = ["id,text,n,more"]
    for i in range(1, rows + 1):
        n = "oops" if i == bad_row else str(i * 7)
        text = f'"line one {i}\nline ""two"""' if i % 5 == 0 else f"text {i}"
        lines.append(f"{i},{text},{n},é{i}")
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(data)
    return data


def test_units_of_one_file_are_consecutive_and_keep_the_plan_order(tmp_path):
    _big_csv(tmp_path / "b.csv")
    (tmp_path / "a.csv").write_text("id,text,n,more\n1,x,2,y\n")
    _big_csv(tmp_path / "c.csv")
    plan = split_text_units(plan_tabular(str(tmp_path / "*.csv"), "csv"), "csv",
                            work_unit_bytes=4000)
    paths = [pathlib.Path(u.path).name for u in plan.units]
    assert paths[0] == "a.csv" and paths.count("b.csv") > 5 and paths.count("c.csv") > 5
    assert paths == sorted(paths)
    indices = [u.index for u in plan.units]  # a range joined to the one before leaves a gap
    assert indices == sorted(set(indices))
    for name in ("b.csv", "c.csv"):
        ranges = [(u.start, u.end) for u in plan.units if u.path.endswith(name)]
        assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
        assert ranges[-1][1] == (tmp_path / name).stat().st_size
        assert all(end - start < 2 * 4000 for start, end in ranges)
    keys = [batch_key(u.index, c) for u in plan.units for c in range(3)]
    assert keys == sorted(set(keys))
    assert plan.summary()["files_split"] == 2


def test_compressed_and_odd_files_stay_whole_and_say_why(tmp_path):
    data = _big_csv(tmp_path / "plain.csv")
    (tmp_path / "packed.csv.gz").write_bytes(gzip.compress(data, compresslevel=0))
    (tmp_path / "open.csv").write_bytes(data + b'9999,"never closed,1,x\n' + b"tail,x,1,y\n" * 50)
    plan = split_text_units(plan_tabular(str(tmp_path / "*.csv*"), "csv"), "csv",
                            work_unit_bytes=4000)
    files = plan.summary()["files"]
    assert files[str(tmp_path / "plain.csv")].endswith("byte ranges")
    assert "compressed" in files[str(tmp_path / "packed.csv.gz")]
    assert "quoted field" in files[str(tmp_path / "open.csv")]
    counts = collections.Counter(pathlib.Path(u.path).name for u in plan.units)
    assert counts["packed.csv.gz"] == counts["open.csv"] == 1 and counts["plain.csv"] > 5
    utf16 = split_text_units(plan.units[:1], "csv", CsvOptions(encoding="utf-16"), 4000)
    assert "not cut at byte offsets" in utf16.summary()["files"][str(tmp_path / "open.csv")]


@pytest.fixture(scope="module")
def sized_csv(tmp_path_factory) -> pathlib.Path:
    """A folder of big.csv, a file of 2.25 MIN_RANGE_BYTES (quoted fields with line ends in
    every row), and small.csv; tests only read it."""
    folder = tmp_path_factory.mktemp("sized")
    row = b'%07d,"a field\nover two lines",7,x\n'
    rows = 9 * MIN_RANGE_BYTES // 4 // len(row % 0)
    (folder / "big.csv").write_bytes(b"id,text,n,more\n" + b"".join(row % i for i in range(rows)))
    (folder / "small.csv").write_text("id,text,n,more\n1,x,2,y\n")
    return folder


def _table(units, fmt: str) -> tuple[pa.Table, list[tuple]]:
    """What `_rows` reads, column by column (for files of millions of rows): (the parsed rows'
    row numbers and cells, in read order; the failures). A CSV row's raw text is written
    from its cells and its details are empty, so equal tables read equal `_rows`."""
    tables, failures = [], []
    for unit in units:
        for chunk in read_chunks(unit, fmt, READ_SPEC, 64):
            if chunk.num_rows:
                tables.append(pa.table({"row": chunk.row_numbers, **chunk.columns}))
            failures += [(failure.row, failure.raw, failure.details) for failure in chunk.failures]
    return pa.concat_tables(tables), failures


def test_few_work_units_are_cut_for_balance_but_not_below_the_minimum_range(sized_csv):
    """A file below --work-unit-bytes is still cut when the plan has fewer units than asked
    for (balance), into ranges of at least MIN_RANGE_BYTES; small files stay whole."""
    units = plan_tabular(str(sized_csv / "*.csv"), "csv")
    alone = split_text_units(units, "csv")  # nothing asked: one unit per file
    assert len(alone.units) == 2 and alone.balance_bytes is None
    balanced = split_text_units(units, "csv", balance=True)
    ranges = [u for u in balanced.units if u.path.endswith("big.csv")]
    assert len(ranges) == 2 and all(u.end - u.start >= MIN_RANGE_BYTES for u in ranges)
    assert balanced.summary()["balance_range_bytes"] == MIN_RANGE_BYTES
    (table, failures), (whole, whole_failures) = _table(balanced.units, "csv"), _table(units, "csv")
    assert table.num_rows == whole.num_rows > 500_000 and failures == whole_failures
    assert table.equals(whole)


def test_the_work_units_are_the_same_for_any_number_of_processes(tmp_path, capsys, sized_csv):
    """Balance is a constant rule: the units (so the output's bytes) never depend on the
    parallelism."""
    plans = {}
    for processes in ("1", "2", "3"):
        assert convert("--input", str(sized_csv / "big.csv"), "--format", "csv", "--output",
                       str(tmp_path / "out"), "--dry-run", "--converter-processes", processes) == 0
        summary = json.loads(capsys.readouterr().out)
        plans[processes] = (summary["work_units"], summary["work_unit_splitting"])
    assert plans["1"] == plans["2"] == plans["3"]
    assert plans["1"][0] == 2


def test_work_unit_bytes_is_not_an_output_option():
    assert "work_unit_bytes" not in output_options()


# ------------------------------------------------------------------------------ end to end

def test_dead_letters_in_a_later_range_keep_their_true_row(tmp_path):
    path = tmp_path / "data.csv"
    data = _big_csv(path, bad_row=1500)
    plan = split_text_units(plan_tabular(str(path), "csv"), "csv", work_unit_bytes=4096)
    bad_offset = data.index(b"\n1500,") + 1
    (holder,) = [u for u in plan.units if u.start <= bad_offset < u.end]
    assert holder.index >= 2  # a range well after the first
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "out"
    assert convert("--input", str(path), "--format", "csv", "--spec", str(tmp_path / "spec.yaml"),
                   "--output", str(out), "--work-unit-bytes", "4KB", "--max-error-rate", "1") == 0
    _, dead, counts = _output(out)
    assert [(d["row"], d["reason"], d["raw"].split(",")[0]) for d in dead] == \
        [(1500, "invalid_int", "1500")]
    assert counts["input"] == 2000


def test_json_lines_dead_letters_in_a_later_range_keep_their_row_and_line(tmp_path):
    lines = [json.dumps({"id": i, "text": "é" * (i % 7)}) for i in range(1, 1001)]
    lines[799] = '{"id": 800, "text": '  # row 800
    lines.insert(10, "")  # so line numbers and rows differ
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    units = split_text_units(plan_tabular(str(path), "jsonl"), "jsonl", work_unit_bytes=4096).units
    assert len(units) > 3
    rows = _rows(units, "jsonl")
    (bad,) = [r for r in rows if r[1].startswith(b'{"id": 800,')]
    assert bad[0] == 800 and bad[2] == {"line": 801}  # the blank line 11 is no row


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_split_output_equals_the_whole_file_output(tmp_path, fmt):
    rng = random.Random(7)
    path = tmp_path / f"data.{fmt}"
    if fmt == "csv":
        data = _tricky_csv(rng, 800, crlf=True, bom=True, final_newline=False)
    else:
        data = _jsonl(rng, 800)
    path.write_bytes(data)
    (tmp_path / "spec.yaml").write_text(SPEC)
    outputs = {}
    for size in ("1GB", "4KB"):
        out = tmp_path / f"out-{size}"
        assert convert("--input", str(path), "--format", fmt, "--spec", str(tmp_path / "spec.yaml"),
                       "--output", str(out), "--work-unit-bytes", size, "--max-error-rate", "1") == 0
        outputs[size] = _output(out)
    whole, split = outputs["1GB"], outputs["4KB"]
    assert split == whole
    records, dead, counts = split
    assert sum(len(r) for r in records.values()) > 300 and len(dead) > 20
    assert counts["input"] == counts["written"] + counts["dead_letter"]


def test_dry_run_summary_says_how_files_were_split(tmp_path, capsys):
    _big_csv(tmp_path / "big.csv")
    (tmp_path / "small.csv").write_text("id,text,n,more\n1,x,2,y\n")
    (tmp_path / "packed.csv.gz").write_bytes(gzip.compress((tmp_path / "big.csv").read_bytes()))
    assert convert("--input", str(tmp_path / "*.csv*"), "--format", "csv", "--output",
                   str(tmp_path / "out"), "--dry-run", "--work-unit-bytes", "4KB") == 0
    summary = json.loads(capsys.readouterr().out)
    splitting = summary["work_unit_splitting"]
    assert splitting["work_unit_bytes"] == 4000
    assert splitting["files_split"] == 1 and splitting["files_kept_whole"] == 1
    assert splitting["files"][str(tmp_path / "big.csv")] == \
        f"{splitting['byte_range_units']} byte ranges"
    assert splitting["files"][str(tmp_path / "packed.csv.gz")].startswith("one unit: compressed")
    assert str(tmp_path / "small.csv") not in splitting["files"]
    assert summary["work_units"] == splitting["byte_range_units"] + 2
