#!/usr/bin/env bash
# Submits `tfrecord-pipeline convert` straight to Dataflow (no template): the pipeline is
# built on this machine and the workers get our package from the staged sdist.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: submit_direct.sh --input GLOB --format FORMAT --output gs://DIR [other convert flags]

Runs, from this machine:
  tfrecord-pipeline convert <your flags> --runner DataflowRunner --project PROJECT \
      --region REGION --temp_location gs://BUCKET/dataflow/temp \
      --staging_location gs://BUCKET/dataflow/staging \
      --setup_file <repo>/deploy/dataflow/setup.py

Needs the package with its dataflow extra on this machine: pip install '.[dataflow]'.

Required environment:
  PROJECT               Google Cloud project id
  REGION                Dataflow region, e.g. europe-west1
  BUCKET                bucket (no gs://) for temp and staging files
Optional:
  SDK_CONTAINER_IMAGE   run workers on this image (e.g. the Flex Template image, which has the
                        package installed) instead of staging the sdist with --setup_file
  JOB_NAME              Dataflow job name
  TFRECORD_CLI          the CLI to run (default: tfrecord-pipeline)
  DRY_RUN=1             print the command instead of running it

Why deploy/dataflow/setup.py: Beam 2.77's stager builds the --setup_file package in that
file's folder with `python -m build --sdist`, falling back to `python setup.py sdist` only
for a setup.py. The shim works with or without the `build` module and packages exactly what
pyproject.toml describes. The sdist is pip-installed on every worker at start-up, so the
workers need PyPI access (default Dataflow networking) to fetch setuptools and any missing
dependency; without it, use SDK_CONTAINER_IMAGE. Beam picks the workers' stock SDK image by
the local Python version, so submit from Python 3.11 to match the Flex Template image.
USAGE
}

if [[ $# -eq 0 || "$1" == "-h" || "$1" == "--help" ]]; then
  usage
  [[ $# -eq 0 ]] && exit 2
  exit 0
fi

for name in PROJECT REGION BUCKET; do
  if [[ -z "${!name:-}" ]]; then
    echo "submit_direct.sh: $name is not set" >&2
    exit 2
  fi
done

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

command=("${TFRECORD_CLI:-tfrecord-pipeline}" convert "$@"
  --runner DataflowRunner
  --project "$PROJECT"
  --region "$REGION"
  --temp_location "gs://${BUCKET}/dataflow/temp"
  --staging_location "gs://${BUCKET}/dataflow/staging")
if [[ -n "${SDK_CONTAINER_IMAGE:-}" ]]; then
  command+=(--sdk_container_image "$SDK_CONTAINER_IMAGE")
else
  command+=(--setup_file "$HERE/setup.py")
fi
if [[ -n "${JOB_NAME:-}" ]]; then
  command+=(--job_name "$JOB_NAME")
fi

if [[ "${DRY_RUN:-0}" == "1" ]]; then
  printf '+'; printf ' %q' "${command[@]}"; printf '\n'
  exit 0
fi
exec "${command[@]}"
