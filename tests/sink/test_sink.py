"""The sharded sink: sharding bounds, atomic commit, retries, accounting, TF interop."""

from __future__ import annotations

import dataclasses
import json
import os

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from tests.format.reference_codec import encode_example
from transforms.commit import AccountingError, ErrorRateExceededError, finalize_output
from transforms.format.compression import Compression
from transforms.format.example_codec import decode_example
from transforms.records import RecordBatch, batch_key, dead_letter
from transforms.shard_writers import DEFAULT_MAX_SHARD_BYTES, ShardingConfig, SinkConfig, write_unit
from transforms.sink import WriteToShardedTFRecord
from transforms.tfrecord_io import read_tfrecord_file


def _example(i: int) -> bytes:
    return encode_example({
        "id": ("int64", [i]),
        "score": ("float", [i / 4]),
        "name": ("bytes", [f"row-{i}".encode()]),
        "blob": ("bytes", [bytes([i % 251]) * (i % 97)]),
    })


def _batches(num_batches=6, per_batch=50, splits=("train", "test"), dead_every=0):
    """Batches as a converter would emit them: per chunk and split."""
    batches, i = [], 0
    for chunk in range(num_batches):
        for split in splits:
            records, dead = [], []
            for _ in range(per_batch):
                if dead_every and i % dead_every == 0:
                    dead.append(dead_letter(source="in.csv", reason="invalid_int", message="bad",
                                            split=split, row=i, column="id", raw=f"x{i}"))
                else:
                    records.append(_example(i))
                i += 1
            batches.append(RecordBatch(batch_key(0, chunk), split, records, dead, per_batch))
    return batches


def _run(batches, output, **sink_kwargs):
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = (
            pipeline
            | "Batches" >> beam.Create(batches)
            | "Write" >> WriteToShardedTFRecord(str(output), **sink_kwargs)
        )
    with open(os.path.join(output, "manifest.json")) as handle:
        return json.load(handle)


def _ids(path) -> list[int]:
    return [decode_example(p)["id"][1][0] for p in read_tfrecord_file(str(path))]


def test_byte_cap_bounds_every_shard_and_keeps_every_record(tmp_path):
    batches = _batches(num_batches=8, per_batch=100)
    cap = 4000
    manifest = _run(batches, tmp_path, max_shard_bytes=cap)
    largest_record = max(len(r) + 16 for b in batches for r in b.records)
    seen = []
    for shard in manifest["shards"]:
        path = tmp_path / shard["path"]
        framed = sum(len(p) + 16 for p in read_tfrecord_file(str(path)))
        assert framed <= cap + largest_record
        assert shard["bytes"] == path.stat().st_size
        seen += _ids(path)
    expected = sorted(decode_example(r)["id"][1][0] for b in batches for r in b.records)
    assert sorted(seen) == expected
    assert len(manifest["shards"]) > 2 * 2  # the cap really split the output
    assert manifest["counts"]["written"] == len(expected) == 1600


def test_record_larger_than_cap_gets_its_own_shard(tmp_path):
    big = encode_example({"blob": ("bytes", [b"x" * 5000])})
    small = [encode_example({"id": ("int64", [i])}) for i in range(3)]
    batch = RecordBatch(batch_key(0, 0), "data", [small[0], big, small[1], small[2]], (), 4)
    manifest = _run([batch], tmp_path, max_shard_bytes=100)
    records_per_shard = [shard["records"] for shard in manifest["shards"]]
    assert sum(records_per_shard) == 4
    big_shards = [s for s in manifest["shards"] if s["bytes"] > 5000]
    assert len(big_shards) == 1 and big_shards[0]["records"] == 1


def test_max_shard_records(tmp_path):
    manifest = _run(_batches(num_batches=3, per_batch=10, splits=("data",)), tmp_path,
                    max_shard_records=7)
    assert all(shard["records"] <= 7 for shard in manifest["shards"])
    assert sum(shard["records"] for shard in manifest["shards"]) == 30


