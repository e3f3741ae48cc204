"""Validation of the deployment material in deploy/.

Every configuration is checked the way its tool would read it (YAML documents, JSON,
configparser for systemd units, `bash -n`, Python's parser), and the generated command lines
are run through the real CLI parser and Beam's option parsing, so a flag that the CLI or Beam
would reject fails here. Shell snippets embedded in the CronJobs run under /bin/sh against
stub `tfrecord-pipeline` / `gcloud` executables; the `--setup_file` shim is packaged by Beam's
own stager and the resulting sdist is installed and imported.
"""

from __future__ import annotations

import ast
import configparser
import datetime
import functools
import importlib.util
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
import textwrap
import types
import zoneinfo
from pathlib import Path

import pytest
import yaml

from pipeline.output_lock import LOCK_NAME

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DATAFLOW = DEPLOY / "dataflow"
K8S = DEPLOY / "kubernetes"
METADATA = json.loads((DATAFLOW / "metadata.json").read_text())
PARAMS = {param["name"]: param for param in METADATA["parameters"]}

# The convert flags listed in notes/INTERFACES.md (the contract the CLI was written against).
INTERFACE_CONVERT_FLAGS = {
    "input", "format", "output", "spec", "compression", "compression-level", "num-shards",
    "max-shard-bytes", "max-shard-records", "dry-run", "max-error-rate", "sample-rows",
    "run-date", "overwrite", "quiet", "log-level", "image-column", "label-column",
    "split-column", "validate", "resize", "resize-mode", "max-side", "encode", "quality",
    "exif-orientation", "convert-mode", "max-image-bytes", "max-pixels", "allowed-roots",
}

# Where the deployment files expect the repository on a host (systemd unit, crontab).
HOST_CHECKOUT = "/opt/tfrecord-pipeline/src/"


def _yesterday_utc() -> str:
    return str(datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=1))


def _convert_parser():
    from pipeline.cli import convert_parser

    return convert_parser()


def _parse_convert(argv):
    """Parses a `convert` argument list as the CLI does; returns (namespace, beam options)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    namespace, rest = _convert_parser().parse_known_args(argv)
    return namespace, PipelineOptions(rest)


def _load_flex_main():
    """deploy/dataflow/main.py as a module (registered, as dataclasses need its module)."""
    name = "tfrecord_flex_main"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, DATAFLOW / "main.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _dry_run(script: Path, args=(), env=None, expect_rc=0):
    """Runs a deploy script with DRY_RUN=1; returns the printed commands as argv lists."""
    full_env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
                "DRY_RUN": "1", **(env or {})}
    result = subprocess.run(["bash", str(script), *args], env=full_env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == expect_rc, result.stderr
    commands = [shlex.split(line[2:]) for line in result.stdout.splitlines()
                if line.startswith("+ ")]
    return commands, result


# --------------------------------------------------------------------------- YAML / Kubernetes

def _yaml_files():
    return sorted(list(DEPLOY.rglob("*.yaml")) + list(DEPLOY.rglob("*.yml")))


def _k8s_objects():
    objects = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        objects += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return objects


def _by_kind(kind):
    return {doc["metadata"]["name"]: doc for _, doc in _k8s_objects() if doc["kind"] == kind}


def _pod_spec(doc):
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return doc["spec"]["template"]["spec"]


_CRON_FIELDS = [(0, 59, {}), (0, 23, {}), (1, 31, {}),
                (1, 12, {m: i + 1 for i, m in enumerate(
                    "jan feb mar apr may jun jul aug sep oct nov dec".split())}),
                (0, 7, {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())})]


def _valid_cron(expression: str) -> bool:
    """True for a valid 5-field cron expression (numbers, names, ranges, steps, lists)."""
    fields = expression.split()
    if len(fields) != 5:
        return False
    for field, (low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for item in field.split(","):
            match = re.fullmatch(r"(\*|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/([0-9]+))?", item.lower())
            if not match or (match.group(2) is not None and int(match.group(2)) < 1):
                return False
            if match.group(1) == "*":
                continue
            for bound in match.group(1).split("-"):
                value = names.get(bound, int(bound) if bound.isdigit() else None)
                if value is None or not low <= value <= high:
                    return False
    return True


def test_cron_validator_rejects_bad_expressions():
    assert _valid_cron("15 2 * * *") and _valid_cron("*/5 0-6/2 1,15 jan-mar mon-fri")
    for bad in ("15 2 * *", "60 2 * * *", "15 24 * * *", "0 0 0 * *", "0 0 * 13 *",
                "0 0 * * 8", "*/0 * * * *", "@daily", "a b c d e"):
        assert not _valid_cron(bad), bad


def test_every_yaml_file_parses():
    files = _yaml_files()
    names = {path.relative_to(DEPLOY).as_posix() for path in files}
    assert {"kubernetes/cronjob-dask.yaml", "kubernetes/cronjob-dataflow.yaml",
            "kubernetes/dask-cluster.yaml", "dataflow/cloudbuild.yaml"} <= names
    for path in files:
        docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
        assert docs, f"{path} holds no YAML document"
        assert all(isinstance(doc, dict) for doc in docs), path


def test_kubernetes_objects_have_required_fields():
    objects = _k8s_objects()
    kinds = sorted(doc["kind"] for _, doc in objects)
    assert kinds == sorted(["ServiceAccount", "Service", "Deployment", "Deployment",
                            "ConfigMap", "CronJob", "ConfigMap", "CronJob"])
    for filename, doc in objects:
        assert re.fullmatch(r"(v1|apps/v1|batch/v1)", doc["apiVersion"]), (filename, doc)
        name = doc["metadata"]["name"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 52, name


def test_cronjobs_are_valid_and_never_overlap():
    cronjobs = _by_kind("CronJob")
    assert set(cronjobs) == {"tfrecord-daily-dask", "tfrecord-daily-dataflow"}
    config_maps = _by_kind("ConfigMap")
    accounts = _by_kind("ServiceAccount")
    for name, cronjob in cronjobs.items():
        spec = cronjob["spec"]
        assert _valid_cron(spec["schedule"]), name
        assert spec["concurrencyPolicy"] == "Forbid", name
        assert spec["timeZone"] in zoneinfo.available_timezones()
        pod = _pod_spec(cronjob)
        assert pod["restartPolicy"] in ("Never", "OnFailure")
        assert pod["serviceAccountName"] in accounts
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert cronjob["spec"]["jobTemplate"]["spec"]["backoffLimit"] >= 1
        for container in pod["containers"]:
            assert container["image"] and container["command"], (name, container)
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][bound]), (name, bound)
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in config_maps, name


def test_dask_cluster_matches_the_cronjob():
    services = _by_kind("Service")
    deployments = _by_kind("Deployment")
    assert set(deployments) == {"dask-scheduler", "dask-worker"}
    scheduler = services["dask-scheduler"]
    assert 8786 in {port["port"] for port in scheduler["spec"]["ports"]}
    selected = [name for name, deployment in deployments.items()
                if scheduler["spec"]["selector"].items()
                <= deployment["spec"]["template"]["metadata"]["labels"].items()]
    assert selected == ["dask-scheduler"]
    for name, deployment in deployments.items():
        assert (deployment["spec"]["selector"]["matchLabels"].items()
                <= deployment["spec"]["template"]["metadata"]["labels"].items()), name
        container = _pod_spec(deployment)["containers"][0]
        assert container["command"][:2] == ["dask", name.split("-")[1]]
        assert {"requests", "limits"} <= set(container["resources"])
    worker = _pod_spec(deployments["dask-worker"])["containers"][0]
    assert "tcp://dask-scheduler:8786" in worker["command"]
    assert deployments["dask-worker"]["spec"]["replicas"] >= 2
    # Beam's DaskRunner stages nothing: driver, scheduler and workers share one image.
    cron = _pod_spec(_by_kind("CronJob")["tfrecord-daily-dask"])["containers"][0]
    images = {cron["image"]} | {_pod_spec(d)["containers"][0]["image"]
                                for d in deployments.values()}
    assert len(images) == 1


def test_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    manifests = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests
    image_names = {image["name"] for image in kustomization["images"]}
    used = {container["image"].split(":")[0] for _, doc in _k8s_objects()
            if doc["kind"] in ("CronJob", "Deployment")
            for container in _pod_spec(doc)["containers"]}
    assert image_names <= used


def _k8s_expand(text: str, env: dict) -> str:
    """Kubernetes' $(VAR) expansion of command/args: $$ -> $, known $(VAR) -> value."""
    def replace(match):
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", replace, text)


