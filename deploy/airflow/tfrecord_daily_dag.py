"""Daily `tfrecord-pipeline convert` runs from Airflow (Apache Beam provider).

Two DAGs, both created paused; unpause the one that matches your infrastructure:

* ``tfrecord_daily_dataflow``: task ``convert_on_dataflow`` runs the pipeline on Dataflow
  (``runner="DataflowRunner"``); the workers use the Flex Template image, which has the
  package installed (``sdk_container_image``).
* ``tfrecord_daily_dask``: task ``convert_on_dask`` runs it on a Dask cluster
  (``--runner dask --dask_client_address tcp://HOST:8786``). Set TFRECORD_LOCAL_RUNNER=direct
  to run it with the local runner on the Airflow worker instead.

Each run converts the drop of its logical date ``{{ ds }}`` (passed as ``--run-date``, which
fills ``{YYYY}/{MM}/{DD}`` in the input and output paths) into its own folder. Retries and
re-runs are safe: the CLI exits 0 without rewriting when the folder already holds a committed
output of the same inputs and options, and cleans up a killed run's leftovers before redoing
it. To force a rewrite, trigger the DAG with the config ``{"overwrite": true}``.

Requirements on the Airflow workers: ``apache-airflow-providers-apache-beam`` (plus
``apache-airflow-providers-google`` for the Dataflow DAG), tfrecord-pipeline installed
(``pip install 'tfrecord-pipeline[dask,dataflow]'``) and a copy of ``deploy/dataflow/main.py``, the
launcher the operator runs (``TFRECORD_LAUNCHER``). Configuration comes from environment
variables of the Airflow deployment (see the constants below).
"""

from __future__ import annotations

import datetime
import os

from airflow import DAG
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.providers.google.cloud.operators.dataflow import DataflowConfiguration

PROJECT = os.environ.get("TFRECORD_GCP_PROJECT", "my-gcp-project")
REGION = os.environ.get("TFRECORD_GCP_REGION", "europe-west1")
BUCKET = os.environ.get("TFRECORD_BUCKET", "my-tfrecord-bucket")
# Single braces: {YYYY} {MM} {DD} are the CLI's date templates, not Jinja.
INPUT_GLOB = os.environ.get("TFRECORD_INPUT_GLOB", f"gs://{BUCKET}/raw/{{YYYY}}/{{MM}}/{{DD}}/*.csv")
INPUT_FORMAT = os.environ.get("TFRECORD_INPUT_FORMAT", "csv")
OUTPUT_DIR = os.environ.get("TFRECORD_OUTPUT_DIR", f"gs://{BUCKET}/tfrecords/{{YYYY}}/{{MM}}/{{DD}}")
LAUNCHER = os.environ.get(
    "TFRECORD_LAUNCHER", "/opt/tfrecord-pipeline/src/deploy/dataflow/main.py"
)
SDK_IMAGE = os.environ.get(
    "TFRECORD_SDK_IMAGE",
    f"{REGION}-docker.pkg.dev/{PROJECT}/tfrecord/tfrecord-pipeline-flex:0.1.0",
)
DASK_SCHEDULER = os.environ.get("TFRECORD_DASK_SCHEDULER", "tcp://dask-scheduler:8786")
LOCAL_RUNNER = os.environ.get("TFRECORD_LOCAL_RUNNER", "dask")

# Options shared by both variants. The operator turns each item into --key=value; the
# launcher turns "--overwrite=False" (the rendered default) into no flag at all.
CONVERT_OPTIONS = {
    "input": INPUT_GLOB,
    "format": INPUT_FORMAT,
    "output": OUTPUT_DIR,
    "run_date": "{{ ds }}",
    "compression": "gzip",
    "max_shard_bytes": "200MB",
    "overwrite": "{{ params.overwrite }}",
    # INFO puts the final summary (and, on Dataflow, the job id the operator watches for)
    # into the task log; quiet drops the interactive progress line.
    "log_level": "INFO",
    "quiet": True,
}

DEFAULT_ARGS = {
    "owner": "data-platform",
    "depends_on_past": False,
    "retries": 2,
    "retry_delay": datetime.timedelta(minutes=15),
    "retry_exponential_backoff": True,
    "execution_timeout": datetime.timedelta(hours=8),
}

_COMMON_DAG_ARGS = {
    "schedule": "@daily",
    "start_date": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
    "catchup": False,
    "max_active_runs": 1,
    "is_paused_upon_creation": True,
    "default_args": DEFAULT_ARGS,
    "params": {"overwrite": False},
    "tags": ["tfrecord-pipeline"],
}

with DAG(
    dag_id="tfrecord_daily_dataflow",
    description="Daily conversion to TFRecord on Dataflow",
    **_COMMON_DAG_ARGS,
) as dataflow_dag:
    BeamRunPythonPipelineOperator(
        task_id="convert_on_dataflow",
        runner="DataflowRunner",
        py_file=LAUNCHER,
        pipeline_options={
            **CONVERT_OPTIONS,
            "temp_location": f"gs://{BUCKET}/dataflow/temp",
            "staging_location": f"gs://{BUCKET}/dataflow/staging",
            "sdk_container_image": SDK_IMAGE,
        },
        dataflow_config=DataflowConfiguration(
            job_name="tfrecord-daily-{{ ds_nodash }}",
            project_id=PROJECT,
            location=REGION,
            wait_until_finished=True,
        ),
    )

with DAG(
    dag_id="tfrecord_daily_dask",
    description="Daily conversion to TFRecord on a Dask cluster",
    **_COMMON_DAG_ARGS,
) as dask_dag:
    dask_options = {**CONVERT_OPTIONS}
    if LOCAL_RUNNER == "dask":
        dask_options["dask_client_address"] = DASK_SCHEDULER
    BeamRunPythonPipelineOperator(
        task_id="convert_on_dask",
        runner=LOCAL_RUNNER,
        py_file=LAUNCHER,
        pipeline_options=dask_options,
    )
