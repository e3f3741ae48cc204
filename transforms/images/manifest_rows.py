"""What the rows of an image manifest become: `ManifestRows`, one definition used twice.

* In the workers, `ManifestRows.items(unit)` reads the byte range of the manifest a work
  unit names (or the whole manifest) and turns each row into a planned item: an image to
  read, or a dead letter with its reason. The plan carries byte ranges, never rows.
* On the launcher, `ManifestRows.survey(unit)` reads the manifest once, one chunk at a
  time, for what must be known before any worker starts: the row count (the dry-run's
  exact count), the label texts (the default label map) and the split names used.

Rows are read by the tabular readers (`transforms.tabular.read`), so a manifest's cells
follow exactly the tabular conversion's rules; a byte range's rows keep their numbers in
the whole file (`transforms.tabular.split_units`).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import pyarrow as pa

from transforms.images.config import SPLIT_DIRECTORIES, planned_item
from transforms.images.labels import label_problem
from transforms.images.paths import is_within_roots, resolve_reference, uri_dirname
from transforms.records import DEFAULT_SPLIT, WorkUnit
from transforms.splits import DEAD_LETTER_SPLIT, SplitAssigner, check_split_name
from transforms.tabular.chunks import Chunk
from transforms.tabular.read import read_chunks
from transforms.tabular.spec import ConversionSpec, CsvOptions, FeatureSpec
from transforms.tabular.values import RowConverter, has_escapes

__all__ = ["ManifestRows", "ManifestSurvey", "text_cell"]

_BATCH_ROWS = 1 << 16  # rows per chunk read from a manifest
# Feature names under which the read spec reads the image, label, split and split-key
# columns (as text); no real feature is named like this.
_READ_PREFIX = "\x00manifest column "


def text_cell(value: Any) -> str | None:
    """A manifest cell as label, split or path text: stripped, None when missing or blank."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value).strip()
    return text or None


class _Row(NamedTuple):
    """One data row of a manifest: its cells, or why it cannot be read."""

    number: int  # 1-based data row number in the whole file (header and blank lines not counted)
    values: Mapping[str, Any] | None  # column -> cell; None for a failed row
    raw: Any  # the raw record, for dead letters
    failure: tuple[str, str] | None  # (reason, message) of a failed row


@dataclasses.dataclass(frozen=True)
class ManifestSurvey:
    """What the launcher learns from reading a manifest once."""

    rows: int  # data rows, failed ones included (each becomes a record or a dead letter)
    label_texts: frozenset[str]  # the distinct non-blank label cells of the rows that parse
    splits: tuple[str, ...]  # the declared split names the split column uses, in first-seen order

    @classmethod
    def of(cls, surveys: Iterable[ManifestSurvey]) -> ManifestSurvey:
        """The survey of several manifests, from theirs."""
        surveys = list(surveys)
        return cls(sum(s.rows for s in surveys), frozenset().union(*(s.label_texts for s in surveys)),
                   tuple(dict.fromkeys(split for s in surveys for split in s.splits)))


