#!/usr/bin/env python
"""Benchmarks of tfrecord-pipeline against what users would otherwise write.

    python benchmarks/run_benchmarks.py [--tabular-rows-tf N] [--tabular-rows-wide N]
        [--images N] [--out DIR_OR_FILE.json] [--repeats 3] [--tiny] [--only SUBSTR,...]

Generates deterministic inputs (seeded numpy) into a work folder, then runs every path
back to back, each in its own child process of this one, round robin over `--repeats`
rounds (the median is reported):

* TF tutorial data (4 features) and a 20-column table, as CSV split into 8 part files
  (the same files feed every path):
  - ours: `python -m pipeline convert --format csv` end to end (default local runner),
    uncompressed and GZIP;
  - tf: TensorFlow's tutorial writer, csv module -> tf.train.Example per row ->
    tf.io.TFRecordWriter (NONE and GZIP);
  - beam: ReadFromText -> parse line -> tf.train.Example per row -> WriteToTFRecord on
    the FnApiRunner in multi_processing mode with 2 workers (NONE and GZIP);
  - ceiling: pyarrow CSV read -> our vectorised encoder, framing included -> one file,
    single process (NONE and GZIP).
* 640x480 JPEGs under ROOT/<label>/ (2 labels): ours (`--format image-folder`, keep
  bytes) against a plain loop that reads each file, parses its header, builds the same
  Example with the reference encoder, frames and writes it.
* Memory: ours (TF tutorial data, GZIP) at N/10 and N rows; growth of the peak RSS of
  the whole process tree.

Every run's output is read back (CRCs checked) and its records counted; a path whose
count differs from the input rows is reported as failed. Results go to `--out` as JSON
and beside it as Markdown (same name, `.md`). See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import compileall
import concurrent.futures
import dataclasses
import datetime
import glob
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(REPO))

RESULTS_SCHEMA = 1
# 20,000 images: a plain loop takes ~5 s on them, so (as with 2M rows) the comparison is
# about throughput, not about our ~1.8 s of start-up (Python, Beam, planning).
FULL = {"rows_tf": 2_000_000, "rows_wide": 500_000, "images": 20_000, "repeats": 3, "jobs": 1}
DISTINCT_IMAGES = 2000
# Tiny proves every path works (CI); at this size start-up dominates, so the cases may overlap.
TINY = {"rows_tf": 2_000, "rows_wide": 2_000, "images": 20, "repeats": 1, "jobs": 2}
DEFAULT_OUT = REPO / "benchmarks" / "results" / "latest.json"
NUM_PARTS = 8
SEED = 6
ANIMALS = ("cat", "dog", "chicken", "horse", "goat")
IMAGE_SIZE = (640, 480)
IMAGE_QUALITY = 90
IMAGE_LABELS = ("label_a", "label_b")
BEAM_WORKERS = 2
CEILING_BATCH_ROWS = 65_536
RSS_POLL_SECONDS = 0.05
# Our CLI on one row per part file: its fixed cost (start-up, planning, workers, commit).
STARTUP_CASE = "startup/ours/gzip"
TABULAR_DATASETS = ("tf_tutorial", "wide")
TABULAR_PATHS = ("ours", "tf", "beam", "ceiling")
COMPRESSIONS = ("none", "gzip")
# The issue's targets: (ratio key, dataset or None for every tabular one, minimum).
TARGETS = (
    ("ours/beam", "gzip", 20.0),
    ("ours/tf", "gzip", 8.0),
    ("ours/ceiling", "gzip", 0.5),
)
IMAGE_TARGET = 0.5
MEMORY_GROWTH_TARGET_PCT = 10.0


# ----------------------------------------------------------------------------- data


@dataclasses.dataclass(frozen=True)
class TabularData:
    """A generated CSV dataset: part files, the spec feeding our CLI, its column kinds."""

    name: str
    rows: int
    columns: tuple[tuple[str, str], ...]  # (name, spec type: int64 / float / string)
    directory: str
    files: tuple[str, ...]
    spec_path: str
    input_bytes: int

    @property
    def pattern(self) -> str:
        return os.path.join(self.directory, "*.csv")


@dataclasses.dataclass(frozen=True)
class ImageData:
    """A generated image-folder tree ROOT/<label>/<file>.jpg."""

    root: str
    count: int
    labels: tuple[str, ...]
    input_bytes: int
    distinct: int  # images generated; the other files are copies of them


def _tutorial_columns(rows: int, rng) -> dict[str, Any]:
    """TensorFlow's TFRecord tutorial data: bool, int in [0, 5), its animal, a normal float."""
    import numpy as np

    feature1 = rng.integers(0, len(ANIMALS), rows)
    return {
        "feature0": ("int64", rng.integers(0, 2, rows)),  # the tutorial's bool, as 0/1
        "feature1": ("int64", feature1),
        "feature2": ("string", np.array(ANIMALS)[feature1]),
        "feature3": ("float", rng.standard_normal(rows)),
    }


