"""`tfrecord-pipeline convert`: plan, run and report one conversion.

Safe to run from a scheduler: a folder already holding a committed output of the same
inputs and options is left alone (exit 0), a different committed output is replaced only
with --overwrite, leftovers of a killed run are cleaned before the new run starts, and a
second run into a folder that a run on this machine is still writing is refused (exit 2,
see `pipeline.output_lock`).
"""

from __future__ import annotations

import datetime
import glob
import json
import logging
import os
import re
import time
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from pipeline.errors import (
    CommandFailed,
    DriftDetected,
    ErrorRateExceeded,
    NothingConverted,
    OutputProblems,
    Terminated,
    UsageError,
)
from pipeline.graph import build_pipeline
from pipeline.options import (
    IMAGE_FORMATS,
    REQUIRED_FLAGS,
    TABULAR_FORMATS,
    ConvertOptions,
    check_arguments,
    command_line_path,
    fill_date_template,
    has_date_template,
    log_level_from,
    normalize_argv,
)
from pipeline.output_lock import output_lock
from pipeline.planning import cut_before_run, input_listing, plan_conversion, sharding_of
from pipeline.progress import Progress, show_phase
from pipeline.quiet_logs import drop_runner_noise
from pipeline.report import write_report_after_commit
from pipeline.runners import (
    LOCAL_PARALLEL_MIN_BYTES,
    LOCAL_PARALLEL_MIN_IMAGE_BYTES,
    DaskCluster,
    check_runner_installed,
    check_runner_options,
    cluster_threads,
    dask_cluster,
    follow_log_level,
    is_local,
    runner_for,
    runs_in_process,
    workers_cut_large_files,
)
from transforms import fs, output_files, resume
from transforms import manifest as manifest_lib
from transforms.forked_pool import fork_available
from transforms.format.compression import Compression, parse_compression
from transforms.format.manifest_format import MANIFEST_NAME, Manifest
from transforms.shard_writers import DEAD_LETTER_DIR, TEMP_PREFIX
from transforms.sink import WriteToShardedTFRecord
from transforms.stats.document import STATS_NAME
from transforms.stats.drift import DRIFT_NAME
from transforms.stats.summary import summary_lines
from transforms.tfds_metadata import TFDS_FILE_NAMES

__all__ = ["convert"]

_LOG = logging.getLogger("tfrecord_pipeline")


def _configure_logging(argv: Sequence[str]) -> None:
    """Sets the root logger's level and, unless logging is already configured, its format.
    Before the first `PipelineOptions`, whose constructor calls `logging.basicConfig()`: ours
    would leave Python's default format in place after it."""
    name = log_level_from(argv)
    level = getattr(logging, str(name).upper(), None)
    if not isinstance(level, int):
        raise UsageError(f"--log-level {name!r} is not a Python log level")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    follow_log_level()
    drop_runner_noise()


def _resolve_paths(conv: ConvertOptions, absolute: bool) -> tuple[str, str]:
    """--input and --output with their dates filled; `absolute`: local paths made absolute,
    for workers that run in a working folder of their own (a Dask cluster's)."""
    missing = [flag for flag in REQUIRED_FLAGS if not getattr(conv, flag)]
    if missing:
        raise UsageError("missing required flags: " + ", ".join(f"--{flag}" for flag in missing))
    run_date = conv.run_date or datetime.datetime.now(datetime.timezone.utc).date()
    paths = (
        command_line_path(fs.without_file_scheme(fill_date_template(conv.input, run_date, conv.span))),
        fs.without_file_scheme(fill_date_template(conv.output, run_date, conv.span)).rstrip("/") or "/",
    )
    if absolute:
        conv.compare_to = conv.compare_to and _absolute(conv.compare_to)  # read by the commit
    return tuple(_absolute(path) if absolute else path for path in paths)


