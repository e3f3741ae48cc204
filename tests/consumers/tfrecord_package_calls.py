"""Calls of the `tfrecord` package, run in a child Python (`tests.helpers.ModuleServer`):
importing the package registers its own copy of TensorFlow's Example protos in protobuf's
default pool, which clashes with TensorFlow's in the test process ("duplicate symbol
'tensorflow.BytesList'"). The child makes torch unimportable, which the package's optional
`tfrecord.torch` handles as it does where torch is missing (importing torch costs ~1.2 s of
CPU, and neither tfrecord2idx nor the reader uses it)."""

from __future__ import annotations

from tfrecord.reader import tfrecord_iterator
from tfrecord.tools.tfrecord2idx import create_index


def index(pairs: list[tuple[str, str]]) -> None:
    """tfrecord2idx's index file for each (shard, index path)."""
    for shard, index_path in pairs:
        create_index(shard, index_path)


def read_sharded(pairs: list[tuple[str, str]]) -> list[list[list[bytes]]]:
    """For each (path, index), the records the package's reader gives each of 3 workers."""
    return [[[bytes(view) for view in tfrecord_iterator(path, index_path, shard=(i, 3))]
             for i in range(3)] for path, index_path in pairs]