def _run_cronjob_script(cronjob_name, stubs: dict, tmp_path, extra_env=None):
    cronjob = _by_kind("CronJob")[cronjob_name]
    container = _pod_spec(cronjob)["containers"][0]
    env = {}
    for source in container.get("envFrom", []):
        env.update(_by_kind("ConfigMap")[source["configMapRef"]["name"]]["data"])
    env.update({item["name"]: item["value"] for item in container.get("env", [])
                if "value" in item})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, source in stubs.items():
        stub = bin_dir / name
        stub.write_text(f"#!{sys.executable}\n" + textwrap.dedent(source))
        stub.chmod(0o755)
    command = [_k8s_expand(part, env) for part in container["command"]]
    assert command[:2] == ["/bin/sh", "-c"]
    env.update({"PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_LOG": str(tmp_path / "log"),
                "STUB_DIR": str(tmp_path), **(extra_env or {})})
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


_CLI_STUB = """
    import json, os, sys
    with open(os.environ["STUB_LOG"], "w") as log:
        json.dump(sys.argv[1:], log)
"""


def test_dask_cronjob_runs_the_cli_with_the_dask_runner(tmp_path):
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.runners.dask.dask_runner import DaskOptions

    result = _run_cronjob_script("tfrecord-daily-dask", {"tfrecord-pipeline": _CLI_STUB},
                                 tmp_path)
    assert result.returncode == 0, result.stderr
    argv = json.loads((tmp_path / "log").read_text())
    assert argv[0] == "convert"
    config = _by_kind("ConfigMap")["tfrecord-dask-config"]["data"]
    namespace, beam = _parse_convert(argv[1:])
    assert namespace.input == config["INPUT_GLOB"] and "{YYYY}/{MM}/{DD}" in namespace.input
    assert namespace.output == config["OUTPUT_DIR"]
    assert namespace.format == config["INPUT_FORMAT"]
    assert str(namespace.run_date) == _yesterday_utc()
    assert namespace.spec is None  # empty SPEC adds no flag
    assert namespace.compression == "gzip" and namespace.max_shard_bytes == 200_000_000
    assert beam.view_as(StandardOptions).runner == "dask"
    assert beam.view_as(DaskOptions).address == "tcp://dask-scheduler:8786"


_GCLOUD_STUB = """
    import json, os, sys
    args = sys.argv[1:]
    with open(os.environ["STUB_LOG"], "a") as log:
        log.write(json.dumps(args) + "\\n")
    if args[:3] == ["dataflow", "jobs", "list"]:
        print(os.environ.get("STUB_ACTIVE_JOB", ""))
    elif args[:3] == ["dataflow", "flex-template", "run"]:
        print("2024-05-02_00_00_00-42")
    elif args[:3] == ["dataflow", "jobs", "describe"]:
        counter = os.path.join(os.environ["STUB_DIR"], "polls")
        polls = int(open(counter).read()) if os.path.exists(counter) else 0
        open(counter, "w").write(str(polls + 1))
        print("JOB_STATE_RUNNING" if polls == 0 else os.environ["STUB_FINAL_STATE"])
    else:
        sys.exit("unexpected gcloud call: " + " ".join(args))
"""


def _gcloud_calls(tmp_path):
    return [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]


def _option(args, flag):
    return args[args.index(flag) + 1]


def test_dataflow_cronjob_launches_the_template_and_waits(tmp_path):
    result = _run_cronjob_script(
        "tfrecord-daily-dataflow", {"gcloud": _GCLOUD_STUB}, tmp_path,
        {"POLL_SECONDS": "0", "STUB_FINAL_STATE": "JOB_STATE_DONE"})
    assert result.returncode == 0, result.stderr
    calls = _gcloud_calls(tmp_path)
    assert [call[:3] for call in calls] == [
        ["dataflow", "jobs", "list"], ["dataflow", "flex-template", "run"],
        ["dataflow", "jobs", "describe"], ["dataflow", "jobs", "describe"]]
    config = _by_kind("ConfigMap")["tfrecord-dataflow-config"]["data"]
    launch = calls[1]
    assert launch[3] == "tfrecord-daily-" + _yesterday_utc().replace("-", "")
    assert _option(launch, "--template-file-gcs-location") == config["TEMPLATE_SPEC"]
    parameters = _option(launch, "--parameters")
    assert parameters.startswith("^~^")
    values = dict(item.split("=", 1) for item in parameters[3:].split("~"))
    assert set(values) <= set(PARAMS)
    assert values["input"] == config["INPUT_GLOB"] and values["run_date"] == _yesterday_utc()
    assert calls[2][3] == "2024-05-02_00_00_00-42"


