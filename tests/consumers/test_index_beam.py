"""Reading our output anywhere, with no glue: `.tfindex` sidecars byte-identical to the
`tfrecord` package's `tfrecord2idx` and usable by its sharded reader, `convert --index`,
the `index` command, and interop with Apache Beam's own TFRecord source and sink."""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil

import apache_beam as beam
import pytest
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.tfrecordio import ReadFromTFRecord, WriteToTFRecord
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

import pipeline
from pipeline.cli import EXIT_CORRUPT, EXIT_OK, EXIT_USAGE, run
from tests.format.reference_codec import encode_example
from tests.helpers import ModuleServer, in_memory_args
from transforms.records import RecordBatch, batch_key
from transforms.sink import WriteToShardedTFRecord
from transforms.tfrecord_io import read_tfrecord_file

SAMPLE = pathlib.Path(pipeline.__file__).parent / "sample_data" / "tabular"
RECORDS_PER_SHARD = 40


def _convert(output, *extra: str) -> list[str]:
    return ["convert", "--input", str(SAMPLE / "*.csv"), "--format", "csv",
            "--spec", str(SAMPLE / "customers.spec.yaml"), "--output", str(output),
            f"--max-shard-records={RECORDS_PER_SHARD}", *in_memory_args(), *extra]


def _manifest(output) -> dict:
    return json.loads((pathlib.Path(output) / "manifest.json").read_text())


class TfrecordPackage:
    """The `tfrecord` package, in one child Python kept for the module
    (`tests.consumers.tfrecord_package_calls` says why)."""

    def __init__(self):
        self._child = ModuleServer("tests.consumers.tfrecord_package_calls",
                                   prelude="sys.modules['torch'] = None")

    def reference_indexes(self, shards, tmp_path) -> list[bytes]:
        """What the `tfrecord` package's tfrecord2idx writes for each of `shards`."""
        references = [tmp_path / f"reference-{i}.idx" for i in range(len(shards))]
        self._child("index", [(str(shard), str(ref)) for shard, ref in zip(shards, references, strict=True)])
        return [reference.read_bytes() for reference in references]

    def reference_index(self, shard, tmp_path) -> bytes:
        return self.reference_indexes([shard], tmp_path)[0]

    def read_sharded(self, *paths_and_indexes) -> list[list[list[bytes]]]:
        """For each (path, index) pair, the records its reader gives each of 3 workers."""
        args = [str(arg) for arg in paths_and_indexes]
        return self._child("read_sharded", list(zip(args[::2], args[1::2], strict=True)))

    def close(self) -> None:
        self._child.close()


@pytest.fixture(scope="module")
def tfrecord_package():
    package = TfrecordPackage()
    yield package
    package.close()


@pytest.fixture(scope="module")
def indexed_output(tmp_path_factory):
    """A committed output of the sample data converted with --index (read-only: copy it
    before changing anything)."""
    output = tmp_path_factory.mktemp("indexed") / "out"
    assert run(_convert(output, "--index")) == EXIT_OK
    return output


