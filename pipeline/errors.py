"""The typed outcomes a command can fail with; `pipeline.cli` maps each to an exit code.

Commands raise these (or let a `ValueError`/`FileNotFoundError` of the input through, which
the CLI treats as a usage error) instead of printing and choosing codes themselves, so every
failure is reported by one line in one place.
"""

from __future__ import annotations

__all__ = ["CommandError", "CommandFailed", "DriftDetected", "ErrorRateExceeded", "NothingConverted",
           "OutputProblems", "Terminated", "UsageError"]


class CommandError(Exception):
    """Base of the outcomes below: the message is the one line the user sees."""


class UsageError(CommandError, ValueError):
    """The command line or its inputs are wrong; `hint`: an optional second line telling the
    user what to do instead."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class CommandFailed(CommandError):
    """The command ran and failed (a conversion job that failed commits nothing)."""


class ErrorRateExceeded(CommandError):
    """More input records were dead-lettered than --max-error-rate allows."""


class DriftDetected(CommandError):
    """--fail-on-drift: the statistics drifted from the compared run's; only dead letters
    were committed."""


class NothingConverted(CommandError):
    """The input had records but the run converted none; only dead letters were committed."""


class OutputProblems(CommandError):
    """`verify` found problems in the files it checked."""


class Terminated(BaseException):
    """SIGTERM arrived: stop like an interrupt (a BaseException, so no `except Exception`
    in the run swallows it)."""