@dataclasses.dataclass(frozen=True)
class ManifestRows:
    """How to turn the rows of manifests into planned items; a work unit names its manifest
    (`WorkUnit.path`), against whose folder relative image paths resolve. The columns: see
    `plan.plan_image_manifest`."""

    fmt: str  # "csv", "tsv" or "jsonl"
    image_column: str
    label_column: str | None = None
    split_column: str | None = None
    roots: tuple[str, ...] = ()  # the allowed roots every image URI must lie in
    labels: tuple[str, ...] = ()  # the label map (index = position); empty: no label
    extra_spec: ConversionSpec | None = None  # the conversion spec of the other columns
    csv: CsvOptions = CsvOptions()
    splits: tuple[tuple[str, float], ...] = ()  # (name, weight), hashed when no split column
    split_key: tuple[str, ...] = ()  # the columns hashed for that (default: the image URI)
    declared_splits: tuple[str, ...] = SPLIT_DIRECTORIES  # the names a split column may use

    @property
    def named_columns(self) -> tuple[str, ...]:
        return tuple(c for c in (self.image_column, self.label_column, self.split_column) if c)

    @property
    def unknown_split(self) -> str:
        """The split of a row rejected before its split is known (unparsable, an invalid or
        undeclared split, no image path): "data" when there is no other, else none (counted in
        the run's totals only, rather than under a split the run never declared)."""
        return DEFAULT_SPLIT if self.split_column is None and not self.splits else DEAD_LETTER_SPLIT

    def rows(self, unit: WorkUnit, *, columns_only: bool = False) -> Iterator[_Row]:
        """The data rows of `unit` (the manifest or a byte range of it), in file order, with
        the extra features' cells unless `columns_only`.

        CSV/TSV cells follow the tabular rules: text, None for an empty unquoted cell, ""
        for a quoted empty one; ragged rows, invalid JSON lines and bytes invalid in the
        encoding become failed rows with the tabular reason codes. The named columns are read
        as text (a JSON value of another type makes the reader take its line-by-line path,
        so every value arrives as the JSON line holds it).
        """
        features = list(self.extra_spec.features) if self.extra_spec and not columns_only else []
        features += [FeatureSpec(name=_READ_PREFIX + column, column=column, type="string")
                     for column in dict.fromkeys([*self.named_columns, *self.split_key])]
        spec = ConversionSpec(features=tuple(features), csv=self.csv)
        for chunk in read_chunks(unit, self.fmt, spec, _BATCH_ROWS):
            rows = [_Row(int(f.row), None, f.raw, (f.reason, f.message)) for f in chunk.failures]
            rows += _parsed_rows(chunk, self.csv.encoding)
            if self.fmt == "jsonl":
                rows = [_utf8_line(row) for row in rows]
            # A reader reports a chunk's failed rows apart from its parsed ones.
            rows.sort(key=lambda row: row.number)
            yield from rows

    def survey(self, unit: WorkUnit) -> ManifestSurvey:
        """Reads the manifest once, one chunk at a time (module docstring). Raises ValueError
        when a named column is in no row of a manifest whose rows parse."""
        count, labels, splits = 0, set(), {}
        unseen = list(self.named_columns)
        keys: dict[str, None] = {}
        header: list[str] | None = None
        for row in self.rows(unit, columns_only=True):
            count += 1
            if row.values is None:
                continue
            if self.label_column is not None and (text := text_cell(row.values.get(self.label_column))):
                labels.add(text)
            if self.split_column is not None:
                split = text_cell(row.values.get(self.split_column))
                if split in self.declared_splits:
                    splits.setdefault(split)
            if self.fmt != "jsonl":
                header = header if header is not None else list(row.values)
            elif unseen:
                unseen = [c for c in unseen if row.values.get(c) is None]
                keys.update(dict.fromkeys(json.loads(row.raw)))
        if header is not None:
            unseen, keys = list(self.named_columns), dict.fromkeys(header)
        missing = [c for c in unseen if c not in keys]
        if missing and (header is not None or keys):
            shown = [k for k in keys if not k.startswith(_READ_PREFIX)]
            raise ValueError(f"{unit.path}: no column {missing[0]!r}; columns: {shown}")
        return ManifestSurvey(count, frozenset(labels), tuple(splits))

    def items(self, unit: WorkUnit) -> Iterator[dict]:
        """The planned item of every row of `unit`, in file order (`planned_item` dicts)."""
        converter = RowConverter(self.extra_spec, self.fmt) if self.extra_spec is not None else None
        assigner = SplitAssigner(dict(self.splits)) if self.splits and not self.split_column else None
        index = {label: i for i, label in enumerate(self.labels)}
        for row in self.rows(unit):
            yield self._item(row, converter, assigner, index, unit.path)

    def _item(self, row: _Row, converter: RowConverter | None, assigner: SplitAssigner | None,
              index: Mapping[str, int], manifest: str) -> dict:
        """The planned item of one row of `manifest` (a rejected one if the row is unusable)."""
        number, cells, raw = row.number, row.values, row.raw

        def rejected(reason, message, column=None, split=self.unknown_split, uri=manifest,
                     filename=None, text=None):
            return planned_item(uri, split, filename=filename or "", row=number, raw=raw,
                                text=text, reject=(reason, message, column))

        if cells is None:
            return rejected(*row.failure)
        split = self.unknown_split
        if self.split_column is not None:
            split = text_cell(cells.get(self.split_column)) or ""
            try:
                check_split_name(split)
            except ValueError as error:
                return rejected("invalid_split", str(error), self.split_column)
            if split not in self.declared_splits:
                close = difflib.get_close_matches(split.lower(), self.declared_splits, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                return rejected("unknown_split", f"split {split!r} is not declared{hint}; "
                                f"declared: {', '.join(self.declared_splits)} (declare others "
                                f"in the spec's splits)", self.split_column)
        value = text_cell(cells.get(self.image_column))
        if value is None:
            return rejected("missing_image_path", "the image column is empty", self.image_column,
                            split)
        try:
            uri = resolve_reference(value, uri_dirname(manifest))
        except ValueError as error:
            return rejected("unreadable_uri", str(error), self.image_column, split, filename=value)
        text = text_cell(cells.get(self.label_column)) if self.label_column is not None else None
        if assigner is not None:
            key = ("\x1f".join(str(cells.get(c)) for c in self.split_key) if self.split_key
                   else uri)
            split = assigner.assign(key.encode("utf-8"))
        common = {"split": split, "uri": uri, "filename": value, "text": text}
        if not is_within_roots(uri, self.roots, resolve_symlinks=False):
            return rejected("outside_allowed_roots",
                            f"{uri} is outside the allowed roots {list(self.roots)}",
                            self.image_column, **common)
        label = None
        if self.label_column is not None:
            if text is None:
                return rejected("missing_label", "the label column is empty", self.label_column,
                                **common)
            if (problem := label_problem(text)) is not None:
                return rejected("invalid_label", problem, self.label_column, **common)
            if text not in index:
                return rejected("unknown_label", f"label {text!r} is not in the label list",
                                self.label_column, **common)
            label = index[text]
        features = {}
        if converter is not None:
            try:
                features = converter.convert(cells)
            except ValueError as error:  # tabular RowError(reason, column, message)
                return rejected(getattr(error, "reason", "invalid_value"),
                                getattr(error, "message", str(error)),
                                getattr(error, "column", None), **common)
        return planned_item(uri, split, filename=value, label=label, text=text, row=number,
                            features=features, raw=raw)


def _parsed_rows(chunk: Chunk, encoding: str) -> Iterator[_Row]:
    columns = {name: _python_values(values, chunk.num_rows) for name, values in chunk.columns.items()}
    for i in range(chunk.num_rows):
        number = int(chunk.row_numbers[i])
        cells = {name: values[i] for name, values in columns.items()}
        # Bytes invalid in a CSV's encoding arrive as escape characters in the cells.
        if chunk.escapes and any(isinstance(c, str) and has_escapes(c) for c in cells.values()):
            yield _Row(number, None, chunk.raw(i),
                       ("invalid_encoding", f"the row has bytes that are not valid {encoding}"))
            continue
        yield _Row(number, cells, chunk.raw(i), None)


def _python_values(values: Any, num_rows: int) -> Sequence:
    """A chunk's column as Python values. Arrow's JSON reader keeps bytes that are not
    UTF-8 in string columns: such a value becomes None (`_utf8_line` fails its line)."""
    if not isinstance(values, (pa.Array, pa.ChunkedArray)):
        return list(values)
    try:
        return values.to_pylist()
    except UnicodeDecodeError:
        found = []
        for index in range(num_rows):
            try:
                found.append(values[index].as_py())
            except UnicodeDecodeError:
                found.append(None)
        return found


def _utf8_line(row: _Row) -> _Row:
    """A JSON Lines row with its raw line as text, or failed as `invalid_encoding` when the
    line is not UTF-8 (JSON Lines are UTF-8, whatever else the JSON parser would take)."""
    if not isinstance(row.raw, bytes):
        return row
    try:
        return row._replace(raw=row.raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        return _Row(row.number, None, row.raw, ("invalid_encoding", f"line is not UTF-8: {error}"))