def test_dataflow_cronjob_waits_for_a_running_job_and_reports_failure(tmp_path):
    result = _run_cronjob_script(
        "tfrecord-daily-dataflow", {"gcloud": _GCLOUD_STUB}, tmp_path,
        {"POLL_SECONDS": "0", "STUB_ACTIVE_JOB": "2024-05-01_running-7",
         "STUB_FINAL_STATE": "JOB_STATE_FAILED"})
    assert result.returncode == 1
    calls = _gcloud_calls(tmp_path)
    assert not any(call[:3] == ["dataflow", "flex-template", "run"] for call in calls)
    assert calls[-1][3] == "2024-05-01_running-7"
    assert "JOB_STATE_FAILED" in result.stderr


# --------------------------------------------------------------------- Flex Template metadata

def test_metadata_is_a_valid_template_description():
    assert METADATA["name"] and METADATA["description"]
    names = [param["name"] for param in METADATA["parameters"]]
    assert len(names) == len(set(names))
    for param in METADATA["parameters"]:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", param["name"]), param["name"]
        assert param["label"] and len(param["helpText"]) > 10
        assert isinstance(param["isOptional"], bool)
        for regex in param.get("regexes", []):
            re.compile(regex)
        if param["paramType"] == "ENUM":
            values = [option["value"] for option in param["enumOptions"]]
            assert all(re.fullmatch(param["regexes"][0], value) for value in values)
    required = {param["name"] for param in METADATA["parameters"] if not param["isOptional"]}
    assert required == {"input", "format", "output"}


def test_metadata_covers_the_interface_flag_list():
    dest_of = {option: action.dest for action in _convert_parser()._actions
               for option in action.option_strings}
    assert {f"--{flag}" for flag in INTERFACE_CONVERT_FLAGS} <= set(dest_of)
    assert {dest_of[f"--{flag}"] for flag in INTERFACE_CONVERT_FLAGS} <= set(PARAMS)


def test_metadata_matches_the_cli_convert_parser():
    import argparse

    parser = _convert_parser()
    by_dest = _load_flex_main().cli_flags(parser).by_dest
    actions = {action.dest: action for action in parser._actions
               if action.option_strings and action.dest != "help"}
    assert set(actions) == set(PARAMS), "metadata.json and `convert` flags differ"
    for dest, action in actions.items():
        param = PARAMS[dest]
        # The launcher gets --<name>=value; it must be a spelling of the flag or be mapped.
        assert f"--{dest}" in action.option_strings or by_dest[f"--{dest}"] in (
            action.option_strings), dest
        switch = isinstance(action, argparse._StoreTrueAction)
        assert (param["paramType"] == "BOOLEAN") == switch, dest
        assert param["isOptional"] is not action.required, dest
        if switch:
            assert param["regexes"] == ["^(true|false)$"]
        if action.choices:
            assert [o["value"] for o in param["enumOptions"]] == list(action.choices), dest
        if action.default not in (None, False):
            assert all(re.fullmatch(regex, str(action.default))
                       for regex in param.get("regexes", [])), (dest, action.default)


# Values a user could type into the template form, one per non-enum, non-boolean parameter.
_SAMPLE_VALUES = {
    "input": "gs://bucket/raw/{YYYY}/{MM}/{DD}/*.csv",
    "output": "gs://bucket/tfrecords/{YYYY}/{MM}/{DD}",
    "spec": "gs://bucket/specs/daily.yaml", "compression_level": "6", "num_shards": "8",
    "max_shard_bytes": "256MiB", "max_shard_records": "100000", "max_error_rate": "0.01",
    "compare_to": "gs://bucket/tfrecords/2024-04-30",
    "work_unit_bytes": "32MiB",
    "sample_rows": "5000", "batch_rows": "4096", "converter_threads": "2", "converter_processes": "3",
    "run_date": "2024-05-01", "span": "19844",
    "log_level": "INFO", "image_column": "uri", "label_column": "label",
    "split_column": "split", "labels_file": "gs://bucket/labels.txt",
    "resize": "224x224", "max_side": "512", "quality": "85",
    "max_image_bytes": "32MiB", "max_pixels": "40000000",
    "allowed_roots": "gs://bucket/images,gs://other/images",
}


def test_every_template_parameter_reaches_the_cli(monkeypatch):
    """Flex launcher calling convention -> main.py -> the CLI's own parser."""
    import pipeline.cli

    captured = []
    monkeypatch.setattr(pipeline.cli, "run", lambda argv: captured.append(argv) or 0)
    argv = []
    for name, param in PARAMS.items():
        if param["paramType"] == "BOOLEAN":
            value = "true"
        elif param["paramType"] == "ENUM":
            value = param["enumOptions"][-1]["value"]
        else:
            value = _SAMPLE_VALUES[name]
        assert all(re.fullmatch(regex, value) for regex in param.get("regexes", [])), name
        argv.append(f"--{name}={value}")
    argv += ["--project=my-project", "--region=europe-west1", "--job_name=tfrecord-x",
             "--temp_location=gs://bucket/tmp"]
    monkeypatch.setenv("TFRECORD_SDK_CONTAINER_IMAGE", "europe-docker.pkg.dev/p/r/flex:1")
    assert _load_flex_main().main(argv) == 0
    (args,) = captured
    assert args[0] == "convert"
    namespace, rest = _convert_parser().parse_known_args(args[1:])
    assert namespace.overwrite is True and namespace.convert_dry_run is True
    assert namespace.max_shard_bytes == 256 * 2**20 and namespace.resize == (224, 224)
    assert str(namespace.run_date) == "2024-05-01" and namespace.format == "image-manifest"
    from apache_beam.options.pipeline_options import (
        GoogleCloudOptions,
        PipelineOptions,
        StandardOptions,
        WorkerOptions,
    )

    beam = PipelineOptions(rest)
    assert beam.view_as(StandardOptions).runner == "DataflowRunner"
    assert beam.view_as(GoogleCloudOptions).project == "my-project"
    assert beam.view_as(WorkerOptions).sdk_container_image == "europe-docker.pkg.dev/p/r/flex:1"