def _absolute(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


def _run_to_resume(output: str, plan, conv: ConvertOptions) -> tuple[str | None, str | None]:
    """(run id, temporary folder) of the interrupted run of these inputs and options that this
    run resumes, or (None, None); every other interrupted run's folder is discarded, with one
    line saying why when it had done work for other inputs or options."""
    fingerprint = plan.manifest_metadata["fingerprint"]
    found = (None, None)
    other = None
    for folder in output_files.interrupted_runs(output):
        record = resume.read_run_record(folder)
        if record is None:
            continue
        if record.get("fingerprint") != fingerprint:
            other = _differences(record.get("describes") or {}, plan.manifest_metadata)
        elif conv.no_resume:
            other = "--no-resume"
        elif plan.assemble is not None:
            other = "a sequence conversion starts over"
        elif found[0] is None:
            found = (record["run_id"], folder)
    output_files.discard_interrupted_runs(output, keep=found[1])
    if other and not conv.quiet:
        print(f"Discarded the work of an interrupted run in {output} ({other}).")
    return found


def _has_stats(output: str) -> bool:
    """True when `output` holds a committed output whose manifest lists a stats.json."""
    try:
        manifest = manifest_lib.read_manifest(output)
    except ValueError:
        return False
    return manifest is not None and manifest.side_file(STATS_NAME) is not None


def _compared_output(conv: ConvertOptions, output: str) -> str | None:
    """The output folder the run's statistics are compared with: --compare-to, else for a
    date-templated --output the previous day's output, when it holds statistics."""
    if conv.compare_to:
        compared = conv.compare_to.rstrip("/") or "/"
        if not _has_stats(compared):
            raise UsageError(f"--compare-to {compared} holds no committed output with {STATS_NAME}",
                             hint="name the folder of an earlier run (the one holding manifest.json)")
        return compared
    if not has_date_template(conv.output):
        return None
    run_date = conv.run_date or datetime.datetime.now(datetime.timezone.utc).date()
    span = conv.span - 1 if conv.span is not None else None
    previous = fill_date_template(conv.output, run_date - datetime.timedelta(days=1), span)
    previous = previous.rstrip("/") or "/"
    return previous if previous != output and _has_stats(previous) else None


def _nothing_to_do(output: str, plan, conv: ConvertOptions, side_files: Sequence[str]) -> bool:
    """True (and said) when `output` holds a committed run of the same inputs and options;
    a different one is refused unless --overwrite (or --append, which adds to it). A damaged
    manifest is replaced with --overwrite only when no file beside it needs its word to be
    the tool's (`_refuse_foreign_files`)."""
    try:
        existing = manifest_lib.read_manifest(output)
    except ValueError as error:
        _refuse_foreign_files(output, side_files, damaged=error)
        if not conv.overwrite:
            raise UsageError(f"{error}; use --overwrite to replace it") from error
        return False
    if existing is None or conv.overwrite:
        return False
    if existing.metadata.get("fingerprint") != plan.manifest_metadata["fingerprint"]:
        if conv.append:
            return False
        differences = _differences(existing.metadata, plan.manifest_metadata)
        raise UsageError(
            f"{output} already holds a committed output of different inputs or options "
            f"({differences}; run {existing.metadata.get('run_id')}, "
            f"{existing.metadata.get('created_at')}); use --overwrite to replace it",
            hint="--append converts only the new input into it" if " added" in differences else None)
    problems = output_files.listed_size_problems(output, existing)
    if problems:  # "nothing to do" would leave a scheduler's retry on a damaged output
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise OutputProblems(
            f"{output} holds this conversion, damaged: {problems[0]}{more}; "
            f"`tfrecord-pipeline verify {output}` checks it all, --overwrite converts again")
    if not conv.quiet:
        print(f"{output} already holds this conversion (same inputs and options); "
              f"nothing to do. Use --overwrite to redo it.")
    return True


def _differences(existing: dict, metadata: dict) -> str:
    """What differs between a committed manifest and a planned run's metadata: the options
    (old and new value; unset and off are alike, as in the fingerprint), the spec, the
    labels, the input files (added, removed, or changed in size or modification time)."""
    old, new = existing.get("options") or {}, metadata.get("options") or {}
    shown = []
    for name in sorted((set(old) | set(new)) - {"output", "run_date"}):
        before, after = ("unset" if value is None or value is False else json.dumps(value)
                         for value in (old.get(name), new.get(name)))
        if before != after:
            shown.append(f"--{name.replace('_', '-')} {before} then, {after} now")
    shown += [f"the {key}" for key in ("spec", "labels") if existing.get(key) != metadata.get(key)]
    if existing.get("inputs") is not None and metadata.get("inputs") is not None:
        was = {path: (size, mtime) for path, size, mtime in existing["inputs"]}
        now = {path: (size, mtime) for path, size, mtime in metadata["inputs"]}
        shown += [f"input {path} added" for path in sorted(set(now) - set(was))]
        shown += [f"input {path} removed" for path in sorted(set(was) - set(now))]
        shown += [f"input {path} changed ("
                  + (f"{was[path][0]} bytes then, {now[path][0]} now)" if was[path][0] != now[path][0]
                     else "modified since)")
                  for path in sorted(set(was) & set(now)) if was[path] != now[path]]
    if not shown:
        shown = ["the input files (added, removed or changed; the earlier run recorded no listing)"]
    more = f" and {len(shown) - 3} more differences" if len(shown) > 3 else ""
    return "; ".join(shown[:3]) + more


def _beam_workers_pay_off(plan, fmt: str) -> bool:
    """Whether a local run is worth Beam's worker processes (see `pipeline.runners`).

    Not where the in-process runner converts on forked processes (`pipeline.graph`): measured
    on 2 cores, 50M rows (1.55 GB of CSV, GZIP), one process converting on forked children
    took 21.8 and 22.4 s against 27.0 and 26.5 s for Beam's two worker processes, with half
    the peak memory (which then stays flat as the input grows). Otherwise only for inputs
    large enough to pay for starting workers.
    """
    if fork_available():
        return False
    min_bytes = LOCAL_PARALLEL_MIN_IMAGE_BYTES if fmt in IMAGE_FORMATS else LOCAL_PARALLEL_MIN_BYTES
    return len(plan.work_units) > 1 and plan.input_bytes >= min_bytes


def _refuse_foreign_files(output: str, side_files: Sequence[str],
                          damaged: ValueError | None = None) -> None:
    """Refuses to start over files under names this tool writes that it did not write.
    `damaged`: why the manifest cannot be read, which then vouches for no file but itself."""
    foreign = output_files.foreign_files(output, side_files)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        if damaged is not None:
            raise UsageError(
                f"{damaged}: it cannot tell which of the {len(foreign)} files beside it this "
                f"tool wrote ({shown}), and no run replaces them, not even with --overwrite",
                hint="move the folder away or choose another --output")
        raise UsageError(
            f"{output} holds {len(foreign)} files this tool did not write ({shown}): no committed "
            f"manifest lists them, and they would be replaced",
            hint="move them away or choose another --output; --overwrite replaces only what a "
                 "committed manifest lists")


def _summary(output: str, manifest: Manifest, elapsed: float, reused: int = 0) -> str:
    counts = manifest.counts
    reasons = sorted(counts.dead_letter_reasons.items(), key=lambda item: (-item[1], item[0]))
    sequences = counts.written_rows is not None  # input and dead letters count rows, `written` sequences
    unit = "rows" if sequences else "records"
    rows = [(f"{unit} read", counts.input)]
    if sequences:
        rows.append(("rows written", counts.rows_written))
    written = "sequences written" if sequences else "written"
    for split, entry in sorted(counts.splits.items()):
        rows.append((f"{written}: {split}", entry.written))
    rows.append((f"{written} (total)", counts.written))
    rows.append((f"dead-lettered {unit}" if sequences else "dead-lettered", counts.dead_letter))
    rows += [(f"  {reason}", number) for reason, number in reasons]
    rows += [("shards", len(manifest.shards)), ("bytes", sum(shard.bytes for shard in manifest.shards))]
    if reused:
        rows.append(("work units reused", reused))
    width = max(len(name) for name, _ in rows)
    generation = f" (generation {manifest.generation})" if manifest.generation else ""
    lines = [f"Committed {output}/{MANIFEST_NAME}{generation}" + _dead_letter_note(
        output, counts.to_dict(), [entry.path for entry in manifest.dead_letter_files], unit)]
    lines += [f"  {name.ljust(width)}  {value:>14,}" for name, value in rows]
    lines.append(f"  {'elapsed'.ljust(width)}  {elapsed:>13.1f}s")
    if elapsed > 0:
        lines.append(f"  {(unit + '/s').ljust(width)}  {counts.input / elapsed:>14,.0f}")
    if manifest.dead_letter_files:
        lines.append(f"  dead letters (one JSON line each, with the reason): {output}/{DEAD_LETTER_DIR}/")
    lines += summary_lines(output, manifest)  # the feature table and the drift, if compared
    return "\n".join(lines)


#: Dead-letter reasons that stand for a whole input file (one dead letter for all its rows).
_WHOLE_FILE_REASONS = ("unreadable_file", "missing_file")


def _dead_letter_note(output: str, counts: dict, dead_letter_files: Sequence[str], unit: str,
                      fraction: bool = True) -> str:
    """What a run's one-line outcome says of its dead letters: `fraction`, their share of the
    input, and the reason of the first input file dead-lettered whole (read from the dead
    letters, which only then are scanned); "" without dead letters."""
    if not counts.get("dead_letter"):
        return ""
    note = (f", with {counts['dead_letter']:,} of {counts['input']:,} {unit} dead-lettered "
            f"({counts['dead_letter'] / max(counts['input'], 1):.2%})") if fraction else ""
    reasons = counts.get("dead_letter_reasons") or {}
    files = sum(reasons.get(reason, 0) for reason in _WHOLE_FILE_REASONS)
    for path in dead_letter_files if files else ():
        with FileSystems.open(fs.join_path(output, path)) as lines:
            for line in lines:
                letter = json.loads(line)
                if letter.get("reason") in _WHOLE_FILE_REASONS:
                    more = f" (and {files - 1} more files)" if files > 1 else ""
                    return (f"{note}; input file {letter.get('source')} dead-lettered whole: "
                            f"{letter.get('message')}{more}")
    return note


#: The outcomes of a run that committed only its dead letters, by its `failed_run.json`.
_FAILED_RUN_OUTCOMES = {
    output_files.NOTHING_CONVERTED: NothingConverted,
    output_files.ERROR_RATE_EXCEEDED: ErrorRateExceeded,
    output_files.DRIFT_DETECTED: DriftDetected,
}


def _interruption_in(error: BaseException) -> BaseException | None:
    """The Ctrl-C (`KeyboardInterrupt`) or SIGTERM (`Terminated`) that ended the job, which
    Beam re-raises wrapped in an exception of its own (the signal's is in the chain)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, (KeyboardInterrupt, Terminated)):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _outcome_of(error: BaseException, output: str, run_id: str) -> Exception:
    """The one-line outcome of a failed job run: for a run that committed only its dead
    letters, the reason its `failed_run.json` gives, not the exception's (each runner hands the
    worker's exception back in its own way: the same type, a wrapper holding the worker's
    whole traceback as text, ...); else the last line of the error's text, the worker's."""
    failed = output_files.read_failed_run(output)
    if failed is not None and failed.get("run_id") == run_id:
        outcome = _FAILED_RUN_OUTCOMES.get(failed.get("outcome"))
        if outcome is not None:
            return outcome(str(failed.get("message", "")) + _dead_letter_note(
                output, failed.get("counts") or {}, failed.get("files") or (), "", fraction=False))
    lines = [re.sub(r"\s*\[while running [^\]]*\]$", "", line.strip()) for line in str(error).splitlines()]
    last = next((line for line in reversed(lines) if line), "")  # not Beam's step annotation alone
    while not last and error is not None:  # no text at all: the chain's own cause
        error = error.__cause__ or error.__context__
        text = (str(error).splitlines() or [""])[0] if error is not None else ""
        last = f"{type(error).__name__}: {text}" if text else ""
    return CommandFailed(f"conversion failed: {last or 'the job ended in an error without a message'}")


def convert(argv: Sequence[str]) -> None:
    """Runs `tfrecord-pipeline convert`; raises a `pipeline.errors` outcome when it fails."""
    argv = normalize_argv(argv)
    started = time.monotonic()
    _configure_logging(argv)  # first: see there
    check_arguments(argv)
    options = PipelineOptions(argv)
    conv = options.view_as(ConvertOptions)
    check_runner_installed(options)
    check_runner_options(options, no_wait=conv.no_wait)
    # Workers elsewhere (a Dask cluster's) would read and write relative to their own folder.
    input_path, output = _resolve_paths(conv, absolute=workers_cut_large_files(options))
    if "://" not in output and os.path.exists(output) and not os.path.isdir(output):
        raise UsageError(f"--output {output} is a file, not a folder")
    sharding_of(conv)  # contradicting sharding flags: refused before anything is read
    compression = parse_compression(conv.compression)
    if conv.index and compression is not Compression.NONE:
        raise UsageError(
            f"--index needs uncompressed shards, not --compression {compression.value}: record "
            f"offsets in a {compression.value} stream are not seekable, so no reader can use them")
    with dask_cluster(options) as cluster:
        threads = cluster_threads(options, cluster)
        if not conv.quiet:
            infers = not conv.spec and conv.format not in IMAGE_FORMATS
            show_phase(f"planning: listing the inputs{', sampling them to infer the spec' * infers}")
        try:  # the manifest an append adds to; None: it commits the first generation
            committed = manifest_lib.read_manifest(output) if conv.append else None
        except ValueError as error:
            raise UsageError(f"{error}: --append needs the committed manifest",
                             hint="`tfrecord-pipeline verify` checks the output") from None
        plan = plan_conversion(conv, input_path, output,
                               cut_in_workers=workers_cut_large_files(options), committed=committed)
        if conv.convert_dry_run:
            # The spec once, as structured JSON (valid spec YAML too), not again as an escaped string.
            shown = {key: value for key, value in plan.summary.items() if key != "spec_yaml"}
            print(json.dumps(shown, indent=2, sort_keys=True, default=str))
            return
        if conv.format != "image-folder":  # its planning digests a listing too long to keep
            plan.manifest_metadata["inputs"] = input_listing(input_path, conv.format)
        compare_to = _compared_output(conv, output)  # a usage check: before anything is created
        if committed and not plan.work_units:
            if not conv.quiet:
                print(f"{output}: nothing new to append (every input is converted already).")
            return
        if committed and not compare_to:
            compare_to = output  # drift against the generation this appends to
        side_files = [*plan.extra_files, *TFDS_FILE_NAMES, STATS_NAME, DRIFT_NAME,
                      output_files.REPORT_NAME, resume.STATE_NAME]
        # Unlocked, as it writes nothing (a read-only output is fine), unless an interrupted
        # run's temp folder is to be removed first.
        leftovers = "://" in output or glob.glob(glob.escape(os.path.join(output, TEMP_PREFIX)) + "*")
        if not leftovers and _nothing_to_do(output, plan, conv, side_files):
            return
        _check_output_writable(output)
        with output_lock(output):
            _convert_planned(options, argv, conv, plan, output, started, threads, cluster,
                             side_files, compare_to)


def _check_output_writable(output: str) -> None:
    """Refuses a local --output that the run could not create or write into: one under a
    file, or whose nearest existing folder this user may not write (object stores say so
    only when written to)."""
    if "://" in output:
        return
    existing = os.path.abspath(output)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UsageError(f"--output {output} is inside {existing}, which is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--output {output}: no permission to write in {existing}")


def _convert_planned(options: PipelineOptions, argv: list[str], conv: ConvertOptions, plan,
                     output: str, started: float, threads: int | None,
                     cluster: DaskCluster | None, side_files: Sequence[str],
                     compare_to: str | None) -> None:
    """Runs a planned conversion (under the output's lock); `cluster`: see `dask_cluster`."""
    run_id, resumed = _run_to_resume(output, plan, conv)
    if _nothing_to_do(output, plan, conv, side_files):
        return
    _refuse_foreign_files(output, side_files)
    if cluster is not None:
        # The raw byte ranges cut by tasks on the cluster before the run (see
        # `transforms.tabular.range_cuts`): the conversion tasks then wait for free threads and
        # balance over the workers, where the graph's side input would start them all at once.
        try:
            plan = cut_before_run(plan, cluster.map)
        except Exception as error:  # noqa: BLE001 - a lost worker, a cancelled task: one line
            first_line = (str(error).splitlines() or [""])[0]  # dask's messages run on
            raise CommandFailed(f"finding the record starts of the input's byte ranges on the "
                                f"Dask cluster failed: {type(error).__name__}: {first_line}") from error
    # The writers leave heartbeat files for the progress lines, read by a local run only
    # (elsewhere they would be objects nobody reads); `run_id`: resumed in its temp folder.
    show_progress = is_local(options) and not conv.quiet
    sink = WriteToShardedTFRecord(
        output, compression=parse_compression(conv.compression), compression_level=conv.compression_level,
        sharding=sharding_of(conv), splits=plan.splits, max_error_rate=conv.max_error_rate,
        extra_files=plan.extra_files, manifest_metadata=plan.manifest_metadata,
        report_progress=show_progress, index=conv.index, compare_to=compare_to,
        fail_on_drift=conv.fail_on_drift, run_id=run_id, append=conv.append)
    reused = resume.completed_units(resumed, plan.work_units) if resumed else {}
    template = getattr(options.view_as(GoogleCloudOptions), "template_location", None)
    if not template:
        metadata = plan.manifest_metadata
        # A tabular plan's exact cut is kept for a resuming run (image plans list every image).
        kept = plan.work_units if plan.cut_units is None and conv.format in TABULAR_FORMATS else None
        resume.write_run_record(sink.config.temp_dir, sink.config.run_id, metadata["fingerprint"],
                                {key: metadata.get(key) for key in ("options", "spec", "labels", "inputs")},
                                units=kept)
    if resumed and not conv.quiet:
        print(f"Resuming the interrupted run {run_id}: {len(reused)} of {len(plan.work_units)} "
              f"work units were written before it stopped and are kept.")
    progress = None
    with runner_for(options, argv, _beam_workers_pay_off(plan, conv.format),
                    work_units=len(plan.work_units), threads=threads) as runner:
        pipeline = beam.Pipeline(runner=runner, options=options)
        build_pipeline(pipeline, plan, sink.config, in_process=runs_in_process(options),
                       reused=reused)
        if show_progress:
            progress = Progress(sink.config.temp_dir,
                                [unit for i, unit in enumerate(plan.work_units) if i not in reused])
            progress.start()
        result = None
        try:
            result = pipeline.run()
            if conv.no_wait:  # only on runners whose job outlives us: check_runner_options
                if not conv.quiet:
                    print(f"Submitted; the job commits {output}/{MANIFEST_NAME} "
                          f"when it finishes (state: {result.state}).")
                return
            result.wait_until_finish()
        except Exception as error:  # noqa: BLE001 - any job failure becomes one outcome
            interruption = _interruption_in(error)
            if interruption is not None:
                raise interruption from None
            raise _outcome_of(error, output, sink.config.run_id) from error
        finally:
            if progress is not None:
                progress.stop()
            # The DaskRunner's result keeps a client open: closed before the run's own
            # LocalCluster stops, failed or not (else the client logs its lost connection).
            client = getattr(result, "client", None)
            if client is not None and not conv.no_wait:
                client.close()

    if template:
        if not conv.quiet:
            print(f"Wrote a Dataflow template to {template}; launching it converts into {output}.")
        return
    manifest = manifest_lib.read_manifest(output)
    if manifest is None:
        raise CommandFailed(f"the run finished without committing {output}")
    summary = _summary(output, manifest, time.monotonic() - started, len(reused))
    _LOG.info("%s", summary)
    if not conv.quiet:
        print(summary)
    # Derived from the committed output (so `report` can rebuild it): a failure only warns.
    report = write_report_after_commit(output)
    if report and not conv.quiet:
        print(f"  report: {report}")
