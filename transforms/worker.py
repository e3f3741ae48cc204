"""Once-per-process set-up of a Beam worker before it converts or writes: `prepare_worker`.

Every DoFn of ours calls it from `setup()`, so the process-wide settings are applied in one
place, whichever runner started the process: the allocator thresholds
(`transforms.allocator`). GCS access (credentials, an emulator) is google-auth's and
google-cloud-storage's own configuration, read from the environment the process inherits.
"""

from __future__ import annotations

from transforms.allocator import retain_freed_memory

__all__ = ["prepare_worker"]


def prepare_worker() -> None:
    """Applies the process-wide settings of a worker; cheap to call again."""
    retain_freed_memory()