def test_launcher_maps_names_booleans_runner_and_image():
    main = _load_flex_main()
    switches = main.cli_flags(_convert_parser())
    assert {"--overwrite", "--dry-run", "--convert_dry_run", "--quiet",
            "--exif_orientation"} <= switches.switches
    assert "--input" not in switches.switches and "--dry_run" not in switches.switches
    assert switches.by_dest == {"--convert_dry_run": "--dry-run"}
    convert = main.build_convert_args
    assert convert(["--overwrite=TRUE", "--quiet=false", "--exif_orientation"], switches,
                   {}) == ["--overwrite", "--exif_orientation", "--runner=DataflowRunner"]
    # Beam's own --dry_run passes through untouched; the template's name maps to ours.
    assert convert(["--convert_dry_run=true", "--dry_run=true", "--runner=direct"],
                   switches, {}) == ["--dry-run", "--dry_run=true", "--runner=direct"]
    with pytest.raises(ValueError, match="--overwrite"):
        convert(["--overwrite=maybe"], switches, {})
    assert convert(["--runner", "dask"], switches, {"TFRECORD_SDK_CONTAINER_IMAGE": "img"}) == [
        "--runner", "dask"]
    image_env = {"TFRECORD_SDK_CONTAINER_IMAGE": "img"}
    assert convert([], switches, image_env) == ["--runner=DataflowRunner",
                                                "--sdk_container_image=img"]
    assert convert(["--sdk_container_image=mine"], switches, image_env) == [
        "--sdk_container_image=mine", "--runner=DataflowRunner"]
    assert convert([], switches, {"TFRECORD_DEFAULT_RUNNER": "direct"}) == ["--runner=direct"]


def test_launcher_adds_no_wait_for_flex_templates_once_whatever_its_spelling():
    main = _load_flex_main()
    convert = functools.partial(main.build_convert_args, flags=main.cli_flags(_convert_parser()),
                                environ={"FLEX_TEMPLATE_PYTHON_PY_FILE": "main.py"})
    assert convert([]) == ["--runner=DataflowRunner", "--no-wait"]
    # The CLI refuses a flag given twice: --no_wait is not followed by a --no-wait.
    assert convert(["--no_wait=true"]) == ["--no_wait", "--runner=DataflowRunner"]


# -------------------------------------------------------------------------------- Dockerfiles

def _dockerfile(path: Path):
    """(instruction, arguments) pairs with continuation lines joined and comments dropped."""
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        if not current and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        current += raw.rstrip("\\").strip() + " "
        if not raw.rstrip().endswith("\\"):
            instruction, _, rest = current.strip().partition(" ")
            lines.append((instruction.upper(), rest.strip()))
            current = ""
    return lines


def _dockerignore_regex(pattern: str) -> str:
    """Docker's pattern syntax: `*` and `?` stay within a path segment, `**` spans segments."""
    regex, index = "", 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            regex, index = regex + "(?:.*/)?", index + 3
        elif pattern.startswith("**", index):
            regex, index = regex + ".*", index + 2
        else:
            char = pattern[index]
            regex += {"*": "[^/]*", "?": "[^/]"}.get(char, re.escape(char))
            index += 1
    return regex


def _dockerignore_excludes(path: str, patterns) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _dockerignore_regex(pattern.lstrip("!").strip("/"))
        if any(re.fullmatch(regex, candidate) for candidate in candidates):
            excluded = not negate
    return excluded


def _ignore_patterns(dockerfile: Path):
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    return [line.strip() for line in ignore.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def _package_files():
    return [path.relative_to(REPO).as_posix() for package in ("pipeline", "protos", "transforms")
            for path in (REPO / package).rglob("*.py")]


def test_dockerignore_matcher_follows_docker_rules():
    patterns = ["*", "!pipeline", "!deploy/dataflow/main.py", "**/__pycache__"]
    assert not _dockerignore_excludes("pipeline/cli.py", patterns)
    assert _dockerignore_excludes("pipeline/__pycache__/cli.pyc", patterns)
    assert _dockerignore_excludes("deploy/dataflow/setup.py", patterns)
    assert not _dockerignore_excludes("deploy/dataflow/main.py", patterns)
    assert _dockerignore_excludes(".git/HEAD", patterns)
    assert _dockerignore_excludes("__pycache__/x.pyc", patterns)


def test_flex_template_dockerfile():
    path = DATAFLOW / "Dockerfile"
    instructions = _dockerfile(path)
    args = dict(arg.split("=", 1) for kind, arg in instructions if kind == "ARG" and "=" in arg)
    froms = [arg for kind, arg in instructions if kind == "FROM"]
    launcher_image, _, stage = froms[0].partition(" AS ")
    assert launcher_image == "gcr.io/dataflow-templates-base/python311-template-launcher-base:latest"
    final = froms[-1].replace("${BEAM_VERSION}", args["BEAM_VERSION"])
    assert final == "apache/beam_python3.11_sdk:2.77.0"
    launcher = "/opt/google/dataflow/python_template_launcher"
    assert ("COPY", f"--from={stage} {launcher} {launcher}") in instructions
    runs = " ".join(arg for kind, arg in instructions if kind == "RUN")
    assert re.search(r'pip install .* "\.\[dataflow\]" ', runs)
    assert "apache-beam[gcp]==${BEAM_VERSION}" in runs
    env = dict(arg.split("=", 1) for kind, arg in instructions if kind == "ENV")
    workdir = next(arg for kind, arg in instructions if kind == "WORKDIR")
    assert ("COPY", ". .") in instructions
    py_file = env["FLEX_TEMPLATE_PYTHON_PY_FILE"]
    assert py_file.startswith(workdir + "/")
    relative = py_file[len(workdir) + 1:]
    assert (REPO / relative).is_file() and relative == "deploy/dataflow/main.py"
    assert env["TFRECORD_SDK_CONTAINER_IMAGE"] == "${IMAGE_URI}"
    assert "FLEX_TEMPLATE_PYTHON_SETUP_FILE" not in env  # the image itself runs on workers
    patterns = _ignore_patterns(path)
    needed = ["pyproject.toml", relative, "deploy/dataflow/metadata.json", *_package_files()]
    assert [f for f in needed if _dockerignore_excludes(f, patterns)] == []
    for unwanted in (".git/config", "tests/e2e/test_deploy.py", "tfrecord_pipeline.egg-info/PKG-INFO"):
        assert _dockerignore_excludes(unwanted, patterns), unwanted


def test_kubernetes_runner_dockerfile():
    path = K8S / "Dockerfile"
    instructions = _dockerfile(path)
    assert [arg for kind, arg in instructions if kind == "FROM"] == ["python:3.11-slim"]
    runs = " ".join(arg for kind, arg in instructions if kind == "RUN")
    assert 'pip install ".[dask]"' in runs
    user = next(arg for kind, arg in instructions if kind == "USER")
    uid = int(user.split(":")[0])
    assert f"--uid {uid}" in runs
    for _, doc in _k8s_objects():
        if doc["kind"] in ("CronJob", "Deployment"):
            assert _pod_spec(doc)["securityContext"]["runAsUser"] == uid
    patterns = _ignore_patterns(path)
    assert [f for f in ["pyproject.toml", *_package_files()]
            if _dockerignore_excludes(f, patterns)] == []
    assert _dockerignore_excludes(".git/config", patterns)


def test_cloudbuild_builds_both_dockerfiles():
    build = yaml.safe_load((DATAFLOW / "cloudbuild.yaml").read_text())
    step = build["steps"][0]
    assert step["args"][0] == "build" and step["args"][-1] == "."
    assert _option(step["args"], "--file") == "${_DOCKERFILE}"
    assert (REPO / build["substitutions"]["_DOCKERFILE"]).is_file()
    assert "${_IMAGE}" in build["images"] and "DOCKER_BUILDKIT=1" in step["env"]


# ------------------------------------------------------------------- setup.py shim / stager

def test_setup_file_shim_is_packaged_by_beams_stager(tmp_path):
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.portability.api import beam_runner_api_pb2
    from apache_beam.runners.portability.stager import Stager

    checkout = tmp_path / "checkout"
    for package in ("pipeline", "protos", "transforms"):
        shutil.copytree(REPO / package, checkout / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", checkout)
    (checkout / "deploy" / "dataflow").mkdir(parents=True)
    shutil.copy(DATAFLOW / "setup.py", checkout / "deploy" / "dataflow")
    options = PipelineOptions(["--setup_file", str(checkout / "deploy/dataflow/setup.py"),
                               "--sdk_location", "container"])
    staging = tmp_path / "staging"
    staging.mkdir()
    resources = Stager.create_job_resources(options, str(staging),
                                            log_submission_env_dependencies=False)
    staged = {
        beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(r.role_payload).staged_name:
        beam_runner_api_pb2.ArtifactFilePayload.FromString(r.type_payload).path
        for r in resources}
    tarball = staged["workflow.tar.gz"]

    pyproject = (REPO / "pyproject.toml").read_text()
    version = re.search(r'^version\s*=\s*"([^"]+)"', pyproject, re.MULTILINE).group(1)
    root = f"tfrecord_pipeline-{version}"
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
        pkg_info = archive.extractfile(f"{root}/PKG-INFO").read().decode()
    # Everything the packages hold (modules and package data such as pipeline/sample_data).
    shipped = {path.relative_to(checkout).as_posix()
               for package in ("pipeline", "protos", "transforms")
               for path in (checkout / package).rglob("*") if path.is_file()}
    assert "pipeline/cli.py" in shipped and "transforms/records.py" in shipped
    assert {f"{root}/{path}" for path in shipped} <= names
    assert "Name: tfrecord-pipeline" in pkg_info and f"Version: {version}" in pkg_info

    # What a Dataflow worker does with it: pip install the sdist, then import the packages.
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(site), tarball],
                   check=True, capture_output=True, timeout=300)
    imported = _import_installed_packages(site, cwd=tmp_path)
    assert imported["pipeline.cli"].startswith(f"{site}/") and len(imported) > 20
    assert all(path.startswith(f"{site}/") for path in imported.values()), imported


