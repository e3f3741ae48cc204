"""Command-line options of `tfrecord-pipeline convert`, as a Beam `PipelineOptions` view.

Every flag is accepted both with hyphens (`--max-shard-bytes`, as documented) and with
underscores (`--max_shard_bytes`, as Beam spells its own options and as Beam re-creates
options on remote workers).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import difflib
import functools
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.errors import UsageError
from transforms.format.compression import Compression, check_level, parse_compression
from transforms.images.config import (
    CONVERT_MODES,
    DEFAULT_MAX_IMAGE_BYTES,
    DEFAULT_MAX_PIXELS,
    DEFAULT_QUALITY,
    ENCODINGS,
    RESIZE_MODES,
    VALIDATE_MODES,
)
from transforms.input_formats import FORMATS, IMAGE_FORMATS, TABULAR_FORMATS
from transforms.stats.drift import FAIL_MODES as DRIFT_FAIL_MODES
from transforms.stats.drift import PRESENCE_DROP, PSI_THRESHOLD
from transforms.tabular.split_units import DEFAULT_WORK_UNIT_BYTES

__all__ = ["FORMATS", "IMAGE_FORMATS", "TABULAR_FORMATS", "DEFAULT_LOG_LEVEL", "REQUIRED_FLAGS",
           "ConvertOptions", "RaisingParser", "check_arguments", "command_line_path", "fill_date_template",
           "has_date_template", "log_level_from", "normalize_argv", "output_options", "parse_size"]

DEFAULT_LOG_LEVEL = "WARNING"
#: Any dead letter fails a run unless --max-error-rate allows it (BigQuery's max_bad_records
#: is 0 too): a half-converted input must not end "Committed", exit 0, in a scheduled job.
DEFAULT_MAX_ERROR_RATE = 0.0
#: Destinations of the flags every conversion needs. Not `required` in `ConvertOptions`:
#: Beam builds its parser from it for every `PipelineOptions`, with or without them.
REQUIRED_FLAGS = ("input", "format", "output")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
#: Unit -> bytes: k, kb = 1000; ki, kib = 1024; likewise m, g, t.
_UNITS = {"": 1, "b": 1, **{f"{prefix}{suffix}": (1024 if "i" in suffix else 1000) ** power
                            for power, prefix in enumerate("kmgt", 1) for suffix in ("", "b", "i", "ib")}}


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


def _flag_type(parse: Callable[[str], Any], invalid: str, accept: Callable[[Any], bool] | None = None,
               out_of_range: str = "") -> Callable[[str], Any]:
    """An argparse `type`: `parse(text)`, refused with the one line `invalid` when it raises
    ValueError, or `out_of_range` when `accept` refuses the value (both formatted with `text`)."""

    def convert(text: str):
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(invalid.format(text=text)) from None
        if accept is not None and not accept(value):
            raise argparse.ArgumentTypeError(out_of_range.format(text=text))
        return value

    return convert


_run_date = _flag_type(datetime.date.fromisoformat, "--run-date must be YYYY-MM-DD, got {text!r}")
_rate = _flag_type(float, "--max-error-rate must be a number, got {text!r}", lambda value: 0 <= value <= 1,
                   "--max-error-rate must be within [0, 1], got {text}")
_integer = _flag_type(int, "expected an integer, got {text!r}")
_positive_int = _flag_type(int, "expected an integer, got {text!r}", lambda value: value >= 1,
                           "expected a positive integer, got {text}")
_non_negative_int = _flag_type(int, "expected an integer, got {text!r}", lambda value: value >= 0,
                               "expected 0 or a positive integer, got {text}")


def _resize(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)[xX](\d+)", text.strip())
    if not match or int(match.group(1)) < 1 or int(match.group(2)) < 1:
        raise argparse.ArgumentTypeError(f"--resize must be WIDTHxHEIGHT, e.g. 224x224, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def _compression_level(text: str) -> int:
    try:
        return check_level(_integer(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def command_line_path(path: str) -> str:
    """A path as typed on the command line, made matchable by Beam's filesystems.

    Beam's local filesystem matches nothing for a glob without a folder part (`*.csv`,
    `part-*.csv`), although `./*.csv` works: such a glob is anchored to the working folder.
    """
    if "://" in path or os.path.dirname(path) or not any(ch in path for ch in "*?["):
        return path
    return os.path.join(".", path)


_PLACEHOLDERS = ("{YYYY}", "{MM}", "{DD}", "{SPAN}")
_PLACEHOLDER_LIKE = re.compile(r"\{[A-Za-z]+\}")


def fill_date_template(path: str, run_date: datetime.date, span: int | None = None) -> str:
    """Fills {YYYY}, {MM}, {DD} and {SPAN} in a path; {SPAN} is `span` when given, else the
    run date's day number since 1970-01-01, so daily runs get increasing span numbers as TFX
    ExampleGen expects. Raises ValueError for another word in braces ({D}, {yyyy}): kept as
    text, a misspelt placeholder would make every day's run write into the same folder."""
    for token in _PLACEHOLDER_LIKE.findall(path):
        if token not in _PLACEHOLDERS:
            close = difflib.get_close_matches(token.upper(), _PLACEHOLDERS, n=1, cutoff=0.4)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(f"unknown placeholder {token} in {path}{hint}; the placeholders "
                             f"are {' '.join(_PLACEHOLDERS)}")
    if span is None:
        span = (run_date - datetime.date(1970, 1, 1)).days
    values = (f"{run_date.year:04d}", f"{run_date.month:02d}", f"{run_date.day:02d}", str(span))
    for placeholder, value in zip(_PLACEHOLDERS, values, strict=True):
        path = path.replace(placeholder, value)
    return path