def _words(rng, count: int, min_len: int, max_len: int, alphabet: str) -> Any:
    import numpy as np

    letters = np.array(list(alphabet))
    lengths = rng.integers(min_len, max_len + 1, count)
    return np.array(["".join(letters[rng.integers(0, len(letters), n)]) for n in lengths])


def _wide_columns(rows: int, rng) -> dict[str, Any]:
    """20 columns: 8 int64 of varied ranges and signs, 8 floats, 4 short strings."""
    int_ranges = [
        (0, 2), (0, 10), (0, 1_000), (-1_000_000, 1_000_000), (0, 2**31),
        (-(2**40), 2**40), (0, 100_000), (-(2**62), 2**62),
    ]
    columns: dict[str, Any] = {}
    for i, (low, high) in enumerate(int_ranges):
        columns[f"int_{i}"] = ("int64", rng.integers(low, high, rows))
    for i in range(8):
        scale = 10.0 ** (i - 3)
        values = rng.standard_normal(rows) if i % 2 else rng.random(rows)
        columns[f"float_{i}"] = ("float", values * scale)
    vocabularies = [
        _words(rng, 10, 3, 8, "abcdefghijklmnopqrstuvwxyz"),
        _words(rng, 1_000, 8, 8, "0123456789abcdef"),
        _words(rng, 100, 4, 12, "abcdefghijklmnopqrstuvwxyzéüß"),
        _words(rng, 5_000, 1, 16, "abcdefghijklmnopqrstuvwxyz "),
    ]
    for i, vocabulary in enumerate(vocabularies):
        columns[f"str_{i}"] = ("string", vocabulary[rng.integers(0, len(vocabulary), rows)])
    return columns


def _write_spec(path: str, columns: Sequence[tuple[str, str]]) -> None:
    from transforms.tabular.spec import ConversionSpec, FeatureSpec, parse_spec

    spec = ConversionSpec(features=tuple(FeatureSpec(name=n, type=t) for n, t in columns))
    text = spec.to_yaml()
    parse_spec(text)  # the CLI must accept what we write
    Path(path).write_text(text, encoding="utf-8")


