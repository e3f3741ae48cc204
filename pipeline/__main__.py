"""`python -m pipeline ...`: the `tfrecord-pipeline` command (also its console-script entry point).

The command is imported without Beam's spurious BigQuery warning (`pipeline.quiet_logs`).
"""

from pipeline.quiet_logs import dropping_import_warnings

with dropping_import_warnings():
    from pipeline.cli import main

if __name__ == "__main__":
    main()
