"""Rows grouped by key into tf.train.SequenceExamples: reading (`rows`), assembling one
group (`assemble`) and the Beam transform (`transform`)."""