def write_tabular(name: str, rows: int, make_columns: Callable, work: str, seed: int) -> TabularData:
    """Generates `rows` rows and writes them as NUM_PARTS CSV files plus a spec."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv

    columns = make_columns(rows, np.random.default_rng(seed))
    table = pa.table({n: values for n, (_, values) in columns.items()})
    directory = os.path.join(work, name)
    os.makedirs(directory, exist_ok=True)
    bounds = np.linspace(0, rows, NUM_PARTS + 1).astype(int)
    files = []
    header = (",".join(table.column_names) + "\n").encode()
    options = pacsv.WriteOptions(include_header=False, quoting_style="needed")
    for part in range(NUM_PARTS):
        path = os.path.join(directory, f"part-{part:05d}-of-{NUM_PARTS:05d}.csv")
        with open(path, "wb") as f:
            f.write(header)
            chunk = table.slice(bounds[part], bounds[part + 1] - bounds[part])
            pacsv.write_csv(chunk, f, options)
        files.append(path)
    kinds = tuple((n, t) for n, (t, _) in columns.items())
    spec_path = os.path.join(work, f"{name}.spec.yaml")
    _write_spec(spec_path, kinds)
    return TabularData(
        name=name, rows=rows, columns=kinds, directory=directory, files=tuple(files),
        spec_path=spec_path, input_bytes=sum(os.path.getsize(p) for p in files),
    )


def write_images(count: int, root: str, seed: int, distinct: int = DISTINCT_IMAGES) -> ImageData:
    """`count` 640x480 JPEGs (quality 90) of gradients and smooth noise, 2 label folders.

    Only `distinct` of them are generated (Pillow takes ~40 ms per image); the other files
    are byte copies of those, each in its original's label folder. Nothing in any path
    looks at content across files, so copies cost what distinct images would.
    """
    import shutil

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    width, height = IMAGE_SIZE
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    xs /= width
    ys /= height
    total = 0
    for label in IMAGE_LABELS:
        os.makedirs(os.path.join(root, label), exist_ok=True)
    distinct = max(2, min(count, distinct)) // 2 * 2  # even: a copy keeps its label
    for i in range(min(count, distinct)):
        angle = rng.uniform(0, 2 * np.pi)
        ramp = np.cos(angle) * xs + np.sin(angle) * ys
        ramp = (ramp - ramp.min()) / (np.ptp(ramp) or 1.0)
        colors = rng.uniform(0, 255, (2, 3)).astype(np.float32)
        pixels = colors[0] * (1 - ramp[..., None]) + colors[1] * ramp[..., None]
        blobs = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8))
        blobs = np.asarray(blobs.resize(IMAGE_SIZE, Image.BICUBIC), np.float32)
        pixels = 0.6 * pixels + 0.4 * blobs + rng.normal(0, 6, (height, width, 3))
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
        path = os.path.join(root, IMAGE_LABELS[i % len(IMAGE_LABELS)], f"image_{i:05d}.jpg")
        image.save(path, "JPEG", quality=IMAGE_QUALITY)
        total += os.path.getsize(path)
    for i in range(distinct, count):
        label = IMAGE_LABELS[i % len(IMAGE_LABELS)]
        source = os.path.join(root, label, f"image_{i % distinct:05d}.jpg")
        path = os.path.join(root, label, f"image_{i:05d}.jpg")
        shutil.copyfile(source, path)
        total += os.path.getsize(path)
    return ImageData(root=root, count=count, labels=IMAGE_LABELS, input_bytes=total,
                     distinct=min(count, distinct))


# -------------------------------------------------------------------- child processes
#
# The non-CLI paths run in child processes of this script (`--worker JSON`), so each path's
# imports and memory are its own. A worker times only its work (not interpreter start-up
# or importing TensorFlow/Beam in the launcher) and writes {"seconds": s} to cfg["result"].


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


def _worker_tf(cfg: dict) -> float:
    import csv

    import tensorflow as tf

    serialize = _tf_serializer(cfg["columns"])
    options = tf.io.TFRecordOptions(compression_type="GZIP" if cfg["compression"] == "gzip" else "")
    suffix = ".tfrecord.gz" if cfg["compression"] == "gzip" else ".tfrecord"
    path = os.path.join(cfg["output"], "tf" + suffix)
    start = time.perf_counter()
    with tf.io.TFRecordWriter(path, options) as writer:
        for part in cfg["files"]:
            with open(part, newline="", encoding="utf-8") as f:
                reader = csv.reader(f)
                next(reader)  # header
                for row in reader:
                    writer.write(serialize(row))
    return time.perf_counter() - start


def _worker_beam(cfg: dict) -> float:
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
    start = time.perf_counter()
    # The FnApiRunner, built explicitly as our CLI does: Beam 2.77's DirectRunner would first
    # try to download the Prism runner.
    options = PipelineOptions(
        direct_running_mode="multi_processing", direct_num_workers=BEAM_WORKERS
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
    return time.perf_counter() - start


def _worker_ceiling(cfg: dict) -> float:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from transforms.format.example_encoder import column_from_arrow, encode_framed
    from transforms.format.tfrecord_format import TFRecordWriter, shard_suffix

    arrow_types = {"int64": pa.int64(), "float": pa.float64(), "string": pa.string()}
    kinds = {"int64": "int64", "float": "float", "string": "bytes"}
    columns = [tuple(c) for c in cfg["columns"]]
    convert = pacsv.ConvertOptions(column_types={n: arrow_types[t] for n, t in columns})
    path = os.path.join(cfg["output"], "ceiling" + shard_suffix(cfg["compression"]))
    start = time.perf_counter()
    with open(path, "wb") as raw, TFRecordWriter(raw, cfg["compression"]) as writer:
        for part in cfg["files"]:
            table = pacsv.read_csv(part, convert_options=convert)
            for batch in table.to_batches(max_chunksize=CEILING_BATCH_ROWS):
                encoded = [
                    column_from_arrow(name, kinds[kind], batch.column(name)) for name, kind in columns
                ]
                framed = encode_framed(batch.num_rows, encoded)
                writer.write_framed(framed.data, len(framed))
    return time.perf_counter() - start


def _worker_plain_images(cfg: dict) -> float:
    import hashlib

    from transforms.format.example_codec import encode_example
    from transforms.format.tfrecord_format import TFRecordWriter
    from transforms.images.headers import parse_header

    root = cfg["root"]
    path = os.path.join(cfg["output"], "plain.tfrecord")
    start = time.perf_counter()
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
    return time.perf_counter() - start


_WORKERS = {
    "tf": _worker_tf,
    "beam": _worker_beam,
    "ceiling": _worker_ceiling,
    "plain_loop": _worker_plain_images,
}


def worker_main(cfg: dict) -> None:
    seconds = _WORKERS[cfg["kind"]](cfg)
    Path(cfg["result"]).write_text(json.dumps({"seconds": seconds}))


# ------------------------------------------------------------------ measuring a child


class TreeRssMonitor(threading.Thread):
    """Polls the summed RSS of a process and all its descendants; keeps the peak."""

    def __init__(self, pid: int, interval: float = RSS_POLL_SECONDS):
        super().__init__(daemon=True)
        import psutil

        self._psutil = psutil
        self._root = psutil.Process(pid)
        self._interval = interval
        self._stop_event = threading.Event()
        self.peak = 0
        self.samples = 0

    def sample(self) -> None:
        psutil = self._psutil
        try:
            processes = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:  # the root has exited
            return
        total = 0
        for process in processes:
            try:
                total += process.memory_info().rss
            except psutil.Error:  # exited between listing and reading
                pass
        self.samples += 1
        self.peak = max(self.peak, total)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self._interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's start-up chatter
    return env


@dataclasses.dataclass
class Measurement:
    wall_seconds: float
    cpu_seconds: float | None  # user + system of the child and its waited-for descendants
    peak_rss: int
    returncode: int


def _wait(child: subprocess.Popen) -> tuple[int, float | None]:
    """Reaps `child`; its exit code and CPU seconds (this child's own rusage, so
    concurrent cases do not mix)."""
    if not hasattr(os, "wait4"):  # not POSIX
        return child.wait(), None
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_utime + usage.ru_stime


def measure(command: Sequence[str], log_path: str) -> Measurement:
    """Runs `command` as a child; wall time and the peak RSS of its process tree."""
    with open(log_path, "wb") as log:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=_child_env())
        monitor = TreeRssMonitor(child.pid)
        monitor.start()
        returncode, cpu = _wait(child)
        wall = time.perf_counter() - start
        monitor.stop()
    return Measurement(wall, cpu, monitor.peak, returncode)


# ------------------------------------------------------------------------- the cases


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmarked path on one dataset with one compression."""

    id: str
    dataset: str
    path: str
    compression: str
    rows: int
    input_bytes: int
    expected_features: tuple[str, ...]
    command: Callable[[str, str], list[str]]  # (output dir, result file) -> argv
    timing: str  # "process": the child's wall time; "region": the worker's timed work
    inputs: tuple[str, ...] = ()  # files or folders the case reads (warmed before it runs)