def _import_installed_packages(site: Path, cwd: Path) -> dict[str, str]:
    """{module: file} of our modules that `import pipeline.cli, transforms.records, protos`
    loads in a forked child that sees only `site` for them: our modules dropped from
    sys.modules, the checkout off sys.path and the editable install's finder off the import
    system (a module missing from the sdist fails the import, as on a worker). Forked
    because a fresh interpreter would spend ~1.5 s of CPU importing Beam again."""
    ours = ("pipeline", "transforms", "protos")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's clean-ups
        try:
            os.close(read)
            os.chdir(cwd)
            for name in [name for name in sys.modules if name.split(".")[0] in ours]:
                del sys.modules[name]
            sys.path[:] = [str(site)] + [entry for entry in sys.path
                                         if entry and Path(entry).resolve() != REPO]
            sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in f.__module__]
            sys.path_hooks[:] = [h for h in sys.path_hooks if "__editable__" not in h.__module__]
            sys.path_importer_cache.clear()
            importlib.invalidate_caches()
            import pipeline.cli  # noqa: F401
            import protos  # noqa: F401
            import transforms.records  # noqa: F401

            report = {name: getattr(module, "__file__", None) or "" for name, module in sys.modules.items()
                      if name.split(".")[0] in ours}
        except BaseException as error:  # noqa: BLE001 - told to the parent
            report = {"error": repr(error)}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        report = json.loads(pipe.read() or b"{}")
    assert os.waitpid(pid, 0)[1] == 0
    assert "error" not in report, report["error"]
    return report


# --------------------------------------------------------------------------------- Airflow

DAG_FILE = DEPLOY / "airflow" / "tfrecord_daily_dag.py"


def test_airflow_dag_is_valid_python_with_the_expected_tasks():
    tree = ast.parse(DAG_FILE.read_text())
    imports = {(node.module, alias.name) for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert ("airflow.providers.apache.beam.operators.beam",
            "BeamRunPythonPipelineOperator") in imports
    task_ids = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "BeamRunPythonPipelineOperator"):
            keywords = {kw.arg: kw.value for kw in node.keywords}
            task_ids.add(ast.literal_eval(keywords["task_id"]))
            assert {"runner", "py_file", "pipeline_options"} <= set(keywords)
    assert task_ids == {"convert_on_dataflow", "convert_on_dask"}


