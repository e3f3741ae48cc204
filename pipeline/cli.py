"""The `tfrecord-pipeline` command line: parsing, dispatch, and the one map from outcome to exit code.

`run(argv)` returns the exit code, so tests drive the CLI in-process; `main()` is the
console-script entry point. Commands raise the typed errors of `pipeline.errors`; this module
alone prints them (one line, no traceback) and chooses the exit code.
"""

from __future__ import annotations

import argparse
import functools
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence

from pipeline.errors import (
    CommandFailed,
    DriftDetected,
    ErrorRateExceeded,
    NothingConverted,
    OutputProblems,
    Terminated,
    UsageError,
)
from pipeline.options import REQUIRED_FLAGS, ConvertOptions, RaisingParser, command_line_path
from pipeline.output_lock import OutputBusyError

__all__ = ["EXIT_CODES", "build_parser", "convert_parser", "main", "run"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ERROR_RATE = 3
EXIT_CORRUPT = 4
EXIT_NOTHING_CONVERTED = 5
EXIT_DRIFT = 6
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report an interrupted command
EXIT_TERMINATED = 143  # 128 + SIGTERM: what schedulers and Kubernetes send
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of our output went away (`| head`)

#: Outcome -> exit code (documented in the README); the first matching class wins.
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (ErrorRateExceeded, EXIT_ERROR_RATE),
    (NothingConverted, EXIT_NOTHING_CONVERTED),
    (DriftDetected, EXIT_DRIFT),
    (OutputProblems, EXIT_CORRUPT),
    (CommandFailed, EXIT_FAILED),
    (UsageError, EXIT_USAGE),
    (OutputBusyError, EXIT_USAGE),
    (ValueError, EXIT_USAGE),  # invalid input found while planning (SpecError, RunnerError included)
    (FileNotFoundError, EXIT_USAGE),
)

_LOG = logging.getLogger("tfrecord_pipeline")
_COMMANDS = ("convert", "verify", "inspect", "index", "export", "report")


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def convert_parser() -> argparse.ArgumentParser:
    """The parser of `convert`'s own flags (Beam's runner flags are passed through); its
    help shows the `REQUIRED_FLAGS` as required."""
    # allow_abbrev as Beam's own parser: Dataflow's --labels is not --labels-file.
    parser = argparse.ArgumentParser(prog="tfrecord-pipeline convert", allow_abbrev=False,
                                     description="Convert images or tabular data to sharded TFRecord files.")
    ConvertOptions._add_argparse_args(parser)
    for action in parser._actions:
        if action.dest in REQUIRED_FLAGS:
            action.required = True
            action.help = f"{action.help} (required)"
    return parser