def _ours_csv(data: TabularData, compression: str) -> Callable[[str, str], list[str]]:
    def command(output: str, result: str) -> list[str]:
        argv = [sys.executable, "-m", "pipeline", "convert", "--input", data.pattern,
                "--format", "csv", "--spec", data.spec_path, "--output", output, "--quiet"]
        if compression != "none":
            argv += ["--compression", compression]
        return argv

    return command


def _ours_images(data: ImageData) -> Callable[[str, str], list[str]]:
    def command(output: str, result: str) -> list[str]:
        return [sys.executable, "-m", "pipeline", "convert", "--input", data.root,
                "--format", "image-folder", "--output", output, "--quiet"]

    return command


def _worker_command(cfg: dict) -> Callable[[str, str], list[str]]:
    def command(output: str, result: str) -> list[str]:
        full = dict(cfg, output=output, result=result)
        return [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(full)]

    return command


IMAGE_FEATURE_NAMES = (
    "image/channels", "image/class/label", "image/class/text", "image/encoded",
    "image/filename", "image/format", "image/height", "image/key/sha256", "image/width",
)


def tabular_cases(data: TabularData, dataset: str | None = None) -> list[Case]:
    dataset = dataset or data.name
    features = tuple(sorted(n for n, _ in data.columns))
    cases = []
    for path in TABULAR_PATHS:
        for compression in COMPRESSIONS:
            if path == "ours":
                command = _ours_csv(data, compression)
            else:
                command = _worker_command({
                    "kind": path, "compression": compression, "columns": data.columns,
                    "files": data.files, "pattern": data.pattern,
                })
            cases.append(Case(
                id=f"{dataset}/{path}/{compression}", dataset=dataset, path=path,
                compression=compression, rows=data.rows, input_bytes=data.input_bytes,
                expected_features=features, command=command,
                timing="process" if path == "ours" else "region", inputs=tuple(data.files),
            ))
    return cases


def image_cases(data: ImageData) -> list[Case]:
    common = dict(dataset="images", compression="none", rows=data.count,
                  input_bytes=data.input_bytes, expected_features=IMAGE_FEATURE_NAMES,
                  inputs=(data.root,))
    return [
        Case(id="images/ours/none", path="ours", command=_ours_images(data), timing="process", **common),
        Case(id="images/plain_loop/none", path="plain_loop", timing="region",
             command=_worker_command({"kind": "plain_loop", "root": data.root}), **common),
    ]


# --------------------------------------------------------------------- checking output


def _tfrecord_files(output: str) -> list[str]:
    # Shards only: our CLI also writes manifest.json, spec.yaml, dead_letter/ ... beside them.
    names = glob.glob(os.path.join(output, "*.tfrecord")) + glob.glob(os.path.join(output, "*.tfrecord.gz"))
    return sorted(names)


def check_output(output: str) -> dict[str, Any]:
    """Counts the records of every shard (CRCs checked) and reads the first one's features."""
    from transforms.format.example_codec import decode_example
    from transforms.format.tfrecord_format import compression_from_path, iter_records

    files = _tfrecord_files(output)
    records = 0
    features: tuple[str, ...] = ()
    for path in files:
        with open(path, "rb") as f:
            for info in iter_records(f, compression_from_path(path), path=path):
                if not features:
                    features = tuple(sorted(decode_example(bytes(info.payload))))
                records += 1
    manifest_path = os.path.join(output, "manifest.json")
    dead_letters = None
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            dead_letters = json.load(f)["counts"]["dead_letter"]
    return {
        "records": records,
        "files": len(files),
        "output_bytes": sum(os.path.getsize(p) for p in files),
        "features": features,
        "dead_letters": dead_letters,
    }


# ------------------------------------------------------------------------- running


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _warm(inputs: Sequence[str]) -> None:
    """Reads every input file once (untimed), so each case starts from cached input."""
    paths = []
    for entry in inputs:
        if os.path.isdir(entry):
            paths += [os.path.join(folder, name) for folder, _, names in os.walk(entry)
                      for name in names]
        else:
            paths.append(entry)
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass


def byte_compile_project(root: Path = REPO) -> None:
    """Byte-compiles our packages once, untimed, as `pip install` does for an installed
    package. Where Python writes no bytecode itself (PYTHONDONTWRITEBYTECODE=1, as in our
    sandbox), a checkout's ~40 modules would otherwise be compiled on every start of our
    CLI: measured 0.16 s of its ~1 s start-up. Beam's and TensorFlow's modules, in
    site-packages, were compiled when they were installed."""
    for package in ("pipeline", "protos", "transforms"):
        if not compileall.compile_dir(str(root / package), quiet=1):
            print(f"warning: could not byte-compile {root / package}; our CLI's times include "
                  f"compiling it", file=sys.stderr, flush=True)


def run_case(case: Case, work: str, repeat: int, keep_output: bool = False) -> dict[str, Any]:
    """Runs one repeat of a case: its measurement and output check.

    The output is deleted after the check unless `keep_output` (then its folder is in the
    returned "output_dir").
    """
    slug = case.id.replace("/", "-")
    output = os.path.join(work, "out", f"{slug}-r{repeat}")
    shutil.rmtree(output, ignore_errors=True)
    os.makedirs(os.path.dirname(output), exist_ok=True)
    if case.path != "ours":  # our CLI creates its output folder; the others expect one
        os.makedirs(output)
    result_file = os.path.join(work, "logs", f"{slug}-r{repeat}.result.json")
    log_file = os.path.join(work, "logs", f"{slug}-r{repeat}.log")
    # Every case starts alike, untimed: no writeback pending from the case before (a 1.4 GB
    # image output still being flushed slowed the next case's writes by up to 2x), and its
    # input read once. This machine's page cache is small and evicts eagerly: the first
    # image case of a round otherwise read its input from disk (40 s instead of 10 s) and
    # left it cached for the case after it.
    os.sync()
    _warm(case.inputs)
    measured = measure(case.command(output, result_file), log_file)
    run: dict[str, Any] = {
        "wall_seconds": measured.wall_seconds,
        "cpu_seconds": measured.cpu_seconds,
        "peak_rss_bytes": measured.peak_rss,
        "returncode": measured.returncode,
    }
    if measured.returncode != 0:
        with open(log_file, encoding="utf-8", errors="replace") as f:
            run["error"] = f"exit code {measured.returncode}; log tail:\n" + f.read()[-3000:]
        return run
    if case.timing == "region":
        run["seconds"] = json.loads(Path(result_file).read_text())["seconds"]
    else:
        run["seconds"] = measured.wall_seconds
    run.update(check_output(output))
    if keep_output:
        run["output_dir"] = output
    else:
        shutil.rmtree(output, ignore_errors=True)
    problems = []
    if run["records"] != case.rows:
        problems.append(f"{run['records']} records written, expected {case.rows}")
    if run["features"] != case.expected_features:
        problems.append(f"features {list(run['features'])}, expected {list(case.expected_features)}")
    if run["dead_letters"]:
        problems.append(f"{run['dead_letters']} dead letters")
    if problems:
        run["error"] = "; ".join(problems)
    return run


def summarize(case: Case, runs: list[dict[str, Any]]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": case.id, "dataset": case.dataset, "path": case.path,
        "compression": case.compression, "rows": case.rows, "input_bytes": case.input_bytes,
        "timing": case.timing, "runs": runs,
    }
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        entry["error"] = errors[0]
        return entry
    seconds = _median([r["seconds"] for r in runs])
    output_bytes = runs[-1]["output_bytes"]
    entry.update({
        "ok": True,
        "records": runs[-1]["records"],
        "records_all_runs": [r["records"] for r in runs],
        "features": list(runs[-1]["features"]),
        "seconds": seconds,
        "wall_seconds": _median([r["wall_seconds"] for r in runs]),
        "cpu_seconds": None if any(r["cpu_seconds"] is None for r in runs)
        else _median([r["cpu_seconds"] for r in runs]),
        "rows_per_s": case.rows / seconds if seconds > 0 else float("inf"),
        "output_bytes": output_bytes,
        "output_files": runs[-1]["files"],
        "output_dir": runs[-1].get("output_dir"),
        "mb_per_s": output_bytes / 1e6 / seconds if seconds > 0 else float("inf"),
        "peak_rss_bytes": int(_median([r["peak_rss_bytes"] for r in runs])),
        "peak_rss_mb": _median([r["peak_rss_bytes"] for r in runs]) / 2**20,
    })
    return entry


def startup_seconds(results: dict[str, dict]) -> float | None:
    """Our CLI's fixed cost: its median time for one row per part file."""
    entry = results.get(STARTUP_CASE)
    return entry["seconds"] if entry and entry.get("ok") else None