class _Recorder:
    """Stand-in for Airflow classes: records constructor arguments."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


def _load_dag_with_stub_airflow(monkeypatch, environ=None):
    dags, operators = {}, []

    class DAG(_Recorder):
        current = None

        def __enter__(self):
            DAG.current = self
            dags[self.kwargs["dag_id"]] = self
            return self

        def __exit__(self, *exc):
            DAG.current = None

    class BeamRunPythonPipelineOperator(_Recorder):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dag = DAG.current
            operators.append(self)

    modules = {
        "airflow": {"DAG": DAG},
        "airflow.providers": {}, "airflow.providers.apache": {},
        "airflow.providers.apache.beam": {}, "airflow.providers.apache.beam.operators": {},
        "airflow.providers.apache.beam.operators.beam":
            {"BeamRunPythonPipelineOperator": BeamRunPythonPipelineOperator},
        "airflow.providers.google": {}, "airflow.providers.google.cloud": {},
        "airflow.providers.google.cloud.operators": {},
        "airflow.providers.google.cloud.operators.dataflow":
            {"DataflowConfiguration": type("DataflowConfiguration", (_Recorder,), {})},
    }
    for name, attributes in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        monkeypatch.setitem(sys.modules, name, module)
    for key, value in (environ or {}).items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location("tfrecord_daily_dag", DAG_FILE)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    return dags, {op.kwargs["task_id"]: op for op in operators}


def _provider_command_line(operator, context):
    """The argument list Airflow's Beam provider passes to py_file, with templates rendered."""
    import jinja2

    def render(value):
        if isinstance(value, str):
            return jinja2.Template(value).render(**context)
        return value

    options = {key: render(value) for key, value in operator.kwargs["pipeline_options"].items()}
    options["labels"] = {"airflow-version": "v2-10-5"}
    config = operator.kwargs.get("dataflow_config")
    if operator.kwargs["runner"] == "DataflowRunner":
        options.update(project=config.kwargs["project_id"], region=config.kwargs["location"],
                       job_name=render(config.kwargs["job_name"]) + "-1a2b3c4d")
    args = [f"--runner={operator.kwargs['runner']}"]
    for key, value in options.items():
        if value is None or value is True:
            args.append(f"--{key}")
        elif value is False:
            continue
        elif isinstance(value, dict):
            args += [f"--{key}={k}={v}" for k, v in value.items()]
        elif isinstance(value, list):
            args += [f"--{key}={item}" for item in value]
        else:
            args.append(f"--{key}={value}")
    return args


@pytest.mark.parametrize("overwrite", [False, True])
def test_airflow_tasks_produce_commands_the_cli_accepts(monkeypatch, overwrite):
    from apache_beam.options.pipeline_options import (
        GoogleCloudOptions,
        StandardOptions,
        WorkerOptions,
    )
    from apache_beam.runners.dask.dask_runner import DaskOptions

    dags, tasks = _load_dag_with_stub_airflow(monkeypatch)
    assert set(dags) == {"tfrecord_daily_dataflow", "tfrecord_daily_dask"}
    for dag in dags.values():
        assert dag.kwargs["schedule"] == "@daily"
        assert dag.kwargs["max_active_runs"] == 1
        assert dag.kwargs["default_args"]["retries"] >= 1
        assert dag.kwargs["start_date"].tzinfo is not None
    assert tasks["convert_on_dataflow"].dag is dags["tfrecord_daily_dataflow"]
    assert tasks["convert_on_dask"].dag is dags["tfrecord_daily_dask"]

    context = {"ds": "2024-05-01", "ds_nodash": "20240501", "params": {"overwrite": overwrite}}
    main = _load_flex_main()
    switches = main.cli_flags(_convert_parser())
    for task_id, runner in (("convert_on_dataflow", "DataflowRunner"),
                            ("convert_on_dask", "dask")):
        operator = tasks[task_id]
        assert _host_path_in_repo(operator.kwargs["py_file"]) == DATAFLOW / "main.py"
        args = main.build_convert_args(_provider_command_line(operator, context), switches, {})
        namespace, beam = _parse_convert(args)
        assert str(namespace.run_date) == "2024-05-01"
        assert "{YYYY}/{MM}/{DD}" in namespace.input and "{YYYY}/{MM}/{DD}" in namespace.output
        assert namespace.overwrite is overwrite and namespace.quiet is True
        assert beam.view_as(StandardOptions).runner == runner
        if runner == "DataflowRunner":
            cloud = beam.view_as(GoogleCloudOptions)
            assert cloud.temp_location.startswith("gs://") and cloud.project
            assert cloud.job_name.startswith("tfrecord-daily-20240501")
            assert beam.view_as(WorkerOptions).sdk_container_image
        else:
            assert beam.view_as(DaskOptions).address.startswith("tcp://")


def test_airflow_local_variant_can_use_the_direct_runner(monkeypatch):
    _, tasks = _load_dag_with_stub_airflow(monkeypatch, {"TFRECORD_LOCAL_RUNNER": "direct"})
    operator = tasks["convert_on_dask"]
    assert operator.kwargs["runner"] == "direct"
    assert "dask_client_address" not in operator.kwargs["pipeline_options"]


# ----------------------------------------------------------------------------- shell scripts

SCRIPTS = sorted(DEPLOY.rglob("*.sh"))


def test_shell_scripts_parse_and_are_strict():
    assert {path.relative_to(DEPLOY).as_posix() for path in SCRIPTS} == {
        "bin/tfrecord-daily.sh", "dataflow/build_and_launch.sh", "dataflow/submit_direct.sh",
        "flink/run_flink.sh", "spark/run_spark.sh"}
    for path in SCRIPTS:
        result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, (path, result.stderr)
        text = path.read_text()
        assert text.startswith("#!/usr/bin/env bash\n"), path
        assert "\nset -euo pipefail\n" in text, path
        assert path.stat().st_mode & stat.S_IXUSR, f"{path} is not executable"
        help_run = subprocess.run(["bash", str(path), "--help"], capture_output=True, text=True)
        assert help_run.returncode == 0 and "Usage:" in help_run.stdout, path


def test_build_and_launch_builds_and_runs_the_template():
    env = {"PROJECT": "my-project", "REGION": "europe-west1", "BUCKET": "my-bucket",
           "INPUT": "gs://my-bucket/raw/{YYYY}/{MM}/{DD}/*.csv", "FORMAT": "csv",
           "OUTPUT": "gs://my-bucket/out/{YYYY}/{MM}/{DD}", "IMAGE_TAG": "test",
           "EXTRA_PARAMETERS": "compression=gzip~allowed_roots=gs://a,gs://b"}
    commands, _ = _dry_run(DATAFLOW / "build_and_launch.sh", ["all"], env)
    assert [command[:3] for command in commands] == [
        ["gcloud", "builds", "submit"], ["gcloud", "dataflow", "flex-template"],
        ["gcloud", "dataflow", "flex-template"]]
    submit, build, launch = commands
    assert Path(submit[3]) == REPO and Path(_option(submit, "--config")).is_file()
    substitutions = dict(item.split("=", 1)
                         for item in _option(submit, "--substitutions").split(","))
    image = "europe-west1-docker.pkg.dev/my-project/tfrecord/tfrecord-pipeline-flex:test"
    assert substitutions == {"_IMAGE": image, "_DOCKERFILE": "deploy/dataflow/Dockerfile"}
    assert build[3] == "build" and _option(build, "--image") == image
    assert _option(build, "--sdk-language") == "PYTHON"
    assert Path(_option(build, "--metadata-file")) == DATAFLOW / "metadata.json"
    assert launch[3] == "run" and launch[4].startswith("tfrecord-")
    assert _option(launch, "--template-file-gcs-location") == build[4]
    parameters = _option(launch, "--parameters")
    values = dict(item.split("=", 1) for item in parameters.removeprefix("^~^").split("~"))
    assert set(values) <= set(PARAMS)
    assert values["allowed_roots"] == "gs://a,gs://b" and values["run_date"] == _yesterday_utc()
    _, result = _dry_run(DATAFLOW / "build_and_launch.sh", ["launch"], {"PROJECT": "p"},
                         expect_rc=2)
    assert "REGION is not set" in result.stderr


