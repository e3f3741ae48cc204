"""The baselines: what users would otherwise write, each a function timing only its work.

They run in child processes of the benchmark (`run_benchmarks.py --worker JSON`), so each
path's imports and memory are its own. A worker times only its work (not interpreter
start-up or importing TensorFlow/Beam) and writes {"seconds": s} to its cfg["result"], with
"cpu_seconds" (the process's CPU time over the same region, threads included) where the
work runs in that process.
One child may run several baselines in turn; the smoke run runs them all in its own process
(`measure.measure_here`), where TensorFlow is often imported already.

* tf: TensorFlow's tutorial writer, csv module -> tf.train.Example per row -> TFRecordWriter;
* beam: ReadFromText -> parse line -> tf.train.Example per row -> WriteToTFRecord on the
  FnApiRunner (cfg "beam_running_mode" and "beam_workers");
* ceiling: pyarrow CSV read -> our vectorised encoder, framing included -> one file;
* plain_loop: read each image, parse its header, build the Example with the reference
  encoder, frame and write it;
* ours: no baseline, our CLI run in-process, where the smoke run shares the baselines' process
  with it (`cases.in_shared_child`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["BEAM_WORKERS", "CEILING_BATCH_ROWS", "WORKERS", "run_workers"]

BEAM_WORKERS = 2
CEILING_BATCH_ROWS = 65_536


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> dict[str, float]:
    """Wall and CPU seconds since `start` (`_clocks()`)."""
    return {"seconds": time.perf_counter() - start[0], "cpu_seconds": time.process_time() - start[1]}


def _tf_feature_builders(tf, columns: Sequence[Sequence[str]]) -> list:
    def int64(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))

    def floating(value):
        return tf.train.Feature(float_list=tf.train.FloatList(value=[float(value)]))

    def string(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))

    kinds = {"int64": int64, "float": floating, "string": string}
    return [(name, kinds[kind]) for name, kind in columns]


def _tf_serializer(columns: Sequence[Sequence[str]]) -> Callable[[Sequence[str]], bytes]:
    """The tutorial's serialize_example, generalised to a column list."""
    import tensorflow as tf

    builders = _tf_feature_builders(tf, columns)

    def serialize(row: Sequence[str]) -> bytes:
        feature = {name: build(value) for (name, build), value in zip(builders, row, strict=True)}
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        return example.SerializeToString()

    return serialize


def _worker_tf(cfg: dict) -> dict[str, float]:
    import csv

    import tensorflow as tf

    serialize = _tf_serializer(cfg["columns"])
    options = tf.io.TFRecordOptions(compression_type="GZIP" if cfg["compression"] == "gzip" else "")
    suffix = ".tfrecord.gz" if cfg["compression"] == "gzip" else ".tfrecord"
    path = os.path.join(cfg["output"], "tf" + suffix)
    start = _clocks()
    with tf.io.TFRecordWriter(path, options) as writer:
        for part in cfg["files"]:
            with open(part, newline="", encoding="utf-8") as f:
                reader = csv.reader(f)
                next(reader)  # header
                for row in reader:
                    writer.write(serialize(row))
    return _since(start)


def _worker_beam(cfg: dict) -> dict[str, float]:
    import apache_beam as beam
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    columns = [tuple(c) for c in cfg["columns"]]

    def parse_line(line: str) -> list[str]:
        import csv

        return next(csv.reader([line]))

    class ToExample(beam.DoFn):
        def setup(self):
            self._serialize = _tf_serializer(columns)

        def process(self, row):
            yield self._serialize(row)

    gzip = cfg["compression"] == "gzip"
    start = _clocks()
    # The FnApiRunner, built explicitly as our CLI does: Beam 2.77's DirectRunner would first
    # try to download the Prism runner.
    options = PipelineOptions(
        direct_running_mode=cfg.get("beam_running_mode", "multi_processing"),
        direct_num_workers=cfg.get("beam_workers", BEAM_WORKERS),
    )
    pipeline = beam.Pipeline(runner=FnApiRunner(), options=options)
    _ = (
        pipeline
        | "Read" >> beam.io.ReadFromText(cfg["pattern"], skip_header_lines=1)
        | "Parse" >> beam.Map(parse_line)
        | "ToExample" >> beam.ParDo(ToExample())
        | "Write" >> beam.io.WriteToTFRecord(
            os.path.join(cfg["output"], "beam"),
            file_name_suffix=".tfrecord.gz" if gzip else ".tfrecord",
            compression_type=CompressionTypes.GZIP if gzip else CompressionTypes.UNCOMPRESSED,
        )
    )
    pipeline.run().wait_until_finish()
    # Its work runs in Beam's worker processes: this process's CPU time says little.
    return {"seconds": _since(start)["seconds"]}


