"""Command-line options of `tfrecord-pipeline convert`, as a Beam `PipelineOptions` view.

Every flag is accepted both with hyphens (`--max-shard-bytes`, as documented) and with
underscores (`--max_shard_bytes`, as Beam spells its own options and as Beam re-creates
options on remote workers).
"""

from __future__ import annotations

import argparse
import datetime
import re
from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions

__all__ = [
    "FORMATS",
    "IMAGE_FORMATS",
    "TABULAR_FORMATS",
    "DEFAULT_LOG_LEVEL",
    "ConvertOptions",
    "fill_date_template",
    "log_level_from",
    "parse_size",
]

TABULAR_FORMATS = ("csv", "tsv", "jsonl", "parquet")
IMAGE_FORMATS = ("image-folder", "image-manifest")
FORMATS = TABULAR_FORMATS + IMAGE_FORMATS
DEFAULT_LOG_LEVEL = "WARNING"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1024, "ki": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2, "mi": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "gi": 1024**3,
    "t": 1000**4, "tb": 1000**4, "tib": 1024**4, "ti": 1024**4,
}


def parse_size(text: str | int) -> int:
    """Parses a byte size such as `200MB`, `256MiB`, `1.5G` or `1048576`."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(str(text))
    unit = (match.group(2) or "").lower() if match else None
    if not match or unit not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: use a number with an optional unit (KB, MB, GB, KiB, MiB, GiB)"
        )
    size = int(float(match.group(1)) * _UNITS[unit])
    if size < 1:
        raise argparse.ArgumentTypeError(f"size must be at least 1 byte, got {text!r}")
    return size


def _run_date(text: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--run-date must be YYYY-MM-DD, got {text!r}") from None


def _resize(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)[xX](\d+)", text.strip())
    if not match or int(match.group(1)) < 1 or int(match.group(2)) < 1:
        raise argparse.ArgumentTypeError(f"--resize must be WIDTHxHEIGHT, e.g. 224x224, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def _rate(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"--max-error-rate must be within [0, 1], got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or a positive integer, got {text}")
    return value


def fill_date_template(path: str, run_date: datetime.date, span: int | None = None) -> str:
    """Fills {YYYY}, {MM}, {DD} and {SPAN} in a path.

    {SPAN} is `span` when given, else the run date's day number since 1970-01-01, so daily
    runs get increasing span numbers as TFX ExampleGen expects.
    """
    if span is None:
        span = (run_date - datetime.date(1970, 1, 1)).days
    replacements = {
        "{YYYY}": f"{run_date.year:04d}",
        "{MM}": f"{run_date.month:02d}",
        "{DD}": f"{run_date.day:02d}",
        "{SPAN}": str(span),
    }
    for placeholder, value in replacements.items():
        path = path.replace(placeholder, value)
    return path


# Beam defines `--dry_run` itself (a test hook for runners), so ours has no underscore
# alias and a distinct destination.
_NO_UNDERSCORE_ALIAS = {"dry-run": "convert_dry_run"}


def _flag(parser, name: str, **kwargs) -> None:
    """Adds `--a-b` together with its Beam-style alias `--a_b`."""
    names = [f"--{name}"]
    if name in _NO_UNDERSCORE_ALIAS:
        kwargs.setdefault("dest", _NO_UNDERSCORE_ALIAS[name])
    elif "-" in name:
        names.append(f"--{name.replace('-', '_')}")
    kwargs.setdefault("dest", name.replace("-", "_"))
    parser.add_argument(*names, **kwargs)


def log_level_from(argv: Sequence[str]) -> str:
    """The `--log-level` in `argv`, read without Beam: logging must be configured before the
    first `PipelineOptions`, whose constructor calls `logging.basicConfig()` itself."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    _flag(parser, "log-level", default=DEFAULT_LOG_LEVEL)
    return parser.parse_known_args(list(argv))[0].log_level


