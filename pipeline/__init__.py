"""The `tfrecord-pipeline` application: command line, options, planning, graph and runners.

Imports flow one way: `pipeline` uses `transforms` (Beam transforms and converters), which
use the Beam-free format code in `transforms.format` and the generated `protos`. Nothing
below `pipeline` imports it, so a Beam worker that unpickles a converter never imports the
command line. User code imports `tfrecord_pipeline` (pipeline/api/) and nothing else.

The map: every module and its one job (a package by its folder). tests/test_layout.py fails,
naming the lines to add or remove, when a module is missing here or listed but gone.

  pipeline/  the application: the `tfrecord-pipeline` command and what it runs
    __main__.py         `python -m pipeline`: the command, also its console-script entry point
    appending.py        `convert --append` on the launcher: what it may add, and which input
    cli.py              parsing, dispatch, and the one map from outcome to exit code
    convert.py          `convert`: plan, run and report one conversion
    errors.py           the typed outcomes a command can fail with
    export.py           `export --to parquet`: TFRecord files of Examples as Parquet
    graph.py            the conversion pipeline graph
    indexing.py         `index PATH...`: `.tfindex` sidecars beside existing uncompressed files
    inspection.py       `inspect`: Examples as strict JSON lines plus a feature summary
    options.py          the options of `convert`, as a Beam `PipelineOptions` view
    output_lock.py      one conversion at a time per local output folder
    planning.py         planning a conversion on the launcher: inputs, spec, converter, fingerprint
    progress.py         progress lines of a local run, from the sink's heartbeat files
    quiet_logs.py       log records the terminal does not show
    report.py           `report DIR`, and the report every conversion writes
    runners.py          choosing and starting the Beam runner
    verify.py           `verify`: prove that TFRecord output is intact
  pipeline/api/  `tfrecord_pipeline`: the one stable import place for user code
  protos/  tf.train.Example protos (TensorFlow's field numbers, own package), generated code
    regenerate.py       regenerate protos/*_pb2.py with the pinned protoc
  transforms/  Beam transforms: converters, the sharded sink, readers
    commit.py           committing a run's temporary shards as one complete output
    forked_pool.py      an ordered, bounded map over forked worker processes
    fs.py               path and file helpers for any Beam filesystem (local, gs://, ...)
    generations.py      appending to a committed output: the generation it carries forward
    input_formats.py    the input formats `convert` reads and their file name endings
    manifest.py         reading the output manifest from any Beam filesystem; the tool version
    object_listing.py   streaming listings of gs:// folders, optionally of a range of names
    ordered_pool.py     an ordered, bounded thread-pool map for the converters (Beam-free)
    output_files.py     which files in an output folder this tool wrote
    records.py          `RecordBatch`, `WorkUnit`, dead letters: what flows into the sink
    resume.py           resuming an interrupted run: completion records of written work units
    shard_writers.py    the one write path: a unit's RecordBatches into its own temporary shards
    sink.py             `WriteToShardedTFRecord`, `ConvertAndWrite`, `Commit`: write then commit
    splits.py           stable assignment of records to splits by hashing a key
    tfds_metadata.py    TensorFlow Datasets metadata: `dataset_info.json`, `features.json`
    unit_result.py      `UnitResult`: the typed contract between the sink's writers and the commit
    tfrecord_io.py      reading TFRecord files in Beam: `ReadTFRecordFiles`
  transforms/format/  Beam-free format code, on `protos` only
    compression.py      whole-stream compression of TFRecord files, as TensorFlow reads them
    example_codec.py    tf.train.Example and SequenceExample one record at a time: decoders, encoder
    example_columns.py  the vectorised encoder's input: a batch's values per feature
    example_decoder.py  batch Example decoder: serialized Examples in, one column per feature
    example_encoder.py  vectorised Example encoder: a whole batch of rows per call
    example_table.py    decoded Example batches as Arrow tables of a fixed schema
    manifest_format.py  `manifest.json`: the typed `Manifest`, its validation and bytes
    sequence_encoder.py vectorised SequenceExample encoder: many sequences per call
    tfrecord_format.py  TFRecord framing and writing, byte-compatible with TensorFlow
    tfrecord_index.py   `.tfindex` sidecars of uncompressed TFRecord files
    tfrecord_reader.py  reading TFRecord streams, every CRC checked; sniffing their compression
    wire_scan.py        protobuf wire data of many messages at once with numpy: varints, ranges
  transforms/images/  images (class-folder trees, CSV/JSONL manifests) to Examples
    config.py           `ImageConfig`: what an image conversion is told and promises
    convert.py          the DoFn `ConvertImages`: a work unit's images to Examples
    folder_slices.py    what a class-folder tree becomes: `FolderSlices`
    headers.py          image header parsing without decoding pixels
    labels.py           the rules of image labels, for trees and manifests alike
    manifest_rows.py    what the rows of an image manifest become: `ManifestRows`
    paths.py            image URIs: resolving manifest paths, confining reads to allowed roots
    plan.py             planning: `plan_image_folder` and `plan_image_manifest`
    processing.py       Pillow work: validation, conversion, EXIF orientation, resize
  transforms/reading/  reading a committed output back, without Beam
    decode.py           serialized records to values, shaped by `features.RecordLayout`
    examples.py         `read_examples`: a split (or a part of it) as dicts of numpy arrays
    features.py         how each feature of `feature_spec.json` is read: dense or varlen
    files.py            opening an output's files: local paths, any URI through fsspec
    grain.py            `grain_source`: a split as a random-access source for Grain
    output.py           what a committed output holds for one split: `load_split`
    parts.py            a split cut into disjoint parts that together hold every record once
    records.py          the payloads of shard ranges, every CRC checked
    sidecars.py         reading the index sidecars of uncompressed shards
    tensorflow.py       `tf_dataset`: a split as a `tf.data.Dataset` of parsed features
    torch.py            `torch_dataset`: a split as a `torch.utils.data.IterableDataset`
  transforms/report/  the self-contained `report.html` of a committed output
    build.py            building and writing `report.html`
    charts.py           small inline-SVG charts: histogram, horizontal bars
    collect.py          everything the report shows, read from an output folder
    dead_letters.py     a bounded sample of an output's dead letters, by reason
    markup.py           HTML building blocks: escaping, number formatting, tables
    render.py           `render_report`: a `ReportData` as one HTML page
    render_drift.py     the drift section: what `drift.json` found
    render_stats.py     the data sections: the feature table and charts
    thumbnails.py       contact sheets of an image output
  transforms/sequence/  rows grouped by key into tf.train.SequenceExamples
    assemble.py         held rows of complete groups -> SequenceExamples (Beam-free)
    buckets.py          shuffle buckets: how many, and one bucket -> its batches
    estimate.py         the `--dry-run` estimate of a sequence conversion
    rows.py             a tabular work unit -> rows keyed by bucket
    transform.py        the Beam side: `ConvertToSequences`
  transforms/stats/  statistics of the records, computed while converting, merged in the commit
    columns.py          a batch's statistics from the Arrow arrays of its features
    dead_letters.py     Example dead letters per reason, for stats.json
    document.py         stats.json: every batch's statistics merged per split
    drift.py            drift.json: a run's statistics against a previous run's
    images.py           a batch's statistics from image Examples
    presence.py         per-feature facts counted where the records are made
    sketches.py         mergeable per-batch statistics of one feature
    summary.py          the CLI's end-of-run lines about statistics and drift
  transforms/tabular/  CSV/TSV, JSON Lines and Parquet to Examples
    byte_ranges.py      where a text file can be cut into independently read byte ranges
    chunks.py           what every reader yields: a `Chunk` of parsed rows with its `Failure`s
    columns.py          vectorised conversion of whole Arrow columns to feature values
    convert.py          one chunk of rows -> RecordBatches, one per split
    csv_reader.py       reading CSV/TSV work units in chunks
    infer.py            type inference, spec resolution, the `--dry-run` estimate
    json_reader.py      reading JSON Lines work units in chunks
    plan.py             `plan_tabular`: the input's files as work units
    range_cuts.py       finding the record starts of large text files in the workers
    read.py             `read_chunks`: a work unit through the reader of its format
    sequence_spec.py    the spec's `sequence:` section, and the spec's error type and checks
    sniff.py            refusing input that is not what `--format` says, from its first bytes
    spec.py             the conversion spec: which columns become which features, and how
    split_units.py      cutting large text files into byte-range work units
    temporal.py         the text of Arrow date and time values
    transform.py        the Beam side: `ConvertTabular`
    values.py           value rules, one value at a time
"""
