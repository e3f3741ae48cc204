"""The visual, self-contained `report.html` of a committed output: `collect` reads the manifest
and side files, `dead_letters` samples the dead-letter files, `thumbnails` draws a contact sheet
per label from the shards, `charts` draws inline SVG, `markup` holds the escaping and
formatting helpers, `render` writes the page (with `render_stats` for the feature and image
statistics, `render_drift` for the comparison with a previous run), `build` ties them together
and writes it."""