def _worker_ceiling(cfg: dict) -> dict[str, float]:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from transforms.format.compression import shard_suffix
    from transforms.format.example_columns import column_from_arrow
    from transforms.format.example_encoder import encode_framed
    from transforms.format.tfrecord_format import TFRecordWriter

    arrow_types = {"int64": pa.int64(), "float": pa.float64(), "string": pa.string()}
    kinds = {"int64": "int64", "float": "float", "string": "bytes"}
    columns = [tuple(c) for c in cfg["columns"]]
    convert = pacsv.ConvertOptions(column_types={n: arrow_types[t] for n, t in columns})
    path = os.path.join(cfg["output"], "ceiling" + shard_suffix(cfg["compression"]))
    start = _clocks()
    with open(path, "wb") as raw, TFRecordWriter(raw, cfg["compression"]) as writer:
        for part in cfg["files"]:
            table = pacsv.read_csv(part, convert_options=convert)
            for batch in table.to_batches(max_chunksize=CEILING_BATCH_ROWS):
                encoded = [
                    column_from_arrow(name, kinds[kind], batch.column(name)) for name, kind in columns
                ]
                framed = encode_framed(batch.num_rows, encoded)
                writer.write_framed(framed.data, len(framed))
    return _since(start)


def _worker_plain_images(cfg: dict) -> dict[str, float]:
    import hashlib

    from tests.format.reference_codec import encode_example
    from transforms.format.tfrecord_format import TFRecordWriter
    from transforms.images.headers import parse_header

    root = cfg["root"]
    path = os.path.join(cfg["output"], "plain.tfrecord")
    start = _clocks()
    labels = sorted(e.name for e in os.scandir(root) if e.is_dir())
    with open(path, "wb") as raw, TFRecordWriter(raw) as writer:
        for index, label in enumerate(labels):
            folder = os.path.join(root, label)
            for name in sorted(os.listdir(folder)):
                with open(os.path.join(folder, name), "rb") as f:
                    data = f.read()
                info = parse_header(data)
                writer.write(encode_example({
                    "image/encoded": ("bytes", [data]),
                    "image/format": ("bytes", [info.format]),
                    "image/height": ("int64", [info.height]),
                    "image/width": ("int64", [info.width]),
                    "image/channels": ("int64", [info.channels]),
                    "image/filename": ("bytes", [f"{label}/{name}"]),
                    "image/key/sha256": ("bytes", [hashlib.sha256(data).hexdigest()]),
                    "image/class/label": ("int64", [index]),
                    "image/class/text": ("bytes", [label]),
                }))
    return _since(start)


def _worker_ours(cfg: dict) -> dict[str, float]:
    from pipeline.cli import run

    start = _clocks()
    code = run(["convert", *cfg["argv"], "--output", cfg["output"], "--quiet"])
    if code:
        raise SystemExit(f"our CLI exited with {code}")
    # Its tabular work runs on forked processes: this process's CPU time says little.
    return {"seconds": _since(start)["seconds"]}


WORKERS: dict[str, Callable[[dict], dict[str, float]]] = {
    "tf": _worker_tf,
    "beam": _worker_beam,
    "ceiling": _worker_ceiling,
    "plain_loop": _worker_plain_images,
    "ours": _worker_ours,
}


def run_workers(cfgs: Sequence[dict]) -> None:
    """Runs each baseline of `cfgs` in turn, writing its timed seconds to its cfg["result"]."""
    for cfg in cfgs:
        Path(cfg["result"]).write_text(json.dumps(WORKERS[cfg["kind"]](cfg)))
