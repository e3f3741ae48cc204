"""`tf_dataset`: one split of a committed output as a `tf.data.Dataset`, reading exactly the
shards the manifest lists, parsed with `feature_spec.json` (dense or varlen by
`features.feature_layout`). A masked scalar is parsed as a ragged feature and turned into its
value (the fill where absent) and `<name>/present`, as the numpy readers give them.
TensorFlow is imported only when a function runs."""

from __future__ import annotations

from typing import Any

from transforms.format.compression import Compression
from transforms.reading.features import MASK_SUFFIX, FeatureLayout, record_layout
from transforms.reading.output import load_split
from transforms.reading.parts import select_part, whole_split

__all__ = ["TF_COMPRESSION", "tf_dataset", "tf_parse_spec"]

#: The `compression_type` of `tf.data.TFRecordDataset` for each compression.
TF_COMPRESSION = {Compression.NONE: "", Compression.GZIP: "GZIP", Compression.ZLIB: "ZLIB"}


def _tensorflow():
    try:
        import tensorflow
    except ImportError:
        raise ImportError("reading an output as a tf.data.Dataset needs TensorFlow: "
                          "pip install 'tfrecord-pipeline[tensorflow]'") from None
    return tensorflow


def _tf_feature(tf, layout: FeatureLayout, *, in_sequence: bool, ragged: bool):
    dtype = tf.as_dtype(layout.dtype)
    if layout.masked or (ragged and not layout.dense):  # masked: 0 or 1 values, see `_unmasked`
        return tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)
    if layout.dense and in_sequence:
        return tf.io.FixedLenSequenceFeature(layout.shape, dtype, allow_missing=True)
    if layout.dense:
        return tf.io.FixedLenFeature(layout.shape, dtype, layout.default)
    return tf.io.VarLenFeature(dtype)


def _unmasked(tf, layouts, parsed):
    """`parsed` with each masked scalar's 0-or-1 values (a 1-D tensor, or a batch's
    RaggedTensor) as its value, the fill where it has none, and its `<name>/present`."""
    out = dict(parsed)
    for name, layout in layouts.items():
        if not layout.masked:
            continue
        values = parsed[name]
        fill = tf.constant([layout.default], tf.as_dtype(layout.dtype))
        if isinstance(values, tf.RaggedTensor):
            out[name] = values.to_tensor(default_value=fill[0], shape=[None, 1])[:, 0]
            out[name + MASK_SUFFIX] = values.row_lengths() > 0
        else:
            out[name] = tf.concat([values, fill], 0)[0]
            out[name + MASK_SUFFIX] = tf.size(values) > 0
    return out


def tf_parse_spec(feature_spec: dict[str, Any], *, ragged: bool = False):
    """The `tf.io.parse_example` features of a parsed `feature_spec.json`; for
    SequenceExamples a (context, sequence) pair for `tf.io.parse_sequence_example`. Varlen
    features are `VarLenFeature`s, or with `ragged` `RaggedFeature`s; masked scalars are
    `RaggedFeature`s of 0 or 1 values (`tf_dataset` unmasks them)."""
    tf = _tensorflow()
    layout = record_layout(feature_spec)
    context = {name: _tf_feature(tf, f, in_sequence=False, ragged=ragged)
               for name, f in layout.features.items()}
    if layout.sequence is None:
        return context
    return context, {name: _tf_feature(tf, f, in_sequence=True, ragged=ragged)
                     for name, f in layout.sequence.items()}


def tf_dataset(output_dir: str, split: str, *, batch_size: int | None = None,
               shuffle_files: bool = False, seed: int | None = None,
               shard: tuple[int, int] = (0, 1), drop_remainder: bool = False,
               ragged: bool = False, num_parallel_reads: int | None = None):
    """The parsed records of `split` in the committed output at `output_dir`.

    Args:
      batch_size: None yields single records; else batches of that many records are
        parsed at once (`tf.io.parse_example`).
      shuffle_files: read the shard ranges in an order shuffled (by `seed`) every epoch.
      shard: `(index, count)`: only that part of the split (see `transforms.reading.parts`;
        a range starting inside a shard is reached by reading past the records before it).
      ragged: varlen features as `tf.RaggedTensor` instead of `tf.SparseTensor`.
      num_parallel_reads: ranges read at once (interleaved); None reads them in order.

    Returns a dataset of {feature: tensor} for Examples, of (context, feature lists) pairs
    for SequenceExamples (batched feature lists are padded to the longest sequence). Raises
    what `output.load_split` raises, and ValueError when the output has no feature spec.
    """
    tf = _tensorflow()
    output = load_split(output_dir, split)
    if output.feature_spec is None:
        raise ValueError(f"{output_dir} has no feature_spec.json: parse its records with your "
                         "own spec (tf.data.TFRecordDataset of the manifest's shards)")
    ranges = select_part(whole_split(output), shard)
    compression = TF_COMPRESSION[output.compression]
    pieces = tf.data.Dataset.from_tensor_slices((
        tf.constant([piece.shard.path for piece in ranges], tf.string),
        tf.constant([piece.start for piece in ranges], tf.int64),
        tf.constant([piece.records for piece in ranges], tf.int64)))
    if shuffle_files:
        pieces = pieces.shuffle(max(len(ranges), 1), seed=seed, reshuffle_each_iteration=True)
    parallel = {} if num_parallel_reads is None else {"num_parallel_calls": num_parallel_reads}
    records = pieces.interleave(
        lambda path, start, count: tf.data.TFRecordDataset(path, compression).skip(start).take(count),
        cycle_length=num_parallel_reads or 1, **parallel)
    spec = tf_parse_spec(output.feature_spec, ragged=ragged)
    layouts = record_layout(output.feature_spec).features
    single = batch_size is None

    def parse(serialized):
        if output.is_sequence:
            parse_sequences = tf.io.parse_single_sequence_example if single else tf.io.parse_sequence_example
            parsed = parse_sequences(serialized, context_features=spec[0], sequence_features=spec[1])
            return _unmasked(tf, layouts, parsed[0]), parsed[1]
        return _unmasked(tf, layouts, (tf.io.parse_single_example if single else tf.io.parse_example)(
            serialized, spec))

    if not single:
        records = records.batch(batch_size, drop_remainder=drop_remainder)
    return records.map(parse)
