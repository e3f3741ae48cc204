"""Shared tabular test data and the README's TensorFlow snippet (used by several tests)."""

from __future__ import annotations

import collections

import numpy as np

from tests.format.reference_codec import encode_example
from transforms.tabular.spec import parse_spec


def f32(x: float) -> float:
    return float(np.float32(x))


def load_split(output_dir, split, compression_type="GZIP"):
    """The README's snippet, verbatim: feature_spec.json -> tf.io.parse_example."""
    import json

    import tensorflow as tf

    with tf.io.gfile.GFile(f"{output_dir}/feature_spec.json") as f:
        features = json.load(f)["features"]
    parse_spec = {
        name: tf.io.FixedLenFeature(f["shape"], tf.as_dtype(f["dtype"]), f["default"])
        if f["kind"] == "fixed" else tf.io.VarLenFeature(tf.as_dtype(f["dtype"]))
        for name, f in features.items()
    }
    files = sorted(tf.io.gfile.glob(f"{output_dir}/{split}-*-of-*.tfrecord*"))
    dataset = tf.data.TFRecordDataset(files, compression_type=compression_type)
    return dataset.batch(256).map(lambda records: tf.io.parse_example(records, parse_spec))


def rows_from_tf(batches) -> list[dict]:
    """Parsed TF batches -> one dict per Example: fixed -> scalar, var_len -> list."""
    import tensorflow as tf

    out = []
    for batch in batches:
        size = None
        columns = {}
        for name, value in batch.items():
            if isinstance(value, tf.sparse.SparseTensor):
                per_row = collections.defaultdict(list)
                for (row, _), v in zip(value.indices.numpy(), value.values.numpy(), strict=True):
                    per_row[int(row)].append(v)
                size = int(value.dense_shape[0])
                columns[name] = per_row
            else:
                columns[name] = value.numpy()
                size = len(columns[name])
        for i in range(size):
            out.append({name: (list(col.get(i, [])) if isinstance(col, dict) else col[i])
                        for name, col in columns.items()})
    return out


ISSUE_CSV = (
    b"id,name,score,count,tags\n"
    b'1,"Smith, John",1.5,10,a|b\n'          # quoted comma, list
    b'2,"multi\nline",0.1,0,\n'              # quoted newline, a 0, missing list
    b"3,,2.5,,x\n"                           # missing name and count
    b'4,"",0,7,""\n'                         # empty string, empty list
    b"5,caf\xe9,1.0,3,y\n"                    # not UTF-8
    b"6,ragged,1.0\n"                        # too few fields
    b"7,overflow,3.0,9223372036854775808,z\n"  # int64 overflow
    b'8,"say ""hi""",-0.0,-9223372036854775808,p|q|r\n'
)
ISSUE_SPEC_YAML = """\
features:
  - {name: id, type: int64, required: true}
  - {name: name, type: string}
  - {name: score, type: float}
  - {name: count, type: int64}
  - {name: tags, type: string, list: true, separator: "|"}
"""
ISSUE_SPEC = parse_spec(ISSUE_SPEC_YAML)
# The good rows as (kind, values) per present feature: the reference Examples.
ISSUE_GOOD = {
    1: {"id": [1], "name": [b"Smith, John"], "score": [1.5], "count": [10], "tags": [b"a", b"b"]},
    2: {"id": [2], "name": [b"multi\nline"], "score": [f32(0.1)], "count": [0]},
    3: {"id": [3], "score": [2.5], "tags": [b"x"]},
    4: {"id": [4], "name": [b""], "score": [0.0], "count": [7], "tags": []},
    8: {"id": [8], "name": [b'say "hi"'], "score": [-0.0], "count": [-(2**63)],
        "tags": [b"p", b"q", b"r"]},
}
_KINDS = {"id": "int64", "name": "bytes", "score": "float", "count": "int64", "tags": "bytes"}


def reference(row: dict) -> bytes:
    return encode_example({name: (_KINDS[name], values) for name, values in row.items()})
