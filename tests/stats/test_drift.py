"""drift.json and --fail-on-drift through the CLI: an injected type change, a dropped column, a
halved presence and a shifted mean are found, an unchanged re-run is not; schema drift under
--fail-on-drift exits 6 committing dead letters only; date-templated runs compare with the
previous day by themselves."""

from __future__ import annotations

import json

import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from tests.stats import stats_samples as samples
from transforms.stats.drift import population_stability_index


def base_columns(rows: int = 2000) -> dict:
    columns = samples.source_values(rows=rows)
    columns["note"] = [f"note {i % 300}" for i in range(rows)]  # present in every record
    columns.pop("tags")
    return columns


def convert(folder, output, *extra) -> int:
    # No --spec: the types are inferred, as a scheduled run over changing data would.
    return run(["convert", "--input", str(folder / "*.csv"), "--format", "csv", "--output",
                str(output), *extra, *in_memory_args()])


def drift_of(output) -> dict:
    manifest = json.loads((output / "manifest.json").read_text())
    assert "drift.json" in manifest["files"]
    return json.loads((output / "drift.json").read_text())


@pytest.fixture(scope="module")
def previous(tmp_path_factory):
    root = tmp_path_factory.mktemp("drift")
    folder = samples.write_csv(root / "in", base_columns(), spec=None)
    assert convert(folder, root / "out") == 0
    return root / "out"


def _changed(tmp_path, previous, change) -> dict:
    columns = base_columns()
    change(columns)
    folder = samples.write_csv(tmp_path / "in", columns, spec=None)
    assert convert(folder, tmp_path / "out", "--compare-to", str(previous)) == 0
    return drift_of(tmp_path / "out")


def test_an_unchanged_rerun_has_no_drift(tmp_path, previous):
    drift = _changed(tmp_path, previous, lambda columns: None)
    assert drift["compared_to"] == str(previous)
    assert not drift["schema_drift"] and not drift["distribution_drift"]
    assert drift["schema"] == drift["presence"] == drift["distribution"] == []


def test_a_type_change_is_schema_drift(tmp_path, previous):
    def to_text(columns):
        columns["score"] = [f"v{value}" for value in columns["score"]]

    drift = _changed(tmp_path, previous, to_text)
    assert drift["schema_drift"]
    assert drift["schema"] == [{"split": "data", "feature": "score", "change": "kind_changed",
                                "previous": "float", "current": "bytes"}]


def test_a_dropped_column_is_schema_drift(tmp_path, previous):
    drift = _changed(tmp_path, previous, lambda columns: columns.pop("city"))
    assert drift["schema"] == [{"split": "data", "feature": "city", "change": "missing",
                                "previous": "bytes", "current": None}]
    assert not drift["distribution_drift"]


def test_a_halved_presence_is_distribution_drift(tmp_path, previous):
    def halve(columns):
        columns["note"] = [value if i % 2 else None for i, value in enumerate(columns["note"])]

    drift = _changed(tmp_path, previous, halve)
    assert not drift["schema_drift"] and drift["distribution_drift"]
    assert drift["presence"] == [{"split": "data", "feature": "note", "previous": 1.0, "current": 0.5}]


@pytest.fixture(scope="module")
def shifted(tmp_path_factory, previous):
    """Scores shifted by 3, converted with --fail-on-drift schema: distribution drift only, so the
    run commits (read only: two tests check it)."""
    root = tmp_path_factory.mktemp("shifted")
    columns = base_columns()
    columns["score"] = [repr(float(value) + 3.0) for value in columns["score"]]
    folder = samples.write_csv(root / "in", columns, spec=None)
    assert convert(folder, root / "schema", "--compare-to", str(previous), "--fail-on-drift", "schema") == 0
    return folder, root / "schema"


def test_a_shifted_mean_is_distribution_drift(shifted):
    drift = drift_of(shifted[1])
    assert not drift["schema_drift"] and drift["distribution_drift"]
    assert [(d["feature"], d["psi"] > 0.2) for d in drift["distribution"]] == [("score", True)]
    assert drift["presence"] == []


def test_fail_on_drift_schema_exits_6_and_commits_no_shard(tmp_path, previous, capsys):
    columns = base_columns()
    columns.pop("city")
    folder = samples.write_csv(tmp_path / "in", columns, spec=None)
    with open(folder / "part-0.csv", "a", encoding="utf-8") as handle:
        handle.write("1,2\n")  # a ragged row: one dead letter, committed as the failure's record
    out = tmp_path / "out"
    code = convert(folder, out, "--compare-to", str(previous), "--fail-on-drift", "schema",
                   "--max-error-rate", "1")
    assert code == 6
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "schema drift" in err[0] and "'city' missing" in err[0]
    assert not (out / "manifest.json").exists()
    assert not list(out.glob("*.tfrecord*"))
    failed = json.loads((out / "dead_letter" / "failed_run.json").read_text())
    assert failed["outcome"] == "drift_detected"
    assert failed["drift"]["schema"][0]["feature"] == "city"
    assert failed["files"] and all((out / name).exists() for name in failed["files"])


def test_fail_on_drift_distribution_also_fails_on_a_shift(tmp_path, previous, shifted, capsys):
    folder, schema_only = shifted
    assert (schema_only / "manifest.json").exists()  # --fail-on-drift schema let the shift commit
    assert convert(folder, tmp_path / "dist", "--compare-to", str(previous),
                   "--fail-on-drift", "distribution") == 6
    assert "distribution drift" in capsys.readouterr().err
    assert not (tmp_path / "dist" / "manifest.json").exists()


def test_compare_to_a_folder_without_statistics_is_a_usage_error(tmp_path, capsys):
    folder = samples.write_csv(tmp_path / "in", base_columns(100), spec=None)
    assert convert(folder, tmp_path / "out", "--compare-to", str(tmp_path / "nothing")) == 2
    assert "--compare-to" in capsys.readouterr().err


def test_a_date_templated_run_compares_with_the_previous_day(tmp_path, capsys):
    folder = samples.write_csv(tmp_path / "in", base_columns(300), spec=None)
    template = str(tmp_path / "daily" / "{YYYY}-{MM}-{DD}")
    assert convert(folder, template, "--run-date", "2024-05-01") == 0
    assert not (tmp_path / "daily" / "2024-05-01" / "drift.json").exists()
    assert run(["convert", "--input", str(folder / "*.csv"), "--format", "csv", "--output",
                template, "--run-date", "2024-05-02", "--direct_running_mode=in_memory"]) == 0
    drift = drift_of(tmp_path / "daily" / "2024-05-02")
    assert drift["compared_to"] == str(tmp_path / "daily" / "2024-05-01")
    assert not drift["schema_drift"] and not drift["distribution_drift"]
    assert "drift: none against" in capsys.readouterr().out


def test_psi_is_zero_for_equal_quantiles_and_grows_with_a_shift():
    ranks = (0.0, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 1.0)
    base = [[r, v] for r, v in zip(ranks, (0, 1, 2, 4, 5, 6, 8, 9, 10), strict=True)]
    assert population_stability_index(base, base) == 0.0
    shifted = [[r, v + 1] for r, v in base]
    far = [[r, v + 5] for r, v in base]
    small, large = population_stability_index(base, shifted), population_stability_index(base, far)
    assert 0 < small < large and large > 0.2
    ties = [[r, 0 if r <= 0.5 else 1] for r in ranks]  # a 0/1 feature
    assert population_stability_index(ties, ties) == 0.0
