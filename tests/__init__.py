"""The test suite, mirroring the source tree.

* `cli`: the command line's contract (flags, exit codes, output safety, re-runs).
* `format`: the record format against TensorFlow itself (protos, framing, codecs, indexes).
* `tabular`, `images`, `sequence`: each input kind, planning included (byte-range splits,
  images planned as data).
* `sink`, `workers`, `stats`, `report`: the sharded sink and commit, worker processes,
  statistics and drift, the HTML report (in a real browser).
* `consumers`: the output read by the real consumers (tf.data, the `tfrecord` package, TFDS,
  Grain, PyTorch, Beam).
* `e2e`: real runners and services (Dask, a Beam job service, a GCS emulator, all started on
  127.0.0.1 and stopped afterwards), deployment files, the benchmark smoke run and the
  README's commands (`test_readme.py`).
* `test_layout.py`: the package rules (one-way imports, docstrings, module size, the contributor
  map, packaging); `test_public_api.py`: the `tfrecord_pipeline` import place.
"""
