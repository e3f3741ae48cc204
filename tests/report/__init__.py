"""Tests of the HTML report (`transforms.report`, `tfrecord-pipeline report`): the renderer's
escaping and degraded modes, the report every conversion writes, and a headless Chromium that
loads the page from disk."""
