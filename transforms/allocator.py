"""Keep freed heap memory for reuse instead of handing it back to the OS (glibc only).

Converting a chunk allocates and frees a few dozen numpy temporaries of a few MB each.
With glibc's defaults, blocks that size are fresh `mmap`s (or the heap is trimmed when
they are freed), so every chunk pays again for the kernel to zero-fill the pages it
touches: measured at 0.4-1.0 s of system time per benchmark run (2M CSV rows, or 4,000
images), a tenth to a quarter of the whole run. Serving blocks up to `MMAP_THRESHOLD`
from the heap and trimming it only above `TRIM_THRESHOLD` lets the next chunk reuse the
same pages. Memory stays bounded: what is kept is what the largest chunk needed.

Measured (issue 33, removal tried): converting 3M rows of the benchmarks' TF tutorial CSV
without these settings took a median 7.5 % longer, pair by pair (slower in 17 of 24 runs
alternating with and without, on a shared 2-core VM at load 4-16), for the same CPU time
(+1 %) and peak memory; 3,000 images took 4 % less. Kept for the CSV figure; a quiet
machine at 50M rows should decide whether it stays.

The setting is process-wide; the converters and the sink apply it in their `setup()`.
The launcher does the opposite after a phase whose memory it will not need again (the scan
of large text files, `release_freed_memory`): forked converters would otherwise each carry
those pages as their own resident memory. Elsewhere (macOS, musl) both are no-ops.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "release_freed_memory", "retain_freed_memory"]

MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its dynamic threshold
TRIM_THRESHOLD = 128 << 20
_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3

_applied = False


def retain_freed_memory() -> bool:
    """Applies the thresholds above once per process; True if they are in effect."""
    global _applied
    if _applied or not sys.platform.startswith("linux"):
        return _applied
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success (glibc); musl's stub returns 0 and changes nothing.
    _applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _applied


def release_freed_memory() -> bool:
    """Hands the heap's free memory back to the OS (glibc's `malloc_trim`); True if any was."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes = (ctypes.c_size_t,)
    malloc_trim.restype = ctypes.c_int
    return bool(malloc_trim(0))
