"""`python -m pipeline ...`: the `tfrecord-pipeline` command (also its console-script entry point).

Beam is imported first, without its import-time warnings about its optional extras
(`pipeline.quiet_logs`).
"""

from pipeline.quiet_logs import import_beam_quietly

import_beam_quietly()
from pipeline.cli import main  # noqa: E402 - after Beam's quiet import

if __name__ == "__main__":
    main()
