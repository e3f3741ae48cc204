"""Tests against the real consumers of the output: TensorFlow, the tfrecord package, TFDS, Grain, Beam."""
