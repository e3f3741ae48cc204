"""Tests of the run statistics (stats.json), the summary table and drift (drift.json, exit 6)."""
