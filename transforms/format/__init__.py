"""Beam-free format code: TFRecord framing and compression (`tfrecord_format`), the per-record
Example codec (`example_codec`) and the vectorised batch encoder (`example_encoder`).

Nothing here imports Apache Beam or the rest of `transforms`; it builds on `protos` only.
"""
