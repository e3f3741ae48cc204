#!/usr/bin/env bash
# One scheduled conversion: converts the drop of RUN_DATE (default: yesterday, UTC) into its
# own dated folder, or with EXTRA_ARGS=--append and an OUTPUT_DIR without date templates adds
# what is new to one growing output. Used by deploy/systemd and deploy/cron. Safe to run twice: the CLI exits
# 0 without rewriting when OUTPUT_DIR already holds this conversion, and cleans up the
# leftovers of a killed run before redoing it.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: tfrecord-daily.sh [extra convert flags]

Environment (or KEY=value lines in the file named by TFRECORD_ENV_FILE):
  INPUT_GLOB     input glob with date templates, e.g. /data/raw/{YYYY}/{MM}/{DD}/*.csv
  INPUT_FORMAT   csv | tsv | jsonl | parquet | image-folder | image-manifest
  OUTPUT_DIR     output folder with date templates, e.g. /data/tfrecords/{YYYY}/{MM}/{DD}
  SPEC           conversion spec YAML (optional)
  RUNNER         Beam runner (optional; default: the CLI's local runner)
  RUN_DATE       YYYY-MM-DD (default: yesterday, UTC)
  EXTRA_ARGS     more convert flags, whitespace-separated (optional)
  TFRECORD_CLI   the CLI to run (default: tfrecord-pipeline)
  DRY_RUN=1      print the command instead of running it
USAGE
}

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  usage
  exit 0
fi

if [[ -n "${TFRECORD_ENV_FILE:-}" ]]; then
  set -a
  # shellcheck source=/dev/null
  . "$TFRECORD_ENV_FILE"
  set +a
fi

for name in INPUT_GLOB INPUT_FORMAT OUTPUT_DIR; do
  if [[ -z "${!name:-}" ]]; then
    echo "tfrecord-daily.sh: $name is not set" >&2
    usage >&2
    exit 2
  fi
done

if [[ -z "${RUN_DATE:-}" ]]; then
  RUN_DATE="$(date -u -d yesterday +%F 2>/dev/null \
    || "${PYTHON:-python3}" -c 'import datetime as d; print(d.datetime.now(d.timezone.utc).date() - d.timedelta(days=1))')"
fi

args=(convert --input "$INPUT_GLOB" --format "$INPUT_FORMAT" --output "$OUTPUT_DIR"
  --run-date "$RUN_DATE")
if [[ -n "${SPEC:-}" ]]; then args+=(--spec "$SPEC"); fi
if [[ -n "${RUNNER:-}" ]]; then args+=(--runner "$RUNNER"); fi
if [[ -n "${EXTRA_ARGS:-}" ]]; then
  read -r -a extra <<<"$EXTRA_ARGS"
  args+=("${extra[@]}")
fi
args+=("$@")

cli="${TFRECORD_CLI:-tfrecord-pipeline}"
if [[ "${DRY_RUN:-0}" == "1" ]]; then
  printf '+'; printf ' %q' "$cli" "${args[@]}"; printf '\n'
  exit 0
fi
exec "$cli" "${args[@]}"