def has_date_template(path: str) -> bool:
    """True when `path` holds a placeholder `fill_date_template` fills."""
    return any(placeholder in path for placeholder in _PLACEHOLDERS)


# Beam defines a test-only `--dry_run` itself (TestOptions), so ours cannot register that
# spelling: `normalize_argv` maps a bare `--dry_run` to ours, and ours has its own destination.
_DRY_RUN_DEST = "convert_dry_run"


def _flag(parser, name: str, *, output: bool = False, formats: Sequence[str] = (),
          **kwargs) -> None:
    """Adds `--a-b` with its Beam-style alias `--a_b`. `output=True`: the flag changes what
    is written (`output_options()`, which go into the manifest's "options" and the run
    fingerprint); `formats`: the only --format values it applies to (`check_arguments`
    refuses it with the others, which would ignore it), () for all."""
    names = [f"--{name}"]
    if name == "dry-run":
        kwargs.setdefault("dest", _DRY_RUN_DEST)
    elif "-" in name:
        names.append(f"--{name.replace('-', '_')}")
    kwargs.setdefault("dest", name.replace("-", "_"))
    action = parser.add_argument(*names, **kwargs)
    action.changes_output = output
    action.formats = tuple(formats)


@functools.cache
def output_options() -> tuple[str, ...]:
    """Destinations of the `convert` flags marked `output=True`, in definition order."""
    parser = argparse.ArgumentParser(add_help=False)
    ConvertOptions._add_argparse_args(parser)
    return tuple(action.dest for action in parser._actions if getattr(action, "changes_output", False))


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """`convert`'s arguments with `--dry_run` spelled as ours (see `_DRY_RUN_DEST`)."""
    for arg in argv:
        if arg.startswith("--dry_run=") or arg.startswith("--dry-run="):
            raise UsageError(f"{arg.split('=', 1)[0]} takes no value",
                             hint="'tfrecord-pipeline convert --help' lists the flags")
    return ["--dry-run" if arg == "--dry_run" else arg for arg in argv]


def log_level_from(argv: Sequence[str]) -> str:
    """The `--log-level` in `argv`, read without Beam: logging must be configured before the
    first `PipelineOptions`, whose constructor calls `logging.basicConfig()` itself. A flag
    without its value is the one-line usage error of every other flag."""
    parser = RaisingParser(prog="tfrecord-pipeline convert", add_help=False, allow_abbrev=False)
    _flag(parser, "log-level", default=DEFAULT_LOG_LEVEL)
    return parser.parse_known_args(list(argv))[0].log_level