@functools.cache  # argparse looks up its messages' translations per parser: ms per command
def build_parser() -> argparse.ArgumentParser:
    """The top-level parser (subcommands), built once: not to be changed; `convert` arguments
    are parsed by Beam options."""
    parser = RaisingParser(prog="tfrecord-pipeline", description="Convert images and tabular data to "
                                                                 "TFRecord files of tf.train.Example.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("convert", help="convert input to TFRecord shards", add_help=False)
    verify = commands.add_parser("verify", help="check CRCs, Example parsing and the manifest")
    verify.add_argument("paths", nargs="+", help="files, globs or output folders")
    inspect = commands.add_parser("inspect", help="print Examples as JSON lines")
    inspect.add_argument("path", help="a file, glob or output folder")
    inspect.add_argument("--limit", type=int, default=10, help="examples to print (default 10; -1: all)")
    inspect.add_argument("--full-values", "--full_values", action="store_true", default=False,
                         help="print bytes values whole (default: length and a 64-byte prefix)")
    index = commands.add_parser(
        "index", help="write a <file>.tfindex sidecar (offset length per record) beside each file")
    index.add_argument("paths", nargs="+", help="uncompressed TFRecord files, globs or output folders")
    export = commands.add_parser("export", help="turn TFRecord files of Examples into Parquet")
    export.add_argument("path", help="an output folder (its manifest), a file or a glob")
    export.add_argument("--to", required=True, choices=["parquet"], help="the format to write")
    export.add_argument("out", help="the Parquet file to write; for an output folder, a folder of "
                                    "<split>.parquet files unless OUT ends in .parquet and one "
                                    "split is exported")
    export.add_argument("--split", default=None, help="export only this split of an output folder")
    report = commands.add_parser("report", help="write a self-contained HTML report of an output folder")
    report.add_argument("path", help="an output folder (the one holding manifest.json)")
    report.add_argument("--output", default=None, help="the HTML file to write (default PATH/report.html)")
    return parser


def exit_code_for(error: BaseException) -> int:
    """The exit code of a command that raised `error`."""
    return next((code for kind, code in EXIT_CODES if isinstance(error, kind)), EXIT_FAILED)


def run(argv: Sequence[str] | None = None) -> int:
    """Runs one CLI command; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else ""
    # The name the error lines start with: the command's, when there is one.
    name = f"tfrecord-pipeline {command}" if command in _COMMANDS else "tfrecord-pipeline"
    try:
        if command == "convert":
            if any(arg in ("-h", "--help") for arg in argv[1:]):
                convert_parser().print_help()
                return EXIT_OK
            from pipeline.convert import convert

            convert(argv[1:])
            return EXIT_OK
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exit_:  # --help
            return int(exit_.code or 0)
        if args.command == "verify":
            _verify([command_line_path(path) for path in args.paths])
        elif args.command == "index":
            from pipeline.indexing import index_command

            index_command([command_line_path(path) for path in args.paths])
        elif args.command == "export":
            from pipeline.export import export_command

            export_command(command_line_path(args.path), args.to, command_line_path(args.out),
                           split=args.split)
        elif args.command == "report":
            from pipeline.report import report_command

            report_command(command_line_path(args.path),
                           command_line_path(args.output) if args.output else None)
        else:
            _inspect(command_line_path(args.path), args.limit, args.full_values)
        return EXIT_OK
    except tuple(kind for kind, _ in EXIT_CODES) as error:
        _LOG.debug("%s failed", command or "command", exc_info=True)
        if not (command == "verify" and isinstance(error, OutputProblems)):  # printed already
            label = "error: " if exit_code_for(error) == EXIT_USAGE else ""
            print(f"{name}: {label}{error}", file=sys.stderr)
            hint = getattr(error, "hint", None)
            if hint:
                print(f"hint: {hint}", file=sys.stderr)
        return exit_code_for(error)
    except BrokenPipeError:
        # Quietly, as `head` expects; the flush at exit must not meet the closed pipe again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print(f"{name}: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED
    except Exception as error:  # noqa: BLE001 - one line, never a traceback (see --log-level debug)
        _LOG.debug("%s failed", command or "command", exc_info=True)
        cause = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        print(f"{name}: failed: {cause}", file=sys.stderr)
        return EXIT_FAILED


def _verify(paths: Sequence[str]) -> None:
    from pipeline.verify import format_report, verify_paths

    checked, problems = verify_paths(paths)
    print(format_report(checked, problems))
    if problems:
        raise OutputProblems(f"{len(problems)} problems found")


def _inspect(path: str, limit: int, full_values: bool) -> None:
    from pipeline.inspection import DEFAULT_MAX_BYTES, format_summary, inspect_paths

    try:
        printed, summary = inspect_paths([path], None if limit < 0 else limit, sys.stdout,
                                         None if full_values else DEFAULT_MAX_BYTES)
    except FileNotFoundError as error:
        raise UsageError(str(error)) from None
    except ValueError as error:  # a corrupt record or a malformed manifest: as verify reports it
        raise OutputProblems(str(error)) from None
    print(format_summary(summary, printed), file=sys.stderr)


def main() -> None:
    """Console-script entry point: SIGTERM ends the run like Ctrl-C (exit 143, one line)."""
    signal.signal(signal.SIGTERM, _raise_terminated)
    # The imports (Beam's ~2,000 modules) leave ~150k objects that live as long as the
    # process; frozen, the collector's full passes during a long run skip them. Only the
    # console process does this: tests drive `run`, whose garbage must stay collectable.
    gc.freeze()
    sys.exit(run())
