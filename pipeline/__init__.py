"""The `tfrecord-pipeline` application: command line, options, planning, graph and runners.

Imports flow one way: `pipeline` uses `transforms` (Beam transforms and converters), which
use the Beam-free format code in `transforms.format` and the generated `protos`. Nothing
below `pipeline` imports it, so a Beam worker that unpickles a converter never imports the
command line.
"""