def test_fixed_shard_count_is_exact_and_deterministic(tmp_path):
    batches = _batches(num_batches=5, per_batch=40)
    first = _run(batches, tmp_path / "a", num_shards=3)
    second = _run(list(reversed(batches)), tmp_path / "b", num_shards=3)
    names = sorted(shard["path"] for shard in first["shards"])
    assert names == [f"{split}-{i:05d}-of-00003.tfrecord" for split in ("test", "train") for i in range(3)]
    for shard in first["shards"]:
        assert (tmp_path / "a" / shard["path"]).read_bytes() == (tmp_path / "b" / shard["path"]).read_bytes()
    assert [s["sha256"] for s in first["shards"]] == [s["sha256"] for s in second["shards"]]


def test_fixed_shard_count_is_exact_for_a_split_with_fewer_records(tmp_path):
    """--num-shards N is N shards per split, empty ones included, as Beam's sinks write them
    (a split of 2 records got 2 shards; a split without records, one)."""
    train = [RecordBatch(batch_key(0, 0), "train", [_example(1), _example(2)], (), 2)]
    manifest = _run(train, tmp_path, splits=("train", "test"), num_shards=5)
    by_split = {split: sorted(s["path"] for s in manifest["shards"] if s["split"] == split)
                for split in ("train", "test")}
    assert by_split == {split: [f"{split}-{i:05d}-of-00005.tfrecord" for i in range(5)]
                        for split in ("train", "test")}
    assert sorted(_ids(tmp_path / path) for path in by_split["train"]) == [[], [], [], [1], [2]]
    skipped = _run(train, tmp_path / "skip", splits=("train", "test"), num_shards=5, skip_if_empty=True)
    assert sorted(s["path"] for s in skipped["shards"]) == by_split["train"]


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_tensorflow_reads_every_shard(tmp_path, tf, compression):
    batches = _batches(num_batches=3, per_batch=30)
    manifest = _run(batches, tmp_path, compression=compression, max_shard_bytes=3000)
    suffix = {"none": ".tfrecord", "gzip": ".tfrecord.gz", "zlib": ".tfrecord.zz"}[compression]
    spec = {
        "id": tf.io.FixedLenFeature([], tf.int64),
        "score": tf.io.FixedLenFeature([], tf.float32),
        "name": tf.io.FixedLenFeature([], tf.string),
    }
    assert len(manifest["shards"]) > 2 and all(s["path"].endswith(suffix) for s in manifest["shards"])
    # Every shard in one dataset, parsed in one batch (one eager step rather than one per shard).
    dataset = tf.data.TFRecordDataset([str(tmp_path / shard["path"]) for shard in manifest["shards"]],
                                      compression_type={"none": ""}.get(compression, compression.upper()))
    parsed = tf.io.parse_example(next(iter(dataset.batch(1 << 20))), spec)
    got = {int(i): (float(score), name.decode())
           for i, score, name in zip(parsed["id"].numpy(), parsed["score"].numpy(),
                                     parsed["name"].numpy(), strict=True)}
    expected = {}
    for batch in batches:
        for record in batch.records:
            values = decode_example(record)
            expected[values["id"][1][0]] = (values["score"][1][0], values["name"][1][0].decode())
    assert got == expected


def test_dead_letters_are_committed_and_counts_reconcile(tmp_path):
    manifest = _run(_batches(num_batches=4, per_batch=25, dead_every=7), tmp_path)
    counts = manifest["counts"]
    assert counts["input"] == 200
    assert counts["dead_letter"] == len(range(0, 200, 7))
    assert counts["input"] == counts["written"] + counts["dead_letter"]
    for split in ("train", "test"):
        entry = counts["splits"][split]
        assert entry["input"] == entry["written"] + entry["dead_letter"] == 100
    lines = []
    for entry in manifest["dead_letter_files"]:
        lines += (tmp_path / entry["path"]).read_text().splitlines()
    docs = [json.loads(line) for line in lines]
    assert sorted(doc["row"] for doc in docs) == list(range(0, 200, 7))
    assert {doc["reason"] for doc in docs} == {"invalid_int"}


def test_empty_input_still_commits_a_manifest_with_empty_declared_splits(tmp_path, tf):
    manifest = _run([], tmp_path, splits=("train", "test"), compression="gzip")
    assert manifest["counts"]["input"] == 0
    assert sorted(s["path"] for s in manifest["shards"]) == [
        "test-00000-of-00001.tfrecord.gz", "train-00000-of-00001.tfrecord.gz"]
    for shard in manifest["shards"]:
        assert shard["records"] == 0
        assert list(tf.data.TFRecordDataset(str(tmp_path / shard["path"]), "GZIP")) == []