class ConvertOptions(PipelineOptions):
    """Options of a conversion run (see README: "Command line")."""

    @classmethod
    def _add_argparse_args(cls, parser):
        group = parser.add_argument_group("conversion")
        _flag(group, "input", help="input glob, image folder root or manifest (any Beam filesystem)")
        _flag(group, "format", output=True, choices=FORMATS, help="input format")
        _flag(group, "output", help="output folder (any Beam filesystem)")
        _flag(group, "spec", formats=(*TABULAR_FORMATS, "image-manifest"),
              help="conversion spec YAML (default: inferred, written to DIR/spec.yaml)")
        _flag(group, "compression", output=True, default="none", help="none (default), gzip or zlib")
        _flag(group, "compression-level", output=True, type=_compression_level, default=None,
              help="codec level, 0-9 (default: the codec's)")
        _flag(group, "index", output=True, action="store_true", default=False,
              help="write <shard>.tfindex beside every shard (offset and length per record, for "
                   "the tfrecord package and NVIDIA DALI); uncompressed output only")
        _flag(group, "num-shards", output=True, type=_positive_int, default=None,
              help="exactly N shards per split (shuffles the data)")
        _flag(group, "max-shard-bytes", output=True, type=parse_size, default=None,
              help="roll shards at this size, e.g. 200MB (default 200MiB)")
        _flag(group, "max-shard-records", output=True, type=_positive_int, default=None,
              help="roll shards at this many records")
        _flag(group, "skip-if-empty", output=True, action="store_true", default=False,
              help="write no shard for a split without records")
        _flag(group, "dry-run", action="store_true", default=False,
              help="read a sample, print the inferred spec and an estimate; write nothing")
        _flag(group, "max-error-rate", output=True, type=_rate, default=DEFAULT_MAX_ERROR_RATE,
              help="fail (exit 3, only the dead letters committed) if more than this fraction "
                   "of input records is dead-lettered; default 0: any dead letter fails the run, "
                   "as trusted loaders do, so a scheduled job notices; 1: never fail")
        tabular_flag = functools.partial(_flag, group, formats=TABULAR_FORMATS)
        tabular_flag("sample-rows", output=True, type=_positive_int, default=10000,
                     help="rows sampled for type inference and --dry-run (default 10000)")
        tabular_flag("batch-rows", output=True, type=_positive_int, default=16384,
                     help="rows per batch moved through Beam (default 16384)")
        tabular_flag("work-unit-bytes", type=parse_size, default=DEFAULT_WORK_UNIT_BYTES,
                     help="CSV/TSV and JSON Lines files larger than this (uncompressed) are cut "
                          "into byte ranges at record boundaries, converted in parallel "
                          "(default 64MiB)")
        _flag(group, "converter-threads", type=_non_negative_int, default=1,
              help="chunks (tabular) or images of one work unit converted at once on each "
                   "worker; 0: one per CPU the worker may use; 1 (default): no extra threads")
        _flag(group, "converter-processes", type=_non_negative_int, default=0,
              help="on the local in-process runner: work units converted at "
                   "once in forked processes (Linux); 0 (default): one per CPU; 1: none. Other "
                   "runners spread work units over their own workers")
        _flag(group, "compare-to", default=None,
              help="a previous output folder: compare this run's statistics with its stats.json "
                   "(drift.json; default for a --run-date templated --output: the previous "
                   "day's output, when it exists)")
        _flag(group, "fail-on-drift", choices=DRIFT_FAIL_MODES, default=None, nargs="?",
              const="schema",
              help="schema (also the bare flag): fail (exit 6, dead letters only, no shard) when "
                   "features, their kinds, labels or splits changed from the compared output; "
                   f"distribution: on schema drift and also when a feature's presence fell by "
                   f"more than {PRESENCE_DROP * 100:.0f} points or a numeric feature's population "
                   f"stability index exceeds {PSI_THRESHOLD}")
        _flag(group, "run-date", type=_run_date, default=None,
              help="date filling {YYYY} {MM} {DD} {SPAN} in --input/--output (default today, UTC)")
        _flag(group, "span", type=_integer, default=None, help="value of {SPAN} (default: days since epoch)")
        _flag(group, "overwrite", action="store_true", default=False,
              help="rewrite an output folder that already holds a committed output")
        _flag(group, "append", action="store_true", default=False,
              help="add what the committed output in --output does not cover yet (new input "
                   "files, new rows of grown CSV/JSON Lines files) as its next generation, "
                   "with its spec and label map; with nothing new, nothing to do")
        _flag(group, "extend-labels", action="store_true", default=False, formats=IMAGE_FORMATS,
              help="with --append: take labels the committed label map lacks, numbered after it")
        _flag(group, "no-resume", action="store_true", default=False,
              help="convert every work unit again, discarding what an interrupted run of the "
                   "same inputs and options wrote (default: keep its completed work units)")
        _flag(group, "no-wait", action="store_true", default=False,
              help="submit the job and return without waiting for it (remote runners; what "
                   "Dataflow Flex Template launchers need); the manifest appears when it commits")
        _flag(group, "quiet", action="store_true", default=False, help="no progress, no summary")
        _flag(group, "log-level", default=DEFAULT_LOG_LEVEL,
              help=f"Python log level (default {DEFAULT_LOG_LEVEL})")

        images = parser.add_argument_group("images")
        image_flag = functools.partial(_flag, images, formats=IMAGE_FORMATS)
        manifest_flag = functools.partial(_flag, images, formats=("image-manifest",))
        manifest_flag("image-column", output=True, default=None,
                      help="manifest column holding image paths/URIs")
        manifest_flag("label-column", output=True, default=None,
                      help="manifest column holding labels")
        manifest_flag("split-column", output=True, default=None,
                      help="manifest column naming the split")
        image_flag("labels-file", output=True, default=None,
                   help="labels.txt fixing the label map (one name per line, line number = "
                        "index); other labels are dead letters (unknown_label)")
        image_flag("validate", output=True, choices=VALIDATE_MODES, default=VALIDATE_MODES[0],
                   help="header (default): parse headers; full: decode every image")
        image_flag("resize", output=True, type=_resize, default=None, help="resize to WxH")
        image_flag("resize-mode", output=True, choices=RESIZE_MODES, default=RESIZE_MODES[0],
                   help="how --resize keeps the aspect ratio (default fit)")
        image_flag("max-side", output=True, type=_positive_int, default=None,
                   help="shrink so the longer side is at most N")
        image_flag("encode", output=True, choices=ENCODINGS, default=None,
                   help="re-encode images")
        image_flag("quality", output=True, type=_integer, default=DEFAULT_QUALITY,
                   help=f"JPEG quality (1-100) of re-encoded JPEGs (default {DEFAULT_QUALITY})")
        image_flag("exif-orientation", output=True, action="store_true", default=False,
                   help="apply EXIF orientation (re-encodes rotated images)")
        image_flag("convert-mode", output=True, choices=CONVERT_MODES, default=None,
                   help="convert pixel mode")
        image_flag("max-image-bytes", output=True, type=parse_size,
                   default=DEFAULT_MAX_IMAGE_BYTES,
                   help="larger image files are dead-lettered (default 64MiB)")
        image_flag("max-pixels", output=True, type=_positive_int, default=DEFAULT_MAX_PIXELS,
                   help="images with more pixels are dead-lettered (decompression-bomb guard)")
        image_flag("allowed-roots", output=True, default=None,
                   help="comma-separated roots manifest URIs must stay within "
                        "(default: the manifest's folder and gs:// buckets named on the "
                        "command line)")