def compute_ratios(results: dict[str, dict], mode: str = "timed") -> dict[str, dict[str, float]]:
    """ours / other rows/s, per dataset and compression.

    mode "timed": each path's reported rate (ours: whole process; others: timed region).
    "wall": every path's whole child process (start-up and imports included).
    "excluding_startup": ours' seconds minus `startup_seconds` (others as "timed"), i.e.
    our throughput once running; None where that leaves no time.
    """
    ratios: dict[str, dict[str, float]] = {}
    startup = startup_seconds(results)

    def rate(key: str) -> float | None:
        entry = results.get(key)
        if not (entry and entry.get("ok")):
            return None
        if mode == "wall":
            return entry["rows"] / entry["wall_seconds"]
        if mode == "excluding_startup" and entry["path"] == "ours":
            if startup is None or entry["seconds"] <= startup:
                return None
            return entry["rows"] / (entry["seconds"] - startup)
        return entry["rows_per_s"]

    for dataset in TABULAR_DATASETS:
        for compression in COMPRESSIONS:
            ours = rate(f"{dataset}/ours/{compression}")
            group = {}
            for other in ("tf", "beam", "ceiling"):
                theirs = rate(f"{dataset}/{other}/{compression}")
                if ours is not None and theirs:
                    group[f"ours/{other}"] = ours / theirs
            if group:
                ratios[f"{dataset}/{compression}"] = group
    ours, plain = rate("images/ours/none"), rate("images/plain_loop/none")
    if ours is not None and plain:
        ratios["images/none"] = {"ours/plain_loop": ours / plain}
    return ratios


def compute_memory(results: dict[str, dict]) -> dict[str, Any] | None:
    small, large = results.get("memory_small/ours/gzip"), results.get("tf_tutorial/ours/gzip")
    if not (small and large and small.get("ok") and large.get("ok")):
        return None
    growth = (large["peak_rss_bytes"] - small["peak_rss_bytes"]) / small["peak_rss_bytes"] * 100
    return {
        "small": small["id"], "large": large["id"],
        "rows_small": small["rows"], "rows_large": large["rows"],
        "peak_rss_small_mb": small["peak_rss_mb"], "peak_rss_large_mb": large["peak_rss_mb"],
        "growth_pct": growth,
    }


def compute_targets(ratios: dict, memory: dict | None) -> list[dict[str, Any]]:
    targets = []
    for key, compression, minimum in TARGETS:
        for dataset in TABULAR_DATASETS:
            value = ratios.get(f"{dataset}/{compression}", {}).get(key)
            if value is not None:
                targets.append({"name": f"{dataset} {compression} {key}", "value": value,
                                "target": f">= {minimum:g}", "met": value >= minimum})
    value = ratios.get("images/none", {}).get("ours/plain_loop")
    if value is not None:
        targets.append({"name": "images ours/plain_loop", "value": value,
                        "target": f">= {IMAGE_TARGET:g}", "met": value >= IMAGE_TARGET})
    if memory is not None:
        targets.append({"name": "memory: peak RSS growth for 10x rows (%)",
                        "value": memory["growth_pct"], "target": f"< {MEMORY_GROWTH_TARGET_PCT:g}",
                        "met": memory["growth_pct"] < MEMORY_GROWTH_TARGET_PCT})
    return targets


# ------------------------------------------------------------------------ reporting


def _version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    ram = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    ram = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "ram_bytes": ram,
        "ram_gib": round(ram / 2**30, 1) if ram else None,
        "os": platform.platform(),
        "python": platform.python_version(),
        "apache_beam": _version("apache-beam"),
        "tensorflow": _version("tensorflow-cpu", "tensorflow"),
        "pyarrow": _version("pyarrow"),
        "numpy": _version("numpy"),
        "protobuf": _version("protobuf"),
        "isal": _version("isal"),
        # Beam's gcp extra (our `dataflow` extra) adds ~0.25 s to every start of our CLI.
        "beam_gcp_extra": _version("google-cloud-dataflow-client") is not None,
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _fmt_rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.1f}"


def result_rows(report: dict) -> list[list[str]]:
    rows = []
    for entry in report["results"]:
        if not entry.get("ok"):
            rows.append([entry["id"], f"{entry['rows']:,}", "FAILED", "", "", "", "", ""])
            continue
        rows.append([
            entry["id"], f"{entry['rows']:,}", f"{entry['seconds']:.2f}", _fmt_rate(entry["rows_per_s"]),
            f"{entry['mb_per_s']:.1f}", f"{entry['output_bytes'] / 1e6:.1f}", f"{entry['peak_rss_mb']:.0f}",
            f"{entry['records']:,}",
        ])
    return rows


RESULT_HEADER = ["path", "rows", "seconds", "rows/s", "MB/s out", "MB out", "peak RSS MB", "records"]


def _text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


RATIO_HEADER = ["dataset/compression", "ratio (rows/s)", "value", "ours without start-up"]


def ratio_rows(report: dict) -> list[list[str]]:
    rows = []
    for group, values in report["ratios"].items():
        for key, value in values.items():
            steady = report["ratios_excluding_startup"].get(group, {}).get(key)
            rows.append([group, key, f"{value:.2f}x", "-" if steady is None else f"{steady:.2f}x"])
    return rows


def target_rows(report: dict) -> list[list[str]]:
    return [[t["name"], f"{t['value']:.2f}", t["target"], "met" if t["met"] else "NOT met"]
            for t in report["targets"]]


