"""Rows grouped by key into tf.train.SequenceExamples: reading into buckets of groups (`rows`),
assembling a bucket within the memory cap (`buckets`), ordering and encoding held groups
(`assemble`), the Beam transform (`transform`) and the --dry-run estimate (`estimate`)."""
