"""The element type that flows from the converters into the sink (`RecordBatch`), the work
unit, and the dead-letter document and its reason codes. Beam-free.

A conversion moves *batches*, never single rows, through Beam: Beam's per-element overhead is
of the order of encoding one Example, so a row-at-a-time graph cannot be fast.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from transforms.splits import check_split_name

__all__ = ["DEFAULT_SPLIT", "DeadLetterError", "IMAGE_REASONS", "REASONS", "SEQUENCE_REASONS",
           "TABULAR_REASONS", "RecordBatch", "WorkUnit", "batch_key", "dead_letter", "unit_of"]

#: The split name used when a conversion declares no splits.
DEFAULT_SPLIT = "data"

#: Dead-letter reason codes of the tabular conversion (also image manifests' unparsable rows).
TABULAR_REASONS = {
    "invalid_int": "text in an int64 column is not an integer",
    "invalid_float": "text in a float column is not a number",
    "int_out_of_range": "an integer outside the int64 range",
    "float_out_of_range": "a finite number outside the float32 range",
    "nan_rejected": "NaN or an infinity in a float column with nan: reject",
    "value_too_long": "a bytes/string value longer than max_bytes_length",
    "missing_required": "a required feature's value is missing",
    "wrong_type": "a JSON/Parquet value of a type the feature cannot take",
    "invalid_encoding": "bytes that are not valid in the input's encoding",
    "ragged_row": "a CSV row with more or fewer fields than the header",
    "invalid_json": "a JSON Lines line that is not a JSON object",
    "unterminated_quote": "a CSV quoted field that never closes: each line it swallows",
    "unreadable_file": "a file that cannot be opened or parsed (one dead letter per file)",
    "missing_file": "a planned input file (or a manifest's image) that no longer exists",
}

#: Dead-letter reason codes of the image conversions, beyond the tabular ones.
IMAGE_REASONS = {
    "empty_file": "the file has zero bytes",
    "truncated_image": "the image data ends early (no JPEG EOI, PNG IEND, short GIF/BMP/WebP)",
    "not_an_image": "the bytes are not an image (e.g. a text or HTML file named .jpg)",
    "unsupported_format": "an image format or variant that cannot be stored decodably",
    "corrupt_image": "the image structure is invalid or its data does not decode",
    "decompression_bomb": "more pixels (over all frames) than --max-pixels",
    "image_too_large": "the file is larger than --max-image-bytes (not read)",
    "unreadable_uri": "the path exists but cannot be read (permissions, I/O, bad URI)",
    "unknown_label": "the label (or label folder) is not in the given label list",
    "missing_label": "the manifest row has no label although --label-column is given",
    "invalid_label": "a label (manifest cell or folder name) labels.txt cannot hold: a line "
                     "break, white space at either end, or bytes invalid in UTF-8",
    "outside_allowed_roots": "the path (after .. and symlinks) is outside --allowed-roots",
    "hidden_file": "a hidden file or a file inside a hidden folder of the image tree",
    "not_an_image_extension": "a file in the image tree without an image extension",
    "no_label": "a file directly in the image-folder root, not in a label folder",
    "symlinked_folder": "a symlink to a folder in the image tree (not followed)",
    "missing_image_path": "the manifest row's image column is empty",
    "invalid_split": "the manifest row's split column is empty or not a valid split name",
    "unknown_split": "the manifest row's split is not a declared split (the spec's splits, "
                     "else train, validation, test)",
}

#: Dead-letter reason codes of the sequence conversion, beyond the tabular ones.
SEQUENCE_REASONS = {
    "missing_group_key": "a row whose group_by column is missing",
    "missing_order_value": "a row whose order_by feature is missing or NaN",
    "context_mismatch": "a group whose context feature varies between rows",
    "sequence_truncated": "a row beyond max_length of its group with overflow: truncate",
    "group_too_large": "a row of a group with more rows than max_group_rows",
}

#: Every dead-letter reason code: the one registry (stable; the README lists exactly these,
#: which a test checks, as it checks that the code writes no other).
REASONS = {**TABULAR_REASONS, **IMAGE_REASONS, **SEQUENCE_REASONS}


def batch_key(source_index: int, chunk_index: int) -> str:
    """A sortable key of a chunk of an input: shards are ordered by the smallest key they
    hold, so output naming does not depend on which worker or bundle processed a chunk."""
    return f"{source_index:08d}:{chunk_index:08d}"


def unit_of(key: str) -> str:
    """The work unit part of a batch key."""
    return key.split(":", 1)[0]


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """One independently readable piece of input, planned on the launcher: `index` is its
    position in the sorted plan (`batch_key`), `start`/`end` an optional byte or row-group
    range of `path`, `paths` the group of small files of an image unit, `extra` format
    specific, JSON-serialisable details (e.g. a label for each path)."""

    path: str
    index: int
    start: int | None = None
    end: int | None = None
    paths: tuple[str, ...] = ()
    extra: Any = None

    @property
    def size(self) -> int:
        """The bytes the unit reads, as planned (`extra["size"]`); 0 when not known."""
        return int((self.extra or {}).get("size") or 0)


@dataclasses.dataclass(frozen=True)
class RecordBatch:
    """The outcome of converting one input chunk, for one split.

    Attributes:
      key: `batch_key`; unique per (chunk, split).
      records: serialized Examples, in input order: a list, or `FramedRecords` already
        framed by the converter (the sink writes them as they are).
      dead_letters: one `dead_letter` document (no trailing newline) per input record of
        this chunk and split that could not be converted.
      input_count: the input records of this chunk and split the converter read: the sink
        proves input == written + dead-lettered over the whole run.
      record_rows: the input records `records` hold together when a record holds several
        (a SequenceExample holds a group of rows); None: one each. The manifest then counts
        `written_rows` beside `written`. With sequences the reading step yields `input_count`
        and the rows' dead letters, the grouping step the sequences with `record_rows`, so
        per split input == `rows_written` + dead letters holds across the shuffle too.
      feature_presence: (feature, records carrying it, min values, max values) per feature
        (`transforms.stats.presence`); None when the converter does not count it.
      feature_stats: `transforms.stats.sketches.BatchStats`; None when not computed.
    """

    key: str
    split: str
    records: Sequence[bytes] = ()
    dead_letters: Sequence[bytes] = ()
    input_count: int = 0
    record_rows: int | None = None
    feature_presence: tuple[tuple[str, int, int, int], ...] | None = None
    feature_stats: Any = None

    def __post_init__(self):
        check_split_name(self.split, dead_letters=True)

    @property
    def rows_written(self) -> int:
            return len(self.records) if self.record_rows is None else self.record_rows


def dead_letter(
    *,
    source: str,
    reason: str,
    message: str,
    split: str | None,
    row: int | None = None,
    column: str | None = None,
    raw: bytes | str | None = None,
    **details: Any,
) -> bytes:
    """One dead-letter document: `reason` is a code of `REASONS`; `split` None when the
    record belongs to none (`DEAD_LETTER_SPLIT`); `row` is 1-based within `source` (data rows,
    header excluded); `raw` is stored as text when valid UTF-8, else base64; `details` are
    further JSON-serialisable fields (e.g. `line`, `label`)."""
    text, encoding = (None, "none") if raw is None else (raw, "utf-8")
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(raw).decode("ascii"), "base64"
    doc = {"source": source, "row": row, "column": column, "reason": reason, "message": message,
           "split": split, "raw": text, "raw_encoding": encoding, **details}
    doc = {key: _valid_text(value) if isinstance(value, str) else value for key, value in doc.items()}
    return json.dumps(doc, ensure_ascii=False, sort_keys=True, default=str).encode("utf-8")


def _valid_text(text: str) -> str:
    """`text`, with the bytes invalid in UTF-8 that a local path carries as surrogate escapes
    shown as `\\xfe`: a dead letter is valid UTF-8 JSON, whose strings Beam (and any reader)
    can encode again."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class DeadLetterError(ValueError):
    """An input record that cannot be converted: the base of every per-record error, with
    its `reason` code, `message` (also `str(error)`) and failing `column` (or None)."""

    def __init__(self, reason: str, message: str, column: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.column = column