def test_skip_if_empty_writes_no_empty_shard(tmp_path):
    manifest = _run([], tmp_path, splits=("train",), skip_if_empty=True)
    assert manifest["shards"] == []


def test_extra_files_and_metadata_are_written_before_the_manifest(tmp_path):
    manifest = _run(_batches(num_batches=1, per_batch=3), tmp_path,
                    extra_files={"spec.yaml": b"features: []\n"},
                    manifest_metadata={"options": {"format": "csv"}, "fingerprint": "abc"})
    assert (tmp_path / "spec.yaml").read_bytes() == b"features: []\n"
    assert manifest["files"]["spec.yaml"]["bytes"] == 13
    assert manifest["options"] == {"format": "csv"}
    assert manifest["fingerprint"] == "abc"
    for key in ("shards", "counts", "compression", "created_at", "tool_version"):
        assert key in manifest
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


class _FailingConverter(beam.DoFn):
    def process(self, batch):
        if batch.key.endswith("3"):
            raise RuntimeError("converter exploded")
        yield batch


def test_failed_job_leaves_no_file_under_a_final_name(tmp_path):
    with pytest.raises(Exception, match="converter exploded"):
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = (
                pipeline
                | beam.Create(_batches(num_batches=5, per_batch=10))
                | beam.ParDo(_FailingConverter())
                | WriteToShardedTFRecord(str(tmp_path), max_shard_bytes=500)
            )
    visible = [p for p in os.listdir(tmp_path) if not p.startswith(".tmp-")]
    assert visible == []


# --- Direct tests of the write and finalize steps (retries) -----------------------------


def test_retried_unit_and_retried_finalize_neither_lose_nor_duplicate(tmp_path):
    config = SinkConfig(output_dir=str(tmp_path), compression=Compression.GZIP,
                        sharding=ShardingConfig(max_shard_bytes=2000), run_id="retry")
    batches = _batches(num_batches=4, per_batch=20)
    # A first attempt of the unit "fails" after writing: the runner discards its result.
    write_unit(config, batches)
    # The retry's result is the one the runner passes on.
    results = [write_unit(config, batches)]
    # A retried finalize (the first succeeded, its acknowledgement was lost) is a no-op.
    first = finalize_output(config, results)
    listing = sorted(os.listdir(tmp_path))
    manifest_before = (tmp_path / "manifest.json").read_bytes()
    second = finalize_output(config, results)
    assert first == second
    assert sorted(os.listdir(tmp_path)) == listing
    assert (tmp_path / "manifest.json").read_bytes() == manifest_before
    manifest = json.loads(manifest_before)
    ids = [i for shard in manifest["shards"] for i in _ids(tmp_path / shard["path"])]
    assert sorted(ids) == sorted(decode_example(r)["id"][1][0] for b in batches for r in b.records)
    assert len(ids) == len(set(ids))  # the discarded first attempt left no duplicate
    assert not [p for p in listing if p.startswith(".tmp-")]


def test_finalize_interrupted_after_some_renames_completes_on_retry(tmp_path):
    config = SinkConfig(output_dir=str(tmp_path), sharding=ShardingConfig(max_shard_bytes=1500),
                        run_id="crash")
    batches = _batches(num_batches=3, per_batch=20, splits=("data",))
    results = [write_unit(config, batches)]
    files = sorted(results[0].files, key=lambda file: file.first_key)
    assert len(files) > 3
    # The third shard's temporary file is out of reach: the commit stops after two renames.
    third = files[2].temp_path
    os.rename(third, third + ".away")
    with pytest.raises(AccountingError, match="vanished"):
        finalize_output(config, results)
    assert not (tmp_path / "manifest.json").exists()  # nothing is committed yet
    assert (tmp_path / f"data-00001-of-{len(files):05d}.tfrecord").exists()
    os.rename(third + ".away", third)
    finalize_output(config, results)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    ids = [i for shard in manifest["shards"] for i in _ids(tmp_path / shard["path"])]
    assert sorted(ids) == sorted(decode_example(r)["id"][1][0] for b in batches for r in b.records)
    on_disk = sorted(p for p in os.listdir(tmp_path) if p.endswith(".tfrecord"))
    assert on_disk == sorted(shard["path"] for shard in manifest["shards"])


