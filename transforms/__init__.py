"""Beam transforms of tfrecord-pipeline (converters, the sharded sink, readers) and the
Beam-free format code they use (`transforms.format`)."""
