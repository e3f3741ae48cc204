"""Helpers shared by tests in several folders."""

from __future__ import annotations


def in_memory_args() -> list[str]:
    """Beam flags for fast in-process test runs of the CLI."""
    return ["--direct_running_mode=in_memory", "--direct_num_workers=1", "--quiet"]


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def batch_tuples(batches) -> list[tuple]:
    """RecordBatches as comparable tuples: key, split, records, dead letters, input count."""
    return [(b.key, b.split, list(b.records), list(b.dead_letters), b.input_count) for b in batches]