class ConvertOptions(PipelineOptions):
    """Options of a conversion run (see README: "Command line")."""

    @classmethod
    def _add_argparse_args(cls, parser):
        group = parser.add_argument_group("conversion")
        _flag(group, "input", help="input glob, image folder root or manifest (any Beam filesystem)")
        _flag(group, "format", choices=FORMATS, help="input format")
        _flag(group, "output", help="output folder (any Beam filesystem)")
        _flag(group, "spec", help="conversion spec YAML (default: inferred, written to DIR/spec.yaml)")
        _flag(group, "compression", default="none", help="none (default), gzip or zlib")
        _flag(group, "compression-level", type=int, default=None, help="codec level")
        _flag(group, "num-shards", type=_positive_int, default=None,
              help="exactly N shards per split (shuffles the data)")
        _flag(group, "max-shard-bytes", type=parse_size, default=None,
              help="roll shards at this size, e.g. 200MB (default 200MiB)")
        _flag(group, "max-shard-records", type=_positive_int, default=None,
              help="roll shards at this many records")
        _flag(group, "skip-if-empty", action="store_true", default=False,
              help="write no shard for a split without records")
        _flag(group, "dry-run", action="store_true", default=False,
              help="read a sample, print the inferred spec and an estimate; write nothing")
        _flag(group, "max-error-rate", type=_rate, default=None,
              help="fail (after writing dead letters) if more than this fraction of input "
                   "records is dead-lettered")
        _flag(group, "sample-rows", type=_positive_int, default=10000,
              help="rows sampled for type inference and --dry-run (default 10000)")
        _flag(group, "batch-rows", type=_positive_int, default=16384,
              help="rows per batch moved through Beam (default 16384)")
        _flag(group, "converter-threads", type=_non_negative_int, default=1,
              help="chunks (tabular) or images of one work unit converted at once on each "
                   "worker; 0: one per CPU the worker may use; 1 (default): no extra threads")
        _flag(group, "converter-processes", type=_non_negative_int, default=0,
              help="tabular formats on the local in-process runner: work units converted at "
                   "once in forked processes (Linux); 0 (default): one per CPU; 1: none. Other "
                   "runners spread work units over their own workers")
        _flag(group, "run-date", type=_run_date, default=None,
              help="date filling {YYYY} {MM} {DD} {SPAN} in --input/--output (default today, UTC)")
        _flag(group, "span", type=int, default=None, help="value of {SPAN} (default: days since epoch)")
        _flag(group, "overwrite", action="store_true", default=False,
              help="rewrite an output folder that already holds a committed output")
        _flag(group, "no-wait", action="store_true", default=False,
              help="submit the job and return without waiting for it (remote runners; what "
                   "Dataflow Flex Template launchers need); the manifest appears when it commits")
        _flag(group, "quiet", action="store_true", default=False, help="no progress, no summary")
        _flag(group, "log-level", default=DEFAULT_LOG_LEVEL,
              help=f"Python log level (default {DEFAULT_LOG_LEVEL})")

        images = parser.add_argument_group("images")
        _flag(images, "image-column", default=None, help="manifest column holding image paths/URIs")
        _flag(images, "label-column", default=None, help="manifest column holding labels")
        _flag(images, "split-column", default=None, help="manifest column naming the split")
        _flag(images, "labels-file", default=None,
              help="labels.txt fixing the label map (one name per line, line number = index); "
                   "other labels are dead letters (unknown_label)")
        _flag(images, "validate", choices=("header", "full"), default="header",
              help="header (default): parse headers; full: decode every image")
        _flag(images, "resize", type=_resize, default=None, help="resize to WxH")
        _flag(images, "resize-mode", choices=("fit", "fill", "stretch"), default="fit")
        _flag(images, "max-side", type=_positive_int, default=None,
              help="shrink so the longer side is at most N")
        _flag(images, "encode", choices=("jpeg", "png"), default=None, help="re-encode images")
        _flag(images, "quality", type=int, default=90, help="JPEG quality for --encode jpeg")
        _flag(images, "exif-orientation", action="store_true", default=False,
              help="apply EXIF orientation (re-encodes rotated images)")
        _flag(images, "convert-mode", choices=("RGB", "L"), default=None, help="convert pixel mode")
        _flag(images, "max-image-bytes", type=parse_size, default=64 * 1024 * 1024,
              help="larger image files are dead-lettered (default 64MiB)")
        _flag(images, "max-pixels", type=_positive_int, default=89_478_485,
              help="images with more pixels are dead-lettered (decompression-bomb guard)")
        _flag(images, "allowed-roots", default=None,
              help="comma-separated roots manifest URIs must stay within "
                   "(default: the manifest's folder and gs:// buckets named on the command line)")
