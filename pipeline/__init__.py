"""Options, conversion spec, pipeline graph and command line of tfrecord-pipeline."""

from pipeline import _exit

# First atexit handler registered, so the last to run (see pipeline/_exit.py).
_exit.register()
