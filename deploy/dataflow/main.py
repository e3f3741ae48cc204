"""Launcher for `tfrecord-pipeline convert` as a Dataflow Flex Template (and for Airflow).

The Flex Template launcher runs this file (FLEX_TEMPLATE_PYTHON_PY_FILE) with every
template parameter as `--name=value` plus Dataflow's own options (project, region,
temp/staging locations, job name, ...). Airflow's BeamRunPythonPipelineOperator runs it the
same way with `--runner=...` and its pipeline options. This file only adapts that calling
convention to the CLI and then calls `pipeline.cli.run(["convert", ...])`:

* Template parameters are named after the CLI's argparse destinations (`max_shard_bytes`,
  `convert_dry_run`): a name that is not itself a spelling of its flag is replaced by the
  flag (`--convert_dry_run` -> `--dry-run`; Beam owns `--dry_run`).
* Boolean parameters arrive as `--overwrite=true` / `--overwrite=false`; the CLI's flags
  are plain switches, so `=true` becomes `--overwrite` and `=false` is dropped.
* Without `--runner` the run goes to DataflowRunner (a template launch must never fall back
  to a local run on the launcher VM).
* On Dataflow without `--sdk_container_image`, the workers use the image named in
  TFRECORD_SDK_CONTAINER_IMAGE (the template image itself, baked in at build time), so
  they have the package installed without staging anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["CliFlags", "build_convert_args", "cli_flags", "main"]

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}
_DATAFLOW = "dataflowrunner"
_IMAGE_ENV = "TFRECORD_SDK_CONTAINER_IMAGE"
_RUNNER_ENV = "TFRECORD_DEFAULT_RUNNER"
_FLEX_ENV = "FLEX_TEMPLATE_PYTHON_PY_FILE"


@dataclasses.dataclass(frozen=True)
class CliFlags:
    """What the launcher needs to know about the `convert` parser."""

    switches: frozenset[str]  # option strings of store_true/store_false flags
    by_dest: Mapping[str, str]  # "--<dest>" -> the flag, for dests that are not a spelling


def cli_flags(parser: argparse.ArgumentParser) -> CliFlags:
    """Reads switches and destination names from the CLI's `convert` parser."""
    switch_types = (argparse._StoreTrueAction, argparse._StoreFalseAction)
    switches, by_dest = set(), {}
    for action in parser._actions:
        options = [option for option in action.option_strings if option.startswith("--")]
        if not options:
            continue
        if isinstance(action, switch_types):
            switches.update(options)
        if f"--{action.dest}" not in options:
            by_dest[f"--{action.dest}"] = options[0]
            if isinstance(action, switch_types):
                switches.add(f"--{action.dest}")
    return CliFlags(frozenset(switches), dict(by_dest))


def _value_of(args: Sequence[str], flag: str) -> str | None:
    """The value of `--flag=value` or `--flag value` in args (last one wins), else None."""
    value = None
    for index, arg in enumerate(args):
        if arg.startswith(flag + "="):
            value = arg[len(flag) + 1:]
        elif arg == flag and index + 1 < len(args):
            value = args[index + 1]
    return value


def build_convert_args(
    argv: Iterable[str],
    flags: CliFlags,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """Turns launcher/Airflow arguments into the argument list of `convert`."""
    environ = os.environ if environ is None else environ
    args: list[str] = []
    for arg in argv:
        flag, sep, value = arg.partition("=")
        cli_flag = flags.by_dest.get(flag, flag)
        if flag in flags.switches:
            if not sep:
                args.append(cli_flag)
                continue
            text = value.strip().lower()
            if text in _TRUE:
                args.append(cli_flag)
            elif text not in _FALSE:
                raise ValueError(f"{flag} expects true or false, got {value!r}")
            continue
        args.append(cli_flag + sep + value if cli_flag != flag else arg)

    runner = _value_of(args, "--runner")
    if runner is None:
        runner = environ.get(_RUNNER_ENV) or "DataflowRunner"
        args.append(f"--runner={runner}")
    image = environ.get(_IMAGE_ENV)
    if (
        runner.lower() == _DATAFLOW
        and image
        and _value_of(args, "--sdk_container_image") is None
        and _value_of(args, "--worker_harness_container_image") is None
    ):
        args.append(f"--sdk_container_image={image}")
    # Google's Flex Template launcher must not block until the job ends.
    # Either spelling: the CLI refuses a flag given twice.
    if runner.lower() == _DATAFLOW and environ.get(_FLEX_ENV) \
            and not {"--no-wait", "--no_wait"} & set(args):
        args.append("--no-wait")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `tfrecord-pipeline convert` with the adapted arguments; returns the exit code."""
    from pipeline import cli

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_convert_args(argv, cli_flags(cli.convert_parser()))
    except ValueError as error:
        print(f"tfrecord-pipeline launcher: error: {error}", file=sys.stderr)
        return 2
    return cli.run(["convert", *args])


if __name__ == "__main__":
    sys.exit(main())
