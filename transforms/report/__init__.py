"""The visual, self-contained `report.html` of a committed output: `collect` reads what it
shows, the `render` modules write the page, `build` ties them together and writes it."""
