"""`python -m pipeline ...`: the `tfrecord-pipeline` command (also its console-script entry point).

Beam installed without its gcp extra (our default install) calls `logging.warning(
"apitools not found, and bigquery client libraries are not available...")` on import: a
warning about BigQuery, which this tool never uses, that would also configure the root
logger before the CLI does. While the CLI imports, a handler of our own drops that one
message and prints any other warning as Python's last-resort handler would.
"""

import logging
import sys

_SPURIOUS_BEAM_WARNING = "apitools not found, and bigquery client libraries are not available"


def _not_spurious(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_SPURIOUS_BEAM_WARNING)


_import_handler = logging.StreamHandler(sys.stderr)
_import_handler.setLevel(logging.WARNING)
_import_handler.addFilter(_not_spurious)
logging.getLogger().addHandler(_import_handler)
try:
    from pipeline.cli import main
finally:
    logging.getLogger().removeHandler(_import_handler)

if __name__ == "__main__":
    main()