def test_submit_direct_uses_the_setup_file_shim():
    from apache_beam.options.pipeline_options import (
        GoogleCloudOptions,
        SetupOptions,
        StandardOptions,
        WorkerOptions,
    )

    env = {"PROJECT": "my-project", "REGION": "europe-west1", "BUCKET": "my-bucket"}
    flags = ["--input", "gs://my-bucket/raw/*.csv", "--format", "csv",
             "--output", "gs://my-bucket/out"]
    (command,), _ = _dry_run(DATAFLOW / "submit_direct.sh", flags, env)
    assert command[:2] == ["tfrecord-pipeline", "convert"]
    namespace, beam = _parse_convert(command[2:])
    assert namespace.input == "gs://my-bucket/raw/*.csv"
    assert beam.view_as(StandardOptions).runner == "DataflowRunner"
    cloud = beam.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region) == ("my-project", "europe-west1")
    assert cloud.temp_location.startswith("gs://my-bucket/")
    assert Path(beam.view_as(SetupOptions).setup_file) == DATAFLOW / "setup.py"
    (command,), _ = _dry_run(DATAFLOW / "submit_direct.sh", flags,
                             {**env, "SDK_CONTAINER_IMAGE": "europe-docker.pkg.dev/p/r/i:1"})
    _, beam = _parse_convert(command[2:])
    assert beam.view_as(SetupOptions).setup_file is None
    assert beam.view_as(WorkerOptions).sdk_container_image == "europe-docker.pkg.dev/p/r/i:1"


def test_run_flink_uses_a_local_job_server_jar(tmp_path):
    from apache_beam.options.pipeline_options import (
        FlinkRunnerOptions,
        PortableOptions,
        StandardOptions,
    )

    jar = tmp_path / "beam-runners-flink-1.20-job-server-2.77.0.jar"
    jar.write_bytes(b"PK")
    flags = ["--input", "gs://b/raw/*.csv", "--format", "csv", "--output", "gs://b/out"]
    env = {"FLINK_MASTER": "flink-jobmanager:8081", "FLINK_JOB_SERVER_JAR": str(jar),
           "ENVIRONMENT_TYPE": "DOCKER", "ENVIRONMENT_CONFIG": "europe-docker.pkg.dev/p/r/i:1"}
    (command,), _ = _dry_run(DEPLOY / "flink" / "run_flink.sh", flags, env)
    namespace, beam = _parse_convert(command[2:])
    assert namespace.output == "gs://b/out"
    flink = beam.view_as(FlinkRunnerOptions)
    assert beam.view_as(StandardOptions).runner == "FlinkRunner"
    assert flink.flink_master == "flink-jobmanager:8081"
    assert flink.flink_job_server_jar == str(jar)
    assert flink.flink_version in FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS
    portable = beam.view_as(PortableOptions)
    assert (portable.environment_type, portable.environment_config) == (
        "DOCKER", "europe-docker.pkg.dev/p/r/i:1")
    # Without a local jar the script refuses rather than letting Beam go to Maven.
    _, result = _dry_run(DEPLOY / "flink" / "run_flink.sh", flags,
                         {"FLINK_MASTER": "h:8081", "HOME": str(tmp_path)}, expect_rc=2)
    assert "ALLOW_JAR_DOWNLOAD" in result.stderr
    (command,), result = _dry_run(DEPLOY / "flink" / "run_flink.sh", flags,
                                  {"FLINK_MASTER": "h:8081", "HOME": str(tmp_path),
                                   "ALLOW_JAR_DOWNLOAD": "1"})
    assert "--flink_job_server_jar" not in command and "Maven" in result.stderr


def test_run_spark_uses_a_local_job_server_jar(tmp_path):
    from apache_beam.options.pipeline_options import (
        PortableOptions,
        SparkRunnerOptions,
        StandardOptions,
    )

    cache = tmp_path / ".apache_beam" / "cache" / "jars"
    cache.mkdir(parents=True)
    jar = cache / "beam-runners-spark-3-job-server-2.77.0.jar"
    jar.write_bytes(b"PK")
    flags = ["--input", "gs://b/raw/*.csv", "--format", "csv", "--output", "gs://b/out"]
    env = {"SPARK_MASTER_URL": "spark://spark-master:7077", "HOME": str(tmp_path)}
    (command,), _ = _dry_run(DEPLOY / "spark" / "run_spark.sh", flags, env)
    _, beam = _parse_convert(command[2:])
    spark = beam.view_as(SparkRunnerOptions)
    assert beam.view_as(StandardOptions).runner == "SparkRunner"
    assert spark.spark_master_url == "spark://spark-master:7077"
    assert spark.spark_job_server_jar == str(jar)
    assert beam.view_as(PortableOptions).environment_type == "LOOPBACK"
    _, result = _dry_run(DEPLOY / "spark" / "run_spark.sh", flags,
                         {**env, "SPARK_SUBMIT_UBER_JAR": "1"}, expect_rc=2)
    assert "SPARK_REST_URL" in result.stderr


def test_daily_wrapper_converts_yesterday_from_the_env_file():
    env_file = DEPLOY / "systemd" / "tfrecord-pipeline.env.example"
    (command,), _ = _dry_run(DEPLOY / "bin" / "tfrecord-daily.sh", ["--quiet"],
                             {"TFRECORD_ENV_FILE": str(env_file),
                              "TFRECORD_CLI": "/opt/venv/bin/tfrecord-pipeline"})
    assert command[:2] == ["/opt/venv/bin/tfrecord-pipeline", "convert"]
    namespace, _ = _parse_convert(command[2:])
    assert str(namespace.run_date) == _yesterday_utc()
    assert "{YYYY}/{MM}/{DD}" in namespace.input and "{YYYY}/{MM}/{DD}" in namespace.output
    assert namespace.compression == "gzip" and namespace.quiet is True
    (command,), _ = _dry_run(DEPLOY / "bin" / "tfrecord-daily.sh", [],
                             {"TFRECORD_ENV_FILE": str(env_file), "RUN_DATE": "2024-02-29"})
    assert str(_parse_convert(command[2:])[0].run_date) == "2024-02-29"
    _, result = _dry_run(DEPLOY / "bin" / "tfrecord-daily.sh", [], {}, expect_rc=2)
    assert "INPUT_GLOB is not set" in result.stderr


