"""`ReadTFRecordFiles`: the Beam read transform."""

from __future__ import annotations

import shutil

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


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """compression -> an output written by `_write`, once per module; tests only read it (one
    that changes an output changes its own copy)."""
    made = {}

    def get(compression: str):
        if compression not in made:
            made[compression] = tmp_path_factory.mktemp(compression)
            _write(made[compression], compression)
        return made[compression]

    return get


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_reads_a_committed_split_as_example_dicts(written, compression):
    output = written(compression)
    assert len(manifest_shard_paths(str(output), "train")) > 1  # several shards, all read
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        examples = pipeline | ReadTFRecordFiles.from_output(str(output), "train", parse=True)
        ids = examples | beam.Map(lambda example: (example["id"][0], example["split"][0]))
        assert_that(ids, equal_to([(i, b"train") for i in range(20)]))


def test_reads_payloads_by_glob_with_compression_from_the_suffix(written):
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        payloads = pipeline | ReadTFRecordFiles(str(written("gzip") / "*.tfrecord.gz"))
        assert_that(payloads | beam.combiners.Count.Globally(), equal_to([40]))


def test_only_what_the_manifest_lists_is_read(written, tmp_path):
    output = shutil.copytree(written("none"), tmp_path / "out")
    stray = output / "train-00099-of-00100.tfrecord"  # e.g. left by another tool
    stray.write_bytes(next(output.glob("train-*.tfrecord")).read_bytes())
    assert str(stray) not in manifest_shard_paths(str(output))
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        payloads = pipeline | ReadTFRecordFiles.from_output(str(output))
        assert_that(payloads | beam.combiners.Count.Globally(), equal_to([40]))


def test_a_folder_without_manifest_is_not_output(tmp_path):
    with pytest.raises(FileNotFoundError, match="manifest"):
        ReadTFRecordFiles.from_output(str(tmp_path))


def test_corrupt_file_fails_the_read_naming_it(written, tmp_path):
    output = shutil.copytree(written("none"), tmp_path / "out")
    shard = sorted(output.glob("test-*.tfrecord"))[0]
    data = bytearray(shard.read_bytes())
    data[20] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(Exception, match=shard.name):
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = pipeline | ReadTFRecordFiles(str(shard))
