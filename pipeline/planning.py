"""Planning a conversion on the launcher: inputs, spec, converter, side files, fingerprint.

Everything here runs before the graph is built, so a wrong glob, an invalid spec or an
unknown column fails fast with a clear message instead of inside a worker.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from pipeline.appending import (
    LISTING_NAME,
    check_appendable,
    extended_labels,
    new_images,
    numbered_after,
    read_listing,
    uncovered_units,
)
from pipeline.errors import UsageError
from pipeline.graph import ConversionPlan
from pipeline.options import IMAGE_FORMATS, TABULAR_FORMATS, ConvertOptions, output_options
from transforms import fs, resume
from transforms.format.manifest_format import FEATURE_SPEC_NAME, Manifest
from transforms.images.paths import is_within_roots, normalize_root
from transforms.ordered_pool import default_threads
from transforms.records import DEFAULT_SPLIT
from transforms.shard_writers import ShardingConfig
from transforms.tabular.spec import ConversionSpec, load_spec

__all__ = ["cut_before_run", "input_listing", "plan_conversion", "sharding_of"]


def sharding_of(conv: ConvertOptions) -> ShardingConfig:
    """The run's sharding policy from its flags (ValueError when they contradict each other)."""
    return ShardingConfig(num_shards=conv.num_shards, max_shard_bytes=conv.max_shard_bytes,
                          max_shard_records=conv.max_shard_records, skip_if_empty=conv.skip_if_empty)


def _options_record(conv: ConvertOptions, input_path: str, output: str) -> dict[str, Any]:
    record = {name: getattr(conv, name) for name in output_options()}
    record["max_shard_bytes"] = sharding_of(conv).byte_cap
    record.update(input=input_path, output=output,
                  run_date=str(conv.run_date) if conv.run_date else None)
    return json.loads(json.dumps(record, default=str))


def input_listing(input_path: str, fmt: str) -> list[list]:
    """(path, size, mtime) of every input file, for the run fingerprint.

    Taken *before* the planner lists the inputs: a file that appears or changes in between
    then makes the next run's listing differ from the fingerprint, so that run converts
    again (or asks for --overwrite) instead of skipping a file this run never planned.
    """
    if fmt in TABULAR_FORMATS:  # what the planner reads: a folder stands for files in it
        from transforms.tabular.plan import input_files

        matched = input_files(input_path, fmt)
    else:
        matched = [m for result in fs.match([fs.input_pattern(input_path)])
                   for m in result.metadata_list]
    return sorted([metadata.path, metadata.size_in_bytes,
                   getattr(metadata, "last_updated_in_seconds", None)] for metadata in matched)


def _fingerprint(options: dict[str, Any], listing: list, spec_text: str,
                 labels: Sequence[str] = ()) -> str:
    """Identifies "the same inputs and options": a scheduler re-run of it is a no-op.

    `labels`: the label map of an image conversion (a --labels-file can change under the
    same path). Options left unset (None, or a switch left off) are not part of it, so a
    flag added in a later version does not change the fingerprint of runs that do not use it."""
    fingerprinted = {k: v for k, v in options.items()
                     if k not in ("output", "run_date") and v is not None and v is not False}
    parts = [fingerprinted, listing, spec_text] + ([list(labels)] if labels else [])
    document = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(document.encode("utf-8")).hexdigest()


#: How many input files are sniffed (the first ones, in plan order), refused when their first
#: bytes show they are not of the --format (see `transforms.tabular.sniff`).
_SNIFFED_FILES = 8


