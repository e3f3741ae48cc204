"""Once-per-process set-up of a Beam worker before it converts or writes: `prepare_worker`.

Every DoFn of ours calls it from `setup()`, whichever runner started the process. It has
nothing to set up today: GCS access (credentials, the emulator) is google-auth's and
google-cloud-storage's own configuration, read from the environment the process inherits.
"""

from __future__ import annotations

__all__ = ["prepare_worker"]


def prepare_worker() -> None:
    """Applies the process-wide settings of a worker; cheap to call again."""
