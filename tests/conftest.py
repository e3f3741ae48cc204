"""Shared test fixtures and helpers."""

from __future__ import annotations

import os

import pytest

from tests.helpers import free_port

# TensorFlow logs a lot at import; tests only care about errors.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported once per session (it is slow to import)."""
    import tensorflow

    return tensorflow


@pytest.fixture
def gcs_emulator(monkeypatch):
    """A GCS emulator on 127.0.0.1 with bucket `test-bucket`; Beam reaches it anonymously.

    Yields the bucket URI prefix, e.g. "gs://test-bucket".
    """
    from gcp_storage_emulator.server import create_server

    from transforms.gcs import use_anonymous_credentials_for_emulator

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="test-bucket")
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    assert use_anonymous_credentials_for_emulator()
    try:
        yield "gs://test-bucket"
    finally:
        server.stop()