def _within(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies under it, by the allowed-roots rule of
    `transforms.images.paths` (`..` resolved, symlinks not)."""
    return is_within_roots(path.rstrip("/") + "/", [normalize_root(folder)], resolve_symlinks=False)


def _refuse_inputs_in_output(paths, output: str) -> None:
    """Refuses input files inside the output folder: the next run would read the shards and
    side files this one writes there (`dataset_info.json` is a `--format jsonl` file)."""
    inside = [path for path in paths if _within(path, output)]
    if inside:
        raise UsageError(f"--input matches files inside --output {output} (first: {inside[0]}): "
                         f"write the output to a folder of its own")


def _plan_tabular(conv: ConvertOptions, input_path: str, output: str,
                  cut_in_workers: bool, committed: Manifest | None) -> ConversionPlan:
    from transforms.tabular.infer import estimate_output, resolve_spec
    from transforms.tabular.plan import plan_tabular
    from transforms.tabular.range_cuts import CutRangesInWorkers
    from transforms.tabular.sniff import check_format
    from transforms.tabular.split_units import split_text_units, text_dialect
    from transforms.tabular.transform import ConvertTabular, TabularConfig

    listing = input_listing(input_path, conv.format)
    units = plan_tabular(input_path, conv.format)
    _refuse_inputs_in_output(dict.fromkeys(unit.path for unit in units), output)
    # An append's spec is the committed spec.yaml: the manifest's copy has its keys sorted,
    # which reorders the splits, and their order decides which split a key hashes to.
    given = (load_spec(fs.join_path(output, "spec.yaml")) if committed
             else load_spec(conv.spec) if conv.spec else None)
    grown: list = []
    if committed:  # an append: only what the committed output does not cover, its spec
        units, grown = uncovered_units(units, committed.metadata.get("inputs") or (), listing, conv.format,
                                       text_dialect(conv.format, given.csv)[0])
    for path in list(dict.fromkeys(unit.path for unit in units))[:_SNIFFED_FILES]:
        check_format(path, conv.format, given.csv if given is not None else None)
    spec = resolve_spec(units, conv.format, given, sample_rows=conv.sample_rows)
    spec_yaml = spec.to_yaml()
    options = _options_record(conv, input_path, output)
    fingerprint = _fingerprint(options, listing, spec_yaml)
    # An interrupted run of this fingerprint recorded its cut: resuming, the files are not
    # scanned for record starts again. Else cut after inference, which samples whole files from
    # their start (the cut needs the CSV dialect), and balanced for any parallelism alike: the
    # units (and output bytes) never depend on it.
    planned = None if conv.no_resume or conv.convert_dry_run else resume.planned_units(output, fingerprint)
    splitting = None if planned is not None else split_text_units(
        units, conv.format, spec.csv, conv.work_unit_bytes, balance=True, cut_in_workers=cut_in_workers)
    units = numbered_after(splitting.units, grown) if splitting else planned
    config = TabularConfig(spec=spec, fmt=conv.format, batch_rows=conv.batch_rows,
                           threads=conv.converter_threads)
    summary: dict[str, Any] = {"input_files": len({unit.path for unit in units}),
                               "work_units": len(units), "spec": spec.to_dict()}
    if splitting and splitting.files:
        summary["work_unit_splitting"] = splitting.summary()
    if conv.convert_dry_run:
        estimate = estimate_output(units, spec, conv.format, conv.sample_rows,
                                   max_shard_bytes=sharding_of(conv).byte_cap, num_shards=conv.num_shards,
                                   compression=conv.compression, compression_level=conv.compression_level)
        summary["estimate"] = estimate.to_dict()
        if spec.sequence is not None:  # records are sequences: the row estimate is not theirs
            from transforms.sequence.estimate import estimate_sequences

            summary["estimate"] = estimate_sequences(
                units, spec, conv.format, conv.sample_rows, estimate.rows, estimate.rows_exact,
                max_shard_bytes=sharding_of(conv).byte_cap or estimate.output_bytes or 1,
                num_shards=conv.num_shards, compression_ratio=estimate.compression_ratio).to_dict()
        summary["spec_yaml"] = spec_yaml
    converter, assemble = ConvertTabular(config), None
    if spec.sequence is not None:
        from transforms.sequence.buckets import bucket_count
        from transforms.sequence.transform import AssembleSequences, ReadSequenceRows

        # Work units are read as for Examples (on forked processes on the local runner), then
        # rows are shuffled by buckets of group keys, as many as the input's size asks for.
        summary["sequence_buckets"] = buckets = bucket_count(sum(unit.size for unit in units), spec.sequence)
        converter, assemble = ReadSequenceRows(config, buckets), AssembleSequences(config)
    return ConversionPlan(
        converter_label=f"Convert{conv.format.capitalize()}",
        work_units=units,
        converter=converter,
        assemble=assemble,
        splits=spec.split_names or (DEFAULT_SPLIT,),
        extra_files={"spec.yaml": spec_yaml.encode("utf-8"),
                     FEATURE_SPEC_NAME: spec.feature_spec_json()},
        manifest_metadata={"options": options, "spec": spec.to_dict(), "fingerprint": fingerprint},
        summary=summary,
        input_bytes=sum(unit.size for unit in units),
        local_processes=conv.converter_processes or default_threads(),
        cut_units=CutRangesInWorkers(splitting.dialect) if splitting and splitting.cut_in_workers else None,
    )


def cut_before_run(plan: ConversionPlan, map_scans: Callable) -> ConversionPlan:
    """`plan` with the byte ranges its `cut_units` step would cut in the pipeline cut now,
    their scans run by `map_scans(fn, raw_ranges)` (`CutRangesInWorkers.cut_now`); the
    plan keeps no cut step."""
    if plan.cut_units is None:
        return plan
    units = plan.cut_units.cut_now(plan.work_units, map_scans)
    return dataclasses.replace(plan, work_units=units, cut_units=None,
                               summary={**plan.summary, "work_units": len(units)})


def _allowed_roots(conv: ConvertOptions) -> list[str] | None:
    if not conv.allowed_roots:
        return None
    return [root.strip() for root in conv.allowed_roots.split(",") if root.strip()]


def _plan_images(conv: ConvertOptions, input_path: str, output: str,
                 committed: Manifest | None) -> ConversionPlan:
    from transforms.images.config import ImageConfig, RenderOptions
    from transforms.images.convert import ConvertImages
    from transforms.images.paths import default_allowed_roots
    from transforms.images.plan import DEFAULT_IMAGES_PER_UNIT, plan_image_folder, plan_image_manifest
    from transforms.tabular.split_units import text_dialect

    render = RenderOptions(apply_exif_orientation=conv.exif_orientation, convert_mode=conv.convert_mode,
                           resize=conv.resize, resize_mode=conv.resize_mode, max_side=conv.max_side,
                           encode=conv.encode, quality=conv.quality)
    config = ImageConfig(render=render, validate=conv.validate, max_image_bytes=conv.max_image_bytes,
                         max_pixels=conv.max_pixels, threads=conv.converter_threads)
    # An append plans with the committed label map, then with it extended (`extended_labels`).
    labels = (tuple(committed.metadata.get("labels") or ()) or None) if committed else conv.labels_file
    spec, side_files = None, {}
    if conv.format == "image-folder":
        if _within(output, input_path):
            raise UsageError(f"--output {output} is inside the folder tree --input {input_path}, "
                             f"whose next run would read the output as input: write the output "
                             f"to a folder of its own")

        def plan_with(labels):
            return plan_image_folder(input_path, allowed_roots=_allowed_roots(conv), labels=labels)

        was = read_listing(output, committed) if committed else None

        def uncovered(plan):  # and the tree's listing, the side file of the next append
            units, side_files[LISTING_NAME] = new_images(plan.work_units, plan.source, was,
                                                         DEFAULT_IMAGES_PER_UNIT)
            return units
    else:
        listing = input_listing(input_path, conv.format)
        manifests = [path for path, _, _ in listing]
        _refuse_inputs_in_output(manifests, output)
        if not conv.image_column:
            raise ValueError("--format image-manifest needs --image-column")
        if conv.labels_file and not conv.label_column:
            raise ValueError("--labels-file needs --label-column for --format image-manifest")
        spec = load_spec(conv.spec) if conv.spec else None
        if committed:  # the committed spec: its extra features, splits and split key
            recorded = committed.metadata.get("spec")
            spec = ConversionSpec.from_dict(recorded) if recorded else None
        # Default: each manifest's folder tree and every gs:// bucket on the command line.
        roots = _allowed_roots(conv) or list(dict.fromkeys(
            root for path in manifests or [input_path]
            for root in default_allowed_roots(path, [output, conv.spec or ""])))

        def plan_with(labels):
            return plan_image_manifest(input_path, conv.image_column, conv.label_column,
                                       conv.split_column, spec, roots, labels=labels)

        def uncovered(plan):
            rows = plan.source  # None: read on the launcher (compressed), which cannot grow
            dialect = text_dialect(rows.fmt, rows.csv)[0] if rows is not None else None
            units, grown = uncovered_units(plan.work_units, committed.metadata.get("inputs") or (), listing,
                                           rows.fmt if rows is not None else "compressed", dialect)
            return numbered_after(units, grown)
    plan = plan_with(labels)
    units = plan.work_units
    if committed:  # an append: only what the committed output does not cover
        units = uncovered(plan)
        extended = extended_labels(units, plan.source, labels or (), conv.extend_labels)
        if extended:
            plan = plan_with(extended)
            units = uncovered(plan)
        plan = dataclasses.replace(plan, work_units=tuple(units))
    spec_text = plan.extra_spec.to_yaml() if plan.extra_spec is not None else ""  # a manifest's only
    extra_files = plan.extra_files()
    if spec_text:
        extra_files["spec.yaml"] = spec_text.encode("utf-8")
    if conv.format == "image-folder":
        # The walk that planned the tree digested its listing: no second listing is held.
        listing = [["listing-sha256", plan.listing_digest]]
        if conv.append and not committed:
            uncovered(plan)  # the first generation an append will compare with: its listing only
    extra_files.update(side_files)
    used = plan.extra_spec
    if used is not None and spec is not None:
        used = dataclasses.replace(used, splits=spec.splits, split_key=spec.split_key)
    options = _options_record(conv, input_path, output)
    return ConversionPlan(
        converter_label="ConvertImages",
        work_units=plan.work_units,
        converter=ConvertImages(config, plan.source),
        splits=plan.splits or (DEFAULT_SPLIT,),
        extra_files=extra_files,
        manifest_metadata={
            "options": options,
            "labels": list(plan.labels),
            **({"spec": used.to_dict()} if used is not None else {}),
            "fingerprint": _fingerprint(options, listing, spec_text, plan.labels),
        },
        summary={
            "images_planned": plan.input_count, "work_units": len(plan.work_units),
            **({"planning": plan.planning} if plan.planning else {}), "labels": list(plan.labels),
            "splits": list(plan.splits), "allowed_roots": list(plan.allowed_roots),
        },
        input_bytes=sum(int(item.get("size") or 0)
                        for unit in plan.work_units for item in (unit.extra or {}).get("items", ())),
        local_processes=conv.converter_processes or default_threads(),
    )


def plan_conversion(conv: ConvertOptions, input_path: str, output: str,
                    cut_in_workers: bool = False, committed: Manifest | None = None
                    ) -> ConversionPlan:
    """Plans the conversion `conv` of `input_path` into `output`. `cut_in_workers`: large
    text files are cut at record starts by the workers, not read on the launcher (for
    runners whose workers are elsewhere: a Dask cluster, Dataflow; see `cut_before_run`).
    `committed`: the manifest of the output an append adds to (`pipeline.appending`): the
    plan converts what it does not cover, with its spec.

    Raises ValueError (SpecError included) or FileNotFoundError with a clear message.
    """
    if committed:
        check_appendable(committed, output, _options_record(conv, input_path, output), conv.num_shards)
    if conv.format in TABULAR_FORMATS:
        return _plan_tabular(conv, input_path, output, cut_in_workers, committed)
    if conv.format in IMAGE_FORMATS:
        return _plan_images(conv, input_path, output, committed)
    raise ValueError(f"unknown --format {conv.format!r}")