def format_text(report: dict) -> str:
    parts = [_text_table(RESULT_HEADER, result_rows(report))]
    if report["ratios"]:
        parts.append(_text_table(RATIO_HEADER, ratio_rows(report)))
        if report["startup_seconds"] is not None:
            parts.append(f"our CLI's fixed cost (one row per part file): {report['startup_seconds']:.1f} s")
    memory = report.get("memory")
    if memory:
        parts.append(
            f"memory: ours GZIP peak RSS {memory['peak_rss_small_mb']:.0f} MB at {memory['rows_small']:,} "
            f"rows, {memory['peak_rss_large_mb']:.0f} MB at {memory['rows_large']:,} rows "
            f"(growth {memory['growth_pct']:+.1f} %)"
        )
    if report["targets"]:
        parts.append(_text_table(["target", "value", "goal", ""], target_rows(report)))
    failed = [e for e in report["results"] if not e.get("ok")]
    for entry in failed:
        parts.append(f"FAILED {entry['id']}: {entry.get('error', 'not run')}")
    return "\n\n".join(parts)


def format_markdown(report: dict) -> str:
    m, c = report["machine"], report["config"]
    how = [f"median of {c['repeats']} runs"]
    if c["jobs"] > 1:
        how.append(f"{c['jobs']} cases at once")
    if c["tiny"]:
        how.append("tiny sizes: not a measurement")
    lines = [
        "# tfrecord-pipeline benchmarks",
        "",
        f"Measured {report['created_at']} with `python benchmarks/run_benchmarks.py"
        f"{' --tiny' if c['tiny'] else ''}` ({', '.join(how)}).",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable), RAM {m['ram_gib']} GiB",
        f"- {m['os']}; Python {m['python']}, Apache Beam {m['apache_beam']}, TensorFlow {m['tensorflow']}, "
        f"pyarrow {m['pyarrow']}, numpy {m['numpy']}, protobuf {m['protobuf']}, isal {m['isal']}; "
        f"Beam's gcp extra {'installed' if m.get('beam_gcp_extra') else 'not installed'}",
        f"- Load average at start: {m['load_average_at_start']}",
        f"- Data: TF tutorial {c['rows_tf']:,} rows, 20 columns {c['rows_wide']:,} rows "
        f"(CSV, {NUM_PARTS} part files each), {c['images']:,} JPEGs {IMAGE_SIZE[0]}x{IMAGE_SIZE[1]} "
        f"(quality {IMAGE_QUALITY}; {report['datasets']['images'].get('distinct', c['images']):,} "
        f"distinct, the rest byte copies)",
        "",
        "`ours` is the CLI's whole process (start-up and imports included); the other paths time "
        "their work inside a child process (after importing TensorFlow/Beam). MB/s counts output "
        "bytes. Peak RSS is summed over the path's process tree (Beam workers included).",
        "",
        _md_table(RESULT_HEADER, result_rows(report)),
        "",
    ]
    if report["ratios"]:
        lines += ["## Ratios (rows/s)", "", _md_table(RATIO_HEADER, ratio_rows(report)), ""]
        if report["startup_seconds"] is not None:
            lines += [
                "\"Ours without start-up\" subtracts our CLI's fixed cost, "
                f"{report['startup_seconds']:.1f} s (`{STARTUP_CASE}`: one row per part file), from "
                "ours' time; the targets use the end-to-end value.",
                "",
            ]
    memory = report.get("memory")
    if memory:
        lines += [
            "## Memory",
            "",
            f"Ours, TF tutorial data, GZIP: peak RSS {memory['peak_rss_small_mb']:.0f} MB at "
            f"{memory['rows_small']:,} rows and {memory['peak_rss_large_mb']:.0f} MB at "
            f"{memory['rows_large']:,} rows: growth {memory['growth_pct']:+.1f} %.",
            "",
        ]
    if report["targets"]:
        table = _md_table(["target", "value", "goal", ""], target_rows(report))
        lines += ["## Targets (issue 6)", "", table, ""]
    failed = [e for e in report["results"] if not e.get("ok")]
    if failed:
        lines += ["## Failures", ""]
        lines += [f"- `{e['id']}`: {(e.get('error') or 'failed').splitlines()[0]}" for e in failed]
    return "\n".join(lines).rstrip() + "\n"


