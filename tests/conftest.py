"""Shared test fixtures and helpers."""

from __future__ import annotations

import datetime
import json
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


#: Dask's periodic checks, relaxed for the session's cluster, which idles between the tests
#: that use it (~250 s): with the defaults (an event-loop tick every 20 ms, a profiler sample
#: every 10 ms, memory checks every 100 ms and system checks every 500 ms in each process) its
#: scheduler and two workers burnt ~0.09 CPU-seconds per second doing nothing, ~0.01 with
#: these (measured). Public settings of `distributed`; none changes where or how tasks run.
_IDLE_DASK_CONFIG = {
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.profile.enabled": False,
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
}


@pytest.fixture(scope="session")
def dask_address(tmp_path_factory):
    """The scheduler address of a Dask LocalCluster of two worker processes on 127.0.0.1,
    started once per session (per pytest-xdist worker), for the tests that run on Dask without
    testing the LocalCluster a `--runner dask` run starts for itself. Worker processes, as on
    any cluster: Beam 2.77's DaskRunner shares one output list per step between the tasks that
    a worker runs without unpickling them (threads in the launcher's own process), which the
    commit refuses as batches reaching it twice. The workers run in a folder of their own,
    empty (`Client.run(os.getcwd)` names it), not the launcher's, as on a real cluster."""
    import dask
    from dask.distributed import LocalCluster

    launcher_folder = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("dask-workers"))  # where the worker processes start
    try:
        with dask.config.set(_IDLE_DASK_CONFIG):  # the nannies pass it on to their workers
            cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                   host="127.0.0.1", dashboard_address=None,
                                   # no HTTP server (it warned when port 8787 was taken)
                                   scheduler_kwargs={"dashboard": False,
                                                     "dashboard_address": "127.0.0.1:0"})
    finally:
        os.chdir(launcher_folder)
    with cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="session")
def _gcs_server(tmp_path_factory):
    """The GCS emulator of this session (of each pytest-xdist worker) on 127.0.0.1, with
    bucket `test-bucket`, and the environment that points Google's libraries at it (see
    `gcs_emulator`). One server for the session: stopping one waits out its 0.5 s poll."""
    import google.oauth2.credentials
    from gcp_storage_emulator.server import create_server

    token = google.oauth2.credentials.Credentials(
        token="emulator", refresh_token="unused", client_id="emulator", client_secret="unused",
        expiry=datetime.datetime(2100, 1, 1))  # never refreshed: no request leaves the machine
    credentials = tmp_path_factory.mktemp("gcs") / "application_default_credentials.json"
    credentials.write_text(json.dumps({**json.loads(token.to_json()), "type": "authorized_user"}))
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="test-bucket")
    server.start()
    try:
        yield server, {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}",
                       "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
                       "GOOGLE_CLOUD_PROJECT": "emulated"}
    finally:
        server.stop()


@pytest.fixture
def gcs_emulator(_gcs_server, monkeypatch):
    """A GCS emulator on 127.0.0.1 with an empty bucket `test-bucket` (the session's server,
    wiped before the test), configured as users configure Google's libraries:
    `STORAGE_EMULATOR_HOST` (google-cloud-storage), and Application Default Credentials in a
    file (`GOOGLE_APPLICATION_CREDENTIALS`, google-auth) holding an access token the emulator
    accepts. Child processes (workers, CLI subprocesses) inherit both. Without credentials
    Beam would retry its lookup for ~20 s in every process.

    Yields the bucket URI prefix, e.g. "gs://test-bucket".
    """
    server, environment = _gcs_server
    server.wipe(keep_buckets=True)  # what an earlier test wrote is gone; the bucket stays
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return "gs://test-bucket"