def test_daily_wrapper_run_twice_leaves_one_committed_output(tmp_path, capsys):
    """The scheduled command end to end (local runner): a second run is a no-op."""
    cli = Path(sys.executable).with_name("tfrecord-pipeline")
    assert cli.is_file(), "the project is not installed in this interpreter's environment"
    drop = tmp_path / "raw" / "2024" / "05" / "01"
    drop.mkdir(parents=True)
    (drop / "part-0.csv").write_text("id,score,label\n1,0.5,cat\n2,1.5,dog\n3,2.5,cat\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TFRECORD_CLI": str(cli),
           "INPUT_GLOB": str(tmp_path / "raw/{YYYY}/{MM}/{DD}/*.csv"), "INPUT_FORMAT": "csv",
           "OUTPUT_DIR": str(tmp_path / "out/{YYYY}/{MM}/{DD}"), "RUN_DATE": "2024-05-01",
           # the code under test, where the tests run from a checkout beside the installed one
           **{name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ}}
    wrapper = DEPLOY / "bin" / "tfrecord-daily.sh"
    first = subprocess.run(["bash", str(wrapper), "--quiet"], env=env, capture_output=True,
                           text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    output = tmp_path / "out" / "2024" / "05" / "01"
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["counts"]["input"] == 3 and manifest["counts"]["written"] == 3
    # Every file of the committed output is left as it was, and no lock file is made.
    before = {path.name: path.stat().st_mtime_ns for path in output.rglob("*")}
    assert LOCK_NAME not in before
    second = subprocess.run(["bash", str(wrapper), "--quiet"], env=env, capture_output=True,
                            text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert {path.name: path.stat().st_mtime_ns for path in output.rglob("*")} == before
    from pipeline.cli import EXIT_OK, run  # the scheduled runs were real processes; the check needs none

    assert run(["verify", str(output)]) == EXIT_OK, capsys.readouterr()


# ----------------------------------------------------------------------------- systemd / cron

def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False,
                                       comment_prefixes=("#", ";"))
    parser.optionxform = str
    parser.read_string(path.read_text())
    return parser


def _host_path_in_repo(path: str) -> Path:
    assert path.startswith(HOST_CHECKOUT), path
    return REPO / path[len(HOST_CHECKOUT):]


def test_systemd_service_and_timer():
    service = _unit(DEPLOY / "systemd" / "tfrecord-pipeline.service")
    assert {"Unit", "Service"} <= set(service.sections())
    assert service["Service"]["Type"] == "oneshot"
    exec_start = shlex.split(service["Service"]["ExecStart"])
    wrapper = _host_path_in_repo(exec_start[0])
    assert wrapper == DEPLOY / "bin" / "tfrecord-daily.sh"
    assert wrapper.stat().st_mode & stat.S_IXUSR
    namespace, _ = _parse_convert(["--input=x", "--format=csv", "--output=y", *exec_start[1:]])
    assert namespace.quiet is True
    assert service["Service"]["EnvironmentFile"].endswith("tfrecord-pipeline.env")
    timer = _unit(DEPLOY / "systemd" / "tfrecord-pipeline.timer")
    assert {"Unit", "Timer", "Install"} <= set(timer.sections())
    assert timer["Timer"]["Unit"] == "tfrecord-pipeline.service"
    assert re.fullmatch(r"\*-\*-\* \d\d:\d\d:\d\d UTC", timer["Timer"]["OnCalendar"])
    assert timer["Timer"]["Persistent"] == "true"
    assert timer["Install"]["WantedBy"] == "timers.target"


def test_systemd_environment_file_defines_the_wrapper_inputs():
    lines = [line for line in
             (DEPLOY / "systemd" / "tfrecord-pipeline.env.example").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    values = dict(line.split("=", 1) for line in lines)
    assert all(re.fullmatch(r"[A-Z_][A-Z0-9_]*", key) for key in values)
    assert {"INPUT_GLOB", "INPUT_FORMAT", "OUTPUT_DIR"} <= set(values)


def test_crontab_example():
    jobs, variables = [], {}
    for line in (DEPLOY / "cron" / "crontab.example").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", line):
            key, value = line.split("=", 1)
            variables[key] = value
            continue
        jobs.append(line)
    assert len(jobs) == 1
    fields = jobs[0].split(None, 5)
    assert _valid_cron(" ".join(fields[:5]))
    command = shlex.split(fields[5])
    assert command[:2] == ["flock", "-n"]
    assert _host_path_in_repo(command[3]) == DEPLOY / "bin" / "tfrecord-daily.sh"
    assert variables["SHELL"] == "/bin/bash" and "TFRECORD_ENV_FILE" in variables


# --------------------------------------------------------------------------------- Python lint

def test_deploy_python_files_compile():
    paths = sorted(DEPLOY.rglob("*.py"))
    assert paths, f"no Python file under {DEPLOY}"
    for path in paths:  # a SyntaxError fails the test, naming the file
        assert compile(path.read_text(), str(path), "exec").co_filename == str(path)


def test_daily_wrapper_keeps_one_growing_output_with_the_env_files_append_pattern(tmp_path):
    """The env template's second pattern (its commented block): one output, --append."""
    lines = (DEPLOY / "systemd" / "tfrecord-pipeline.env.example").read_text().splitlines()
    growing = [line[2:] for line in lines if re.match(r"# [A-Z_]+=", line)]
    base = [line for line in lines if line.strip() and not line.startswith("#")]
    env_file = tmp_path / "growing.env"
    growing = [line for line in growing if not line.startswith(("SPEC", "RUNNER"))]
    env_file.write_text("\n".join(base + growing))
    (command,), _ = _dry_run(DEPLOY / "bin" / "tfrecord-daily.sh", [], {"TFRECORD_ENV_FILE": str(env_file)})
    namespace, _ = _parse_convert(command[2:])
    assert namespace.append is True and "{" not in namespace.output and "{" not in namespace.input
