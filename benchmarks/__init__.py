"""Benchmarks of tfrecord-pipeline (`python benchmarks/run_benchmarks.py`; see README.md here)."""