@pytest.fixture
def indexed_copy(indexed_output, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(indexed_output, copy)
    return copy


def _examples(count: int) -> list[bytes]:
    return [encode_example({"id": ("int64", [i]), "text": ("bytes", [b"r" * (i % 50)])})
            for i in range(count)]


# ------------------------------------------------------------------------- convert --index


def test_convert_index_writes_a_listed_sidecar_per_shard_identical_to_tfrecord2idx(
        indexed_output, tmp_path, capsys, tfrecord_package):
    manifest = _manifest(indexed_output)
    assert manifest["options"]["index"] is True
    assert len(manifest["shards"]) > 3
    references = tfrecord_package.reference_indexes(
        [indexed_output / shard["path"] for shard in manifest["shards"]], tmp_path)
    for shard, expected in zip(manifest["shards"], references, strict=True):
        index = shard["index"]
        assert index["path"] == shard["path"] + ".tfindex"
        sidecar = indexed_output / index["path"]
        assert sidecar.stat().st_size == index["bytes"]
        assert sidecar.read_bytes() == expected
        assert len(expected.splitlines()) == shard["records"]
    # Nothing left behind but what the manifest lists, and verify accepts it.
    assert not list(indexed_output.glob(".tmp-*"))
    capsys.readouterr()
    assert run(["verify", str(indexed_output)]) == EXIT_OK
    assert '"status": "ok"' in capsys.readouterr().out


def test_a_tampered_sidecar_fails_verify(indexed_copy, capsys):
    shard = _manifest(indexed_copy)["shards"][1]
    sidecar = indexed_copy / shard["index"]["path"]
    text = sidecar.read_bytes()
    sidecar.write_bytes(text.replace(b" ", b" 1", 1))  # one offset off, no other change
    capsys.readouterr()
    assert run(["verify", str(indexed_copy)]) == EXIT_CORRUPT
    out = capsys.readouterr().out
    assert str(sidecar) in out and "sha256" in out


def test_a_sidecar_the_manifest_agrees_with_must_still_match_the_records(indexed_copy, capsys):
    # Tampered consistently (manifest updated too): only the check against the records sees it.
    manifest = _manifest(indexed_copy)
    shard = manifest["shards"][0]
    sidecar = indexed_copy / shard["index"]["path"]
    lines = sidecar.read_bytes().splitlines(keepends=True)
    sidecar.write_bytes(b"".join(lines[1:]))  # the first record dropped from the index
    data = sidecar.read_bytes()
    shard["index"].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (indexed_copy / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert run(["verify", str(indexed_copy)]) == EXIT_CORRUPT
    out = capsys.readouterr().out
    assert f"{sidecar}: index does not match the records" in out


def test_a_missing_sidecar_fails_verify(indexed_copy, capsys):
    shard = _manifest(indexed_copy)["shards"][0]
    (indexed_copy / shard["index"]["path"]).unlink()
    assert run(["verify", str(indexed_copy)]) == EXIT_CORRUPT
    assert "index listed in the manifest but missing" in capsys.readouterr().out


@pytest.mark.parametrize("num_shards", [None, 2])
def test_the_sink_indexes_plain_payloads_fixed_shards_and_empty_splits(tmp_path, capsys, num_shards,
                                                                      tfrecord_package):
    # The Python API: payload lists (framed by the writer), both sharding modes, and an
    # empty shard for a declared split without records, whose index is empty.
    records = _examples(50)
    batch = RecordBatch(batch_key(0, 0), "train", records, (), len(records))
    output = tmp_path / "out"
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Create([batch]) | WriteToShardedTFRecord(
            str(output), splits=["train", "test"], num_shards=num_shards,
            max_shard_records=None if num_shards else 20, index=True)
    manifest = _manifest(output)
    by_split = {}
    for shard in manifest["shards"]:
        by_split.setdefault(shard["split"], []).append(shard)
    assert len(by_split["train"]) == (num_shards or 3)
    assert [shard["index"]["bytes"] for shard in by_split["test"]] == [0] * (num_shards or 1)
    references = tfrecord_package.reference_indexes(
        [output / shard["path"] for shard in manifest["shards"]], tmp_path)
    assert [(output / shard["index"]["path"]).read_bytes() for shard in manifest["shards"]] \
        == references
    assert run(["verify", str(output)]) == EXIT_OK, capsys.readouterr().out


def test_the_sink_refuses_an_index_of_compressed_shards():
    with pytest.raises(ValueError, match="not seekable"):
        WriteToShardedTFRecord("out", compression="gzip", index=True)


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_index_with_compression_is_refused_up_front_in_one_line(tmp_path, capsys, compression):
    output = tmp_path / "out"
    assert run(_convert(output, "--index", "--compression", compression)) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("tfrecord-pipeline convert: error: --index")
    assert "not seekable" in err[0] and compression in err[0]
    assert not output.exists()  # refused before anything was written


def test_tfrecord_package_reads_our_indexed_shards_split_three_ways_exactly_once(indexed_output,
                                                                              tfrecord_package):
    # Its reader needs 2+ index lines (np.loadtxt gives a 1-d array for one).
    shards = [shard for shard in _manifest(indexed_output)["shards"] if shard["records"] >= 3]
    assert shards
    args = [str(indexed_output / entry[key]["path"] if key else indexed_output / entry["path"])
            for entry in shards for key in (None, "index")]
    read = tfrecord_package.read_sharded(*args)
    for shard, parts in zip(shards, read, strict=True):
        assert all(parts), [len(part) for part in parts]  # every worker got some records
        expected = list(read_tfrecord_file(str(indexed_output / shard["path"])))
        assert [record for part in parts for record in part] == expected


# --------------------------------------------------------------------------- index command


def test_index_command_on_a_file_tensorflow_wrote(tf, tmp_path, capsys, tfrecord_package):
    path = tmp_path / "tf-written.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for example in _examples(257):
            writer.write(example)
    capsys.readouterr()
    assert run(["index", str(path)]) == EXIT_OK
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"wrote {path}.tfindex (257 records)"]
    assert (tmp_path / "tf-written.tfrecord.tfindex").read_bytes() \
        == tfrecord_package.reference_index(path, tmp_path)
    # verify now checks the sidecar beside the bare file, and catches a wrong one.
    assert run(["verify", str(path)]) == EXIT_OK
    sidecar = tmp_path / "tf-written.tfrecord.tfindex"
    sidecar.write_bytes(sidecar.read_bytes()[:-1] + b"9")
    assert run(["verify", str(path)]) == EXIT_CORRUPT


def test_index_command_adds_listed_sidecars_to_a_committed_output(tmp_path, capsys, tfrecord_package):
    output = tmp_path / "out"
    assert run(_convert(output)) == EXIT_OK
    assert all("index" not in shard for shard in _manifest(output)["shards"])
    capsys.readouterr()
    assert run(["index", str(output)]) == EXIT_OK
    manifest = _manifest(output)
    assert len(capsys.readouterr().out.strip().splitlines()) == len(manifest["shards"])
    references = tfrecord_package.reference_indexes(
        [output / shard["path"] for shard in manifest["shards"]], tmp_path)
    assert [(output / shard["index"]["path"]).read_bytes() for shard in manifest["shards"]] \
        == references
    assert run(["verify", str(output)]) == EXIT_OK
    # The same conversion again: the output is still this run's, nothing to redo or refuse.
    assert run(_convert(output)) == EXIT_OK


def test_index_command_refuses_compressed_files_in_one_line(tmp_path, capsys):
    output = tmp_path / "out"
    assert run(_convert(output, "--compression", "gzip")) == EXIT_OK
    capsys.readouterr()
    assert run(["index", str(output)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gzip-compressed" in err[0], err
    shard = output / _manifest(output)["shards"][0]["path"]
    assert run(["index", str(shard)]) == EXIT_USAGE
    assert "cannot be entered at an offset" in capsys.readouterr().err
    assert not list(output.glob("*.tfindex"))


def test_index_command_reports_a_corrupt_file_and_leaves_no_index(tmp_path, capsys):
    good, bad = tmp_path / "good.tfrecord", tmp_path / "bad.tfrecord"
    from transforms.format.tfrecord_format import frame_records

    good.write_bytes(frame_records(_examples(5)))
    data = bytearray(frame_records(_examples(5)))
    data[len(data) - 20] ^= 0xFF  # inside the last record: its length CRC survives...
    data = bytes(data[:-3])  # ...but it is cut short
    bad.write_bytes(data)
    capsys.readouterr()
    assert run(["index", str(tmp_path / "*.tfrecord")]) == EXIT_CORRUPT
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines() == [f"wrote {good}.tfindex (5 records)"]
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and "offset" in err[0], err
    assert not (tmp_path / "bad.tfrecord.tfindex").exists()
    assert not list(tmp_path.glob("*.partial"))


def test_index_command_refuses_a_file_with_a_bad_payload_crc(tmp_path, capsys):
    """The framing is intact (length CRCs, sizes): only the data CRC tells the payload is
    damaged, and a corrupt file gets no index."""
    from transforms.format.tfrecord_format import frame_records

    bad = tmp_path / "bad.tfrecord"
    data = bytearray(frame_records(_examples(5)))
    data[14] ^= 0xFF  # a payload byte of the first record
    bad.write_bytes(bytes(data))
    capsys.readouterr()
    assert run(["index", str(bad)]) == EXIT_CORRUPT
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and "data CRC mismatch" in err[0], err
    assert not (tmp_path / "bad.tfrecord.tfindex").exists()
    assert not list(tmp_path.glob("*.partial"))


# ------------------------------------------------------------------------------ Beam interop


def test_beam_reads_our_zlib_output_as_deflate(tmp_path):
    output = tmp_path / "out"
    assert run(_convert(output, "--compression", "zlib")) == EXIT_OK
    paths = [str(output / shard["path"]) for shard in _manifest(output)["shards"]]
    assert all(path.endswith(".tfrecord.zz") for path in paths)
    expected = [record for path in paths for record in read_tfrecord_file(path)]
    assert len(expected) > RECORDS_PER_SHARD
    with beam.Pipeline(runner=FnApiRunner()) as p:
        read = p | ReadFromTFRecord(str(output / "*.tfrecord.zz"),
                                    compression_type=CompressionTypes.DEFLATE)
        assert_that(read, equal_to(expected))


@pytest.mark.parametrize(("suffix", "compression"), [
    (".deflate", CompressionTypes.DEFLATE),
    ("", CompressionTypes.DEFLATE),
    ("", CompressionTypes.UNCOMPRESSED),
])
def test_our_verify_accepts_what_beams_sink_writes(tmp_path, capsys, suffix, compression):
    folder = tmp_path / "beam"
    examples = _examples(60)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (p | beam.Create(examples)
             | WriteToTFRecord(str(folder / "data"), file_name_suffix=suffix, num_shards=2,
                               compression_type=compression))
    shards = sorted(folder.iterdir())
    assert [shard.name for shard in shards] == [f"data-0000{i}-of-00002{suffix}" for i in range(2)]
    # Files beside them that are no TFRecords, which a folder must not stand for.
    (folder / "notes.txt").write_text("not a record\n")
    (folder / "stats-00000-of-00001.json").write_text("{}\n")
    (folder / "_SUCCESS").write_text("")
    for shard in shards:
        capsys.readouterr()
        assert run(["verify", str(shard)]) == EXIT_OK, capsys.readouterr().out
    capsys.readouterr()
    assert run(["verify", str(folder)]) == EXIT_OK, capsys.readouterr().out
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report == {"files_checked": 2, "problems": 0, "status": "ok"}
    assert run(["inspect", str(folder), "--limit", "2"]) == EXIT_OK  # reads them the same way
    read_back = [record for shard in shards
                 for record in read_tfrecord_file(str(shard), "zlib" if compression
                                                  == CompressionTypes.DEFLATE else "none")]
    assert sorted(read_back) == sorted(examples)


def test_index_command_on_beams_uncompressed_folder_then_verify(tmp_path, capsys, tfrecord_package):
    folder = tmp_path / "beam"
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Create(_examples(30)) | WriteToTFRecord(str(folder / "part"), num_shards=1)
    (folder / "notes.txt").write_text("not a record\n")
    capsys.readouterr()
    assert run(["index", str(folder)]) == EXIT_OK
    shard = folder / "part-00000-of-00001"
    assert capsys.readouterr().out.strip() == f"wrote {shard}.tfindex (30 records)"
    assert (folder / "part-00000-of-00001.tfindex").read_bytes() == tfrecord_package.reference_index(
        shard, tmp_path)
    # The folder now holds an index too; verify checks it and does not take it for a shard.
    assert run(["verify", str(folder)]) == EXIT_OK
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["files_checked"] == 1
