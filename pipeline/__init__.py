"""The `tfrecord-pipeline` application: command line, options, planning, graph and runners.

Imports flow one way: `pipeline` uses `transforms` (Beam transforms and converters), which
use the Beam-free format code in `transforms.format` and the generated `protos`. Nothing
below `pipeline` imports it, so a Beam worker that unpickles a converter never imports the
command line.

Where each concern lives (each module's docstring states its one job):

  pipeline/ (the application): cli.py parsing, dispatch and the one exception → exit-code
      map; errors.py; options.py; planning.py; graph.py; convert.py; runners.py;
      output_lock.py; progress.py; verify.py; inspection.py; indexing.py; export.py;
      report.py; quiet_logs.py
  transforms/ (Beam transforms): records.py (RecordBatch, WorkUnit, dead letters),
      splits.py, input_formats.py, manifest.py, fs.py, worker.py,
      forked_pool.py, ordered_pool.py, tfrecord_io.py, sink.py + shard_writers.py +
      commit.py, output_files.py (what the tool wrote), tfds_metadata.py
  transforms/stats/: presence, sketches, columns, images, dead_letters, document (stats.json),
      drift (drift.json), summary
  transforms/tabular/: spec (+ sequence_spec), values, columns, plan, chunks,
      csv_reader/json_reader/parquet_reader, read, sniff, infer, convert,
      transform
  transforms/sequence/: grouped rows to SequenceExamples: rows, buckets, assemble, transform,
      estimate
  transforms/images/: config, plan, convert, headers, processing, paths
  transforms/report/: report.html: collect (+ dead_letters, thumbnails), charts, markup,
      render (+ render_stats, render_drift), build
  transforms/format/ (Beam-free): tfrecord_format (framing, writer), compression
      (+ compression_sniffing), tfrecord_reader, tfrecord_index, manifest_format,
      example_codec (reference), example_columns + varints + example_encoder (vectorised),
      wire_scan + example_decoder (vectorised) + example_table (to Arrow), sequence_codec
      (reference) + sequence_encoder (vectorised)
  transforms/reading/ (Beam-free): reading an output back: output (manifest, feature spec,
      shards), parts, features (dense or varlen), records, decode, examples,
      tensorflow, torch, grain
  protos/: tf.train.Example protos (TensorFlow's field numbers, own package) and their
      generated code
"""