# ----------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tabular-rows-tf", type=int, help=f"TF tutorial rows (default {FULL['rows_tf']:,})")
    parser.add_argument("--tabular-rows-wide", type=int,
                        help=f"20-column table rows (default {FULL['rows_wide']:,})")
    parser.add_argument("--images", type=int, help=f"JPEGs (default {FULL['images']})")
    parser.add_argument("--repeats", type=int,
                        help=f"runs per path, median reported (default {FULL['repeats']})")
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help="JSON results file, or a folder for latest.json (the .md goes beside it)")
    parser.add_argument("--tiny", action="store_true",
                        help=f"tiny sizes ({TINY['rows_tf']:,} rows, {TINY['images']} images, 1 run): "
                             "the CI smoke run")
    parser.add_argument("--work-dir", help="where inputs and outputs go (default: a temporary folder)")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep the work folder: inputs, logs and each path's last output")
    parser.add_argument("--only", help="comma-separated substrings; run only cases whose id contains one "
                                      "(e.g. 'tf_tutorial/ours,ceiling')")
    parser.add_argument("--jobs", type=int,
                        help="cases run at once (default 1; 2 with --tiny). Above 1 the cases disturb "
                             "each other's timings: for smoke runs only")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = TINY if args.tiny else FULL
    for key, attr in (("rows_tf", "tabular_rows_tf"), ("rows_wide", "tabular_rows_wide"),
                      ("images", "images"), ("repeats", "repeats"), ("jobs", "jobs")):
        if getattr(args, attr) is None:
            setattr(args, attr, sizes[key])
        if getattr(args, attr) < 1 or (key.startswith("rows") and getattr(args, attr) < 10):
            parser.error(f"--{attr.replace('_', '-')} is too small")
    return args


def _out_paths(out: str) -> tuple[Path, Path]:
    path = Path(out)
    if path.suffix.lower() != ".json":
        path = path / "latest.json"
    return path, path.with_suffix(".md")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker_main(json.loads(args.worker))
        return 0
    json_path, md_path = _out_paths(args.out)
    work = args.work_dir or tempfile.mkdtemp(prefix="tfrecord-bench-")
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    started = time.perf_counter()
    machine = machine_info()
    byte_compile_project()
    try:
        print(f"generating data in {work} ...", flush=True)
        gen_start = time.perf_counter()
        tutorial = write_tabular("tf_tutorial", args.tabular_rows_tf, _tutorial_columns, work, SEED)
        small = write_tabular("memory_small", max(1, args.tabular_rows_tf // 10), _tutorial_columns,
                              work, SEED + 1)
        wide = write_tabular("wide", args.tabular_rows_wide, _wide_columns, work, SEED + 2)
        startup = write_tabular("startup", NUM_PARTS, _tutorial_columns, work, SEED + 4)
        images = write_images(args.images, os.path.join(work, "images"), SEED + 3)
        generation_seconds = time.perf_counter() - gen_start

        cases = tabular_cases(tutorial) + tabular_cases(wide) + image_cases(images)
        for extra in (small, startup):
            cases += [c for c in tabular_cases(extra) if c.path == "ours" and c.compression == "gzip"]
        if args.only:
            wanted = [s.strip() for s in args.only.split(",") if s.strip()]
            cases = [c for c in cases if any(s in c.id for s in wanted)]
        runs: dict[str, list[dict]] = {c.id: [] for c in cases}
        # Round robin over the repeats: slow drift of a shared machine hits every path alike.
        for repeat in range(args.repeats):
            keep = args.keep_work and repeat == args.repeats - 1

            def one(case: Case, repeat: int = repeat, keep: bool = keep) -> dict[str, Any]:
                print(f"[{time.perf_counter() - started:7.1f}s] run {repeat + 1}/{args.repeats}: "
                      f"{case.id}", flush=True)
                return run_case(case, work, repeat, keep_output=keep)

            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                for case, run in zip(cases, pool.map(one, cases), strict=True):
                    runs[case.id].append(run)
        results = {c.id: summarize(c, runs[c.id]) for c in cases}
    finally:
        if not args.keep_work and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)

    ratios = compute_ratios(results)
    memory = compute_memory(results)
    report = {
        "schema": RESULTS_SCHEMA,
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine,
        "config": {
            "tiny": args.tiny, "repeats": args.repeats, "jobs": args.jobs, "rows_tf": args.tabular_rows_tf,
            "rows_wide": args.tabular_rows_wide, "rows_memory_small": small.rows, "images": args.images,
            "parts": NUM_PARTS, "seed": SEED, "beam_workers": BEAM_WORKERS,
            "ceiling_batch_rows": CEILING_BATCH_ROWS, "rss_poll_seconds": RSS_POLL_SECONDS,
            "only": args.only,
        },
        "datasets": {
            d.name: {"rows": d.rows, "columns": [list(c) for c in d.columns], "files": len(d.files),
                     "input_bytes": d.input_bytes}
            for d in (tutorial, wide, small, startup)
        } | {"images": {"rows": images.count, "labels": list(images.labels),
                        "input_bytes": images.input_bytes, "distinct": images.distinct}},
        "generation_seconds": generation_seconds,
        "total_seconds": time.perf_counter() - started,
        "results": list(results.values()),
        "ratios": ratios,
        "startup_seconds": startup_seconds(results),
        "ratios_excluding_startup": compute_ratios(results, "excluding_startup"),
        "ratios_wall_clock": compute_ratios(results, "wall"),
        "memory": memory,
        "targets": compute_targets(ratios, memory),
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    md_path.write_text(format_markdown(report), encoding="utf-8")
    print()
    print(format_text(report))
    print(f"\nwrote {json_path} and {md_path} ({report['total_seconds']:.0f} s)")
    return 0 if all(e.get("ok") for e in report["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