class RaisingParser(argparse.ArgumentParser):
    """An argument parser that raises `UsageError` (one line) instead of printing its usage."""

    def error(self, message: str):
        raise UsageError(message, hint=f"'{self.prog} --help' lists the flags")


def _beam_flags(argv: Sequence[str]) -> dict[str, argparse.Action]:
    """Every option string Beam and we define -> its action (Beam's own parser, public hook)."""
    if any(arg.startswith("--dask") for arg in argv):
        with contextlib.suppress(ImportError):  # registers DaskOptions, when installed
            import apache_beam.runners.dask.dask_runner  # noqa: F401
    flags: dict[str, argparse.Action] = {}

    def collect(parser) -> None:
        for action in parser._actions:
            flags.update(dict.fromkeys(action.option_strings, action))

    PipelineOptions([]).get_all_options(add_extra_args_fn=collect)
    return flags


def check_arguments(argv: Sequence[str]) -> None:
    """Raises `UsageError` for an argument neither we nor Beam define, a flag of ours given
    twice, a flag value that does not parse, a stray positional argument (typically a glob
    the shell expanded), or a flag of ours the others make meaningless (`_check_combination`).
    Beam's own flags are Beam's to check (some are meant to repeat, as --experiments)."""
    known = _beam_flags(argv)
    parser = RaisingParser(prog="tfrecord-pipeline convert", allow_abbrev=False, add_help=False)
    ConvertOptions._add_argparse_args(parser)
    ours = {option: action for action in parser._actions for option in action.option_strings}
    given: dict[str, str] = {}  # the destination of each flag of ours given -> its spelling
    expects_value = may_take_value = False
    for arg in argv:
        if expects_value or (may_take_value and not arg.startswith("-")):
            expects_value = may_take_value = False
            continue
        may_take_value = False
        if arg.startswith("-") and arg != "-":
            name = arg.split("=", 1)[0]
            action = known.get(name)
            if action is None:
                close = difflib.get_close_matches(name, list(known), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise UsageError(f"unknown flag {name}{hint}",
                                 hint="'tfrecord-pipeline convert --help' lists the flags")
            # A flag taking a value must not repeat (in any spelling): argparse would silently
            # keep the last value. A switch (`--quiet`) may: saying it twice means the same.
            if name in ours:
                dest = ours[name].dest
                if dest in given and action.nargs != 0:
                    also = "" if given[dest] == name else f" (also as {given[dest]})"
                    raise UsageError(f"{name} is given twice{also}", hint="give each flag once")
                given[dest] = name
            expects_value = "=" not in arg and action.nargs not in (0, "?")
            may_take_value = "=" not in arg and action.nargs == "?"  # --fail-on-drift [MODE]
            continue
        raise UsageError(
            f"unexpected argument {arg!r}: every value belongs to a flag",
            hint="quote a glob so the shell does not expand it, e.g. --input 'data/*.csv'")
    values = parser.parse_known_args(list(argv))[0]  # raises on a value that does not parse
    for flag in given.values():
        _check_combination(flag, ours[flag], values)


def _check_combination(flag: str, action: argparse.Action, values: argparse.Namespace) -> None:
    """Raises `UsageError` when the flag `flag` (of `action`), given on the command line,
    would be ignored: the other flags in `values` leave it nothing to do."""
    if action.formats and values.format and values.format not in action.formats:
        raise UsageError(f"{flag} does not apply to --format {values.format}, only to "
                         f"{', '.join(action.formats)}")
    if action.dest == "compression_level" and parse_compression(values.compression) is Compression.NONE:
        raise UsageError(f"{flag} needs --compression gzip or zlib: uncompressed shards have no "
                         f"codec level")
    if action.dest == "max_side" and values.resize is not None:
        raise UsageError(f"{flag} and --resize exclude each other: --resize gives exactly WxH, "
                         f"--max-side only shrinks the longer side")
    if action.dest == "quality" and (values.encode == "png" or not (
            values.encode or values.resize or values.max_side or values.convert_mode
            or values.exif_orientation)):
        raise UsageError(f"{flag} applies to re-encoded JPEGs only: with --encode jpeg, or with "
                         f"--resize, --max-side, --convert-mode or --exif-orientation (not with "
                         f"--encode png)")
    if action.dest == "resize_mode" and values.resize is None:
        raise UsageError(f"{flag} applies with --resize only (--max-side keeps the aspect ratio)")
    if action.dest == "append" and values.overwrite:
        raise UsageError(f"{flag} and --overwrite exclude each other: --append keeps the "
                         f"committed output and adds to it, --overwrite replaces it")
    if action.dest == "extend_labels" and not values.append:
        raise UsageError(f"{flag} applies with --append only")
    if action.dest == "fail_on_drift" and not values.compare_to and not values.append \
            and not (values.output and has_date_template(values.output)):
        raise UsageError(
            f"{flag} has nothing to compare with: give --compare-to DIR, or a date-templated "
            f"--output (e.g. out/{{YYYY}}-{{MM}}-{{DD}}) to compare with the previous day's output")