def test_finalize_detects_records_missing_from_files(tmp_path):
    config = SinkConfig(output_dir=str(tmp_path), run_id="acct")
    batches = _batches(num_batches=2, per_batch=5, splits=("data",))
    written = write_unit(config, batches[:1])  # the second batch never got written
    counted = write_unit(config, batches)
    forged = dataclasses.replace(written, splits=counted.splits)
    with pytest.raises(AccountingError, match="found in the written files"):
        finalize_output(config, [forged])
    assert not (tmp_path / "manifest.json").exists()


def test_a_unit_delivered_twice_is_committed_once_and_a_differing_twin_refused(tmp_path):
    """Two attempts of one unit that both reach the commit (Beam's DaskRunner on threads
    delivers some): the same records, so one is kept; different ones are an accounting error."""
    config = SinkConfig(output_dir=str(tmp_path / "same"), run_id="dup")
    batches = _batches(num_batches=1, per_batch=5, splits=("data",))
    finalize_output(config, [write_unit(config, batches), write_unit(config, batches)])
    manifest = json.loads((tmp_path / "same" / "manifest.json").read_text())
    assert manifest["counts"]["written"] == 5
    ids = [i for shard in manifest["shards"] for i in _ids(tmp_path / "same" / shard["path"])]
    assert sorted(ids) == sorted(decode_example(r)["id"][1][0] for b in batches for r in b.records)
    config = SinkConfig(output_dir=str(tmp_path / "other"), run_id="dup")
    first = write_unit(config, batches)
    fewer = write_unit(config, [dataclasses.replace(batches[0], records=batches[0].records[:4],
                                                    input_count=4)])
    with pytest.raises(AccountingError, match="twice, with different contents"):
        finalize_output(config, [first, fewer])


def test_error_rate_exceeded_commits_dead_letters_only(tmp_path):
    with pytest.raises(Exception, match="ErrorRateExceeded|max-error-rate"):
        _run(_batches(num_batches=2, per_batch=10, dead_every=2), tmp_path, max_error_rate=0.1)
    assert not (tmp_path / "manifest.json").exists()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tfrecord")]
    dead = sorted(os.listdir(tmp_path / "dead_letter"))
    assert "failed_run.json" in dead
    dead.remove("failed_run.json")
    assert dead and all(name.endswith(".jsonl") for name in dead)
    record = json.loads((tmp_path / "dead_letter" / "failed_run.json").read_text())
    assert record["outcome"] == "max_error_rate_exceeded"
    assert record["files"] == [f"dead_letter/{name}" for name in dead]
    assert record["counts"]["dead_letter"] == 20 and record["counts"]["input"] == 40
    assert ErrorRateExceededError.__name__ == "ErrorRateExceededError"


def test_a_rerun_replaces_stale_shards_of_an_earlier_run(tmp_path):
    _run(_batches(num_batches=4, per_batch=20), tmp_path, max_shard_bytes=1000)
    manifest = _run(_batches(num_batches=1, per_batch=5), tmp_path)
    on_disk = sorted(p for p in os.listdir(tmp_path) if ".tfrecord" in p)
    assert on_disk == sorted(shard["path"] for shard in manifest["shards"])


def test_config_validation():
    with pytest.raises(ValueError, match="num_shards"):
        ShardingConfig(num_shards=0)
    with pytest.raises(ValueError, match="cannot be combined"):
        ShardingConfig(num_shards=2, max_shard_records=10)
    assert ShardingConfig().byte_cap == DEFAULT_MAX_SHARD_BYTES
    assert ShardingConfig(num_shards=3).byte_cap is None
    with pytest.raises(ValueError, match="max_error_rate"):
        SinkConfig(output_dir="/x", max_error_rate=2)
    with pytest.raises(ValueError, match="relative"):
        SinkConfig(output_dir="/x", extra_files=(("../evil", b""),))
    with pytest.raises(ValueError, match="TensorFlow|bzip2|none"):
        WriteToShardedTFRecord("/x", compression="bzip2")
