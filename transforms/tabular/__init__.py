"""Tabular sources (CSV/TSV, JSON Lines, Parquet) to batches of tf.train.Example.

`spec` (the conversion spec), `values` (the value rules, row by row), `columns` (the same
rules on whole Arrow columns), `read` (planning and reading), `infer` (spec inference and
the --dry-run estimate), `convert` (a chunk to RecordBatches) and `transform` (the Beam
DoFn `ConvertTabular` and its `TabularConfig`).
"""
