"""Our Example protos: generated code is current, and interoperates with TensorFlow's."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.example import example_pb2 as tf_example_pb2
from tensorflow.core.example import feature_pb2 as tf_feature_pb2

from protos import example_pb2, feature_pb2, regenerate

REPO_ROOT = Path(__file__).resolve().parents[2]

MESSAGES = [
    "BytesList",
    "FloatList",
    "Int64List",
    "Feature",
    "Features",
    "FeatureList",
    "FeatureLists",
    "Example",
    "SequenceExample",
]


def _ours(name):
    module = example_pb2 if "Example" in name else feature_pb2
    return getattr(module, name)


def _theirs(name):
    module = tf_example_pb2 if "Example" in name else tf_feature_pb2
    return getattr(module, name)


# ------------------------------------------------------------ generation is pinned


def test_checked_in_generated_code_is_current():
    result = subprocess.run(
        [sys.executable, "-m", "protos.regenerate", "--check"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout


def test_check_reports_stale_generated_code(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "repo"
    shutil.copytree(REPO_ROOT / "protos", copy / "protos")
    stale = copy / "protos" / "feature_pb2.py"
    stale.write_text(stale.read_text().replace("Protobuf Python Version", "Protobuf Version"))
    monkeypatch.setattr(regenerate, "REPO_ROOT", copy)

    assert regenerate.main(["--check"]) == 1
    out = capsys.readouterr()
    assert "-# Protobuf Version" in out.out and "+# Protobuf Python Version" in out.out
    assert "stale" in out.err

    # Regenerating in place fixes it.
    assert regenerate.main([]) == 0
    assert regenerate.check() == []


def test_generated_imports_are_package_relative_to_repo_root():
    source = (REPO_ROOT / "protos" / "example_pb2.py").read_text()
    assert "from protos import feature_pb2" in source
    assert str(REPO_ROOT) not in source


def test_refuses_other_grpcio_tools_version(monkeypatch, capsys):
    real_version = regenerate.importlib.metadata.version

    def fake_version(name):
        return "1.80.0" if name == "grpcio-tools" else real_version(name)

    monkeypatch.setattr(regenerate.importlib.metadata, "version", fake_version)
    with pytest.raises(regenerate.PinError, match=r"grpcio-tools 1\.80\.0 .*pinned.*1\.81\.1"):
        regenerate.check_pinned_protoc()
    assert regenerate.main(["--check"]) == 2
    assert "grpcio-tools==1.81.1" in capsys.readouterr().err


def test_refuses_missing_grpcio_tools(monkeypatch):
    def missing(name):
        raise regenerate.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(regenerate.importlib.metadata, "version", missing)
    with pytest.raises(regenerate.PinError, match="not installed"):
        regenerate.check_pinned_protoc()


# --------------------------------------------------------- same wire format as TF


def test_own_package_so_both_load_in_one_process():
    assert example_pb2.Example.DESCRIPTOR.full_name == "tfrecord_pipeline.Example"
    assert tf_example_pb2.Example.DESCRIPTOR.full_name == "tensorflow.Example"
    assert example_pb2.Example is not tf_example_pb2.Example


@pytest.mark.parametrize("name", MESSAGES)
def test_fields_match_tensorflow(name):
    ours, theirs = _ours(name).DESCRIPTOR, _theirs(name).DESCRIPTOR

    def shape(descriptor):
        fields = {}
        for f in descriptor.fields:
            target = f.message_type.name if f.message_type else None
            oneof = f.containing_oneof.name if f.containing_oneof else None
            repeated = f.label == f.LABEL_REPEATED
            fields[f.name] = (f.number, f.type, repeated, f.is_packed, target, oneof)
        return fields

    assert shape(ours) == shape(theirs)
    for nested_ours in ours.nested_types:  # map entries
        nested_theirs = theirs.nested_types_by_name[nested_ours.name]
        assert shape(nested_ours) == shape(nested_theirs)


def _our_example():
    ex = example_pb2.Example()
    fm = ex.features.feature
    fm["label"].int64_list.value.extend([-1, 0, 2**63 - 1, -(2**63)])
    fm["score"].float_list.value.extend([0.5, -0.0, math.inf, math.nan])
    fm["text"].bytes_list.value.extend(["héllo".encode(), b"\xff\x00", b""])
    fm["empty"].int64_list.SetInParent()
    fm["日本"].float_list.value.append(1.25)
    return ex


def test_build_with_ours_parse_with_tensorflow_and_back():
    ours = _our_example()
    payload = ours.SerializeToString(deterministic=True)

    theirs = tf.train.Example.FromString(payload)
    fm = theirs.features.feature
    assert list(fm["label"].int64_list.value) == [-1, 0, 2**63 - 1, -(2**63)]
    scores = list(fm["score"].float_list.value)
    assert scores[:3] == [0.5, 0.0, math.inf] and math.copysign(1, scores[1]) == -1
    assert math.isnan(scores[3])
    assert list(fm["text"].bytes_list.value) == ["héllo".encode(), b"\xff\x00", b""]
    assert fm["empty"].WhichOneof("kind") == "int64_list"
    assert list(fm["日本"].float_list.value) == [1.25]

    # Same bytes from both generated classes, and back into ours unchanged.
    assert theirs.SerializeToString(deterministic=True) == payload
    back = example_pb2.Example.FromString(theirs.SerializeToString())
    assert back.SerializeToString(deterministic=True) == payload


def test_sequence_example_round_trips_through_tensorflow():
    ours = example_pb2.SequenceExample()
    ours.context.feature["id"].bytes_list.value.append(b"seq-1")
    ours.context.feature["length"].int64_list.value.append(3)
    tokens = ours.feature_lists.feature_list["tokens"].feature
    for step in ([1, 2], [3], []):
        tokens.add().int64_list.value.extend(step)
    frames = ours.feature_lists.feature_list["frames"].feature
    for step in ([0.5, 1.5], [2.5, -1.0], [3.0, 4.0]):
        frames.add().float_list.value.extend(step)
    payload = ours.SerializeToString(deterministic=True)

    theirs = tf.train.SequenceExample.FromString(payload)
    assert list(theirs.context.feature["id"].bytes_list.value) == [b"seq-1"]
    steps = theirs.feature_lists.feature_list["tokens"].feature
    assert [list(f.int64_list.value) for f in steps] == [[1, 2], [3], []]
    assert theirs.SerializeToString(deterministic=True) == payload
    assert example_pb2.SequenceExample.FromString(theirs.SerializeToString()) == ours

    context, sequences = tf.io.parse_single_sequence_example(
        payload,
        context_features={
            "id": tf.io.FixedLenFeature([], tf.string),
            "length": tf.io.FixedLenFeature([], tf.int64),
        },
        sequence_features={
            "tokens": tf.io.RaggedFeature(tf.int64),
            "frames": tf.io.FixedLenSequenceFeature([2], tf.float32),
        },
    )
    assert context["id"].numpy() == b"seq-1" and context["length"].numpy() == 3
    assert sequences["tokens"].to_list() == [[1, 2], [3], []]
    np.testing.assert_array_equal(sequences["frames"].numpy(), [[0.5, 1.5], [2.5, -1.0], [3.0, 4.0]])


def test_build_with_tensorflow_parse_with_ours():
    theirs = tf.train.Example(
        features=tf.train.Features(
            feature={
                "a": tf.train.Feature(int64_list=tf.train.Int64List(value=[7, -7])),
                "b": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x"])),
                "c": tf.train.Feature(float_list=tf.train.FloatList(value=[0.25])),
            }
        )
    )
    ours = example_pb2.Example.FromString(theirs.SerializeToString())
    fm = ours.features.feature
    assert list(fm["a"].int64_list.value) == [7, -7]
    assert list(fm["b"].bytes_list.value) == [b"x"]
    assert list(fm["c"].float_list.value) == [0.25]


def test_tf_parse_example_reads_our_bytes():
    payloads = []
    for i, text in enumerate(["zero", "ünï", ""]):
        ex = example_pb2.Example()
        fm = ex.features.feature
        fm["id"].int64_list.value.append(-i)
        fm["vec"].float_list.value.extend([i, i + 0.5])
        fm["text"].bytes_list.value.append(text.encode())
        fm["tags"].int64_list.value.extend(range(i))
        payloads.append(ex.SerializeToString(deterministic=True))

    parsed = tf.io.parse_example(
        tf.constant(payloads),
        {
            "id": tf.io.FixedLenFeature([], tf.int64),
            "vec": tf.io.FixedLenFeature([2], tf.float32),
            "text": tf.io.FixedLenFeature([], tf.string),
            "tags": tf.io.RaggedFeature(tf.int64),
        },
    )
    assert parsed["id"].numpy().tolist() == [0, -1, -2]
    assert parsed["vec"].numpy().tolist() == [[0, 0.5], [1, 1.5], [2, 2.5]]
    assert [t.decode() for t in parsed["text"].numpy()] == ["zero", "ünï", ""]
    assert parsed["tags"].to_list() == [[], [0], [0, 1]]
