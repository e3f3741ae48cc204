"""Statistics of the converted records, computed in the conversion pass and merged in the commit:
`presence` (records carrying each feature, for feature_spec.json), `sketches` (mergeable
per-batch partial statistics), `columns` (from Arrow columns), `images` (from image records),
`dead_letters` (examples per reason), `document` (stats.json), `drift` (drift.json) and
`summary` (the CLI's feature table)."""
