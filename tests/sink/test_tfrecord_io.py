"""`ReadTFRecordFiles`: the Beam read transform."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from tests.format.reference_codec import encode_example
from transforms.records import RecordBatch, batch_key
from transforms.sink import WriteToShardedTFRecord
from transforms.tfrecord_io import ReadTFRecordFiles, manifest_shard_paths


def _write(output, compression, records_per_split=20):
    batches = [
        RecordBatch(batch_key(0, 0), split,
                    [encode_example({"id": ("int64", [i]), "split": ("bytes", [split])})
                     for i in range(records_per_split)], (), records_per_split)
        for split in ("train", "test")
    ]
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = pipeline | beam.Create(batches) | WriteToShardedTFRecord(
            str(output), compression=compression, max_shard_bytes=200)


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_reads_a_committed_split_as_example_dicts(tmp_path, compression):
    _write(tmp_path, compression)
    assert len(manifest_shard_paths(str(tmp_path), "train")) > 1  # several shards, all read
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        examples = pipeline | ReadTFRecordFiles.from_output(str(tmp_path), "train", parse=True)
        ids = examples | beam.Map(lambda example: (example["id"][0], example["split"][0]))
        assert_that(ids, equal_to([(i, b"train") for i in range(20)]))


def test_reads_payloads_by_glob_with_compression_from_the_suffix(tmp_path):
    _write(tmp_path, "gzip")
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        payloads = pipeline | ReadTFRecordFiles(str(tmp_path / "*.tfrecord.gz"))
        assert_that(payloads | beam.combiners.Count.Globally(), equal_to([40]))


def test_only_what_the_manifest_lists_is_read(tmp_path):
    _write(tmp_path, "none")
    stray = tmp_path / "train-00099-of-00100.tfrecord"  # e.g. left by another tool
    stray.write_bytes(next(tmp_path.glob("train-*.tfrecord")).read_bytes())
    assert str(stray) not in manifest_shard_paths(str(tmp_path))
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        payloads = pipeline | ReadTFRecordFiles.from_output(str(tmp_path))
        assert_that(payloads | beam.combiners.Count.Globally(), equal_to([40]))


def test_a_folder_without_manifest_is_not_output(tmp_path):
    with pytest.raises(FileNotFoundError, match="manifest"):
        ReadTFRecordFiles.from_output(str(tmp_path))


def test_corrupt_file_fails_the_read_naming_it(tmp_path):
    _write(tmp_path, "none")
    shard = sorted(tmp_path.glob("test-*.tfrecord"))[0]
    data = bytearray(shard.read_bytes())
    data[20] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(Exception, match=shard.name):
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = pipeline | ReadTFRecordFiles(str(shard))
