"""What users of public data sets meet (R, pandas and spreadsheet exports), through the CLI:
missing-value tokens, R's unnamed row-name column, header-only files, TRUE/FALSE."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from pipeline.cli import run
from tests.helpers import in_memory_args
from transforms.reading.examples import read_examples
from transforms.tabular.spec import DEFAULT_MISSING_VALUES, SpecError, parse_spec


def _convert(tmp_path: pathlib.Path, csv_text: str, spec: str | None = None,
             name: str = "data.csv") -> tuple[int, pathlib.Path]:
    source, out = tmp_path / name, tmp_path / "out"
    source.write_text(csv_text)
    # Some cases are about their dead letters: the run commits them beside the records.
    argv = ["convert", "--input", str(source), "--format", "csv", "--output", str(out),
            "--max-error-rate", "1", *[a for a in in_memory_args() if a != "--quiet"]]
    if spec is not None:
        (tmp_path / "spec.yaml").write_text(spec)
        argv += ["--spec", str(tmp_path / "spec.yaml")]
    return run(argv), out


def _records(out: pathlib.Path) -> list[dict]:
    return list(read_examples(str(out), "data", as_numpy=False))


def _value(record: dict, name: str):
    """A masked scalar's value, None where it is not present."""
    return record[name] if record[f"{name}/present"] else None


def _dead_reasons(out: pathlib.Path) -> list[str]:
    return [json.loads(line)["reason"] for path in sorted((out / "dead_letter").glob("*.jsonl"))
            for line in path.read_text().splitlines()]


# R writes NA, spreadsheets #N/A, databases NULL; "NA" in a text column is Namibia.
PENGUINS = ("id,bill_length_mm,flipper,country,ok\n"
            "1,39.1,181,NA,TRUE\n"
            "2,NA,NA,DE,FALSE\n"
            "3,#N/A,N/A,NA,true\n"
            "4,NULL,195,FR,NA\n"
            "5,36.7,null,NA,False\n")


def test_missing_value_tokens_make_inferred_number_cells_missing_and_text_keeps_them(tmp_path, capsys):
    code, out = _convert(tmp_path, PENGUINS)
    assert code == 0
    assert capsys.readouterr().out.splitlines()[0] == f"Committed {out}/manifest.json"
    spec = yaml.safe_load((out / "spec.yaml").read_text())
    assert {f["name"]: f["type"] for f in spec["features"]} == {
        "id": "int64", "bill_length_mm": "float", "flipper": "int64", "country": "string",
        "ok": "int64"}
    assert spec["csv"]["missing_values"] == list(DEFAULT_MISSING_VALUES)
    rows = sorted(_records(out), key=lambda r: r["id"])
    # Optional scalars are masked (`missing: mask`): a value, or the type's zero and not present.
    assert [_value(r, "bill_length_mm") for r in rows] == [
        pytest.approx(39.1), None, None, None, pytest.approx(36.7)]
    assert [_value(r, "flipper") for r in rows] == [181, None, None, 195, None]
    assert [_value(r, "country") for r in rows] == [b"NA", b"DE", b"NA", b"FR", b"NA"]
    # CSV TRUE/FALSE (any case) are int64 1/0; NA among them is missing.
    assert [_value(r, "ok") for r in rows] == [1, 0, 1, None, 0]


def test_missing_value_tokens_in_a_given_spec(tmp_path, capsys):
    features = ("features:\n"
                "  - {name: bill, column: bill_length_mm, type: float}\n"
                "  - {name: flipper, type: int64, default: -1}\n"
                "  - {name: country, type: string, missing_values: [NA]}\n"
                "  - {name: id, type: int64, missing_values: ['3']}\n")
    code, out = _convert(tmp_path, PENGUINS, features)
    assert code == 0
    assert capsys.readouterr().out.splitlines()[0] == f"Committed {out}/manifest.json"
    rows = _records(out)
    assert len(rows) == 5 and not _dead_reasons(out)  # were 3 invalid_float dead letters
    assert sorted(r["flipper"] for r in rows) == [-1, -1, -1, 181, 195]  # a default: dense
    assert [_value(r, "bill") for r in rows].count(None) == 3
    assert sorted(_value(r, "country") for r in rows if _value(r, "country")) == [b"DE", b"FR"]
    assert sorted(_value(r, "id") for r in rows if _value(r, "id") is not None) == [1, 2, 4, 5]
    # A required feature's token is missing_required; `missing_values: []` restores strictness.
    (tmp_path / "out2").mkdir()
    code, out = _convert(tmp_path / "out2", PENGUINS, features + "csv: {missing_values: []}\n")
    assert code == 0
    assert sorted(_dead_reasons(out)) == ["invalid_float"] * 3 + ["invalid_int"]
    required = features.replace("type: float}", "type: float, required: true}")
    (tmp_path / "out3").mkdir()
    code, out = _convert(tmp_path / "out3", PENGUINS, required)
    assert code == 0
    assert _dead_reasons(out) == ["missing_required"] * 3
    assert sorted(r["bill"] for r in _records(out)) == pytest.approx([36.7, 39.1])


def test_missing_values_in_the_spec_are_checked():
    spec = parse_spec("features: [{name: a, type: int64, missing_values: [-999, NA]}]\n"
                      "csv: {missing_values: ['NULL']}")
    assert spec.features[0].missing_values == ("-999", "NA")
    assert spec.csv.missing_values == ("NULL",)
    assert parse_spec(spec.to_yaml()) == spec
    with pytest.raises(SpecError, match="did you mean 'missing_values'"):
        parse_spec("features: [{name: a, type: int64, missing_value: [NA]}]")
    with pytest.raises(SpecError, match="csv: unknown key 'na_values'"):
        parse_spec("features: [{name: a, type: int64}]\ncsv: {na_values: [NA]}")
    with pytest.raises(SpecError, match=r"feature 'a': 'missing_values' holds None: .*quoted"):
        parse_spec("features: [{name: a, type: int64, missing_values: [null]}]")
    with pytest.raises(SpecError, match="'missing_values' must be a list"):
        parse_spec("features: [{name: a, type: int64}]\ncsv: {missing_values: NA}")


# write.csv of an R data frame: the row names are a first column without a header name.
MTCARS = '"","mpg","cyl"\n"Mazda RX4",21,6\n"Datsun 710",22.8,4\n"Valiant",18.1,6\n'


def test_a_column_without_a_header_name_is_kept_as_column_n(tmp_path, capsys):
    code, out = _convert(tmp_path, MTCARS)
    assert code == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == f"Committed {out}/manifest.json"
    assert "without a name" not in captured.err
    spec = yaml.safe_load((out / "spec.yaml").read_text())
    assert [f["name"] for f in spec["features"]] == ["column_1", "mpg", "cyl"]
    assert sorted(r["column_1"] for r in _records(out)) == [b"Datsun 710", b"Mazda RX4",
                                                                b"Valiant"]
    # A spec renames it with `column:`, and leaves it out by not listing it.
    (tmp_path / "named").mkdir()
    code, out = _convert(tmp_path / "named", MTCARS, "features:\n"
                         "  - {name: model, column: column_1, type: string, required: true}\n"
                         "  - {name: mpg, type: float}\n")
    assert code == 0
    rows = {r["model"]: r for r in _records(out)}
    assert set(rows) == {b"Mazda RX4", b"Datsun 710", b"Valiant"}
    assert rows[b"Datsun 710"]["mpg"] == pytest.approx(22.8) and "cyl" not in rows[b"Valiant"]


HEADERS = ["a,b\n", "a,b", "a,b\r\n"]


@pytest.mark.parametrize("header", HEADERS)
def test_a_header_only_csv_says_it_has_no_data_rows(tmp_path, capsys, header):
    """Also when the header line is not ended (Arrow then saw an empty file)."""
    code, out = _convert(tmp_path, header, name="empty.csv")
    assert code == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(f"tfrecord-pipeline convert: error: {tmp_path}/empty.csv has no data "
                            f"rows: ")
    assert "--spec" in first and "first 0 rows" not in first
    assert not out.exists()


def test_header_only_csvs_with_a_spec_commit_the_empty_output(tmp_path, capsys):
    """With a spec there is nothing to infer: the empty output is committed, for each header
    ending (the three files converted in one run), and no file is a dead letter."""
    source, out = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    for k, header in enumerate(HEADERS):
        (source / f"empty{k}.csv").write_text(header)
    (tmp_path / "spec.yaml").write_text("features: [{name: a, type: int64}]\n")
    code = run(["convert", "--input", str(source), "--format", "csv", "--output", str(out),
                "--spec", str(tmp_path / "spec.yaml"),
                *[a for a in in_memory_args() if a != "--quiet"]])
    assert code == 0
    assert capsys.readouterr().out.splitlines()[0] == f"Committed {out}/manifest.json"
    assert _records(out) == []
    assert not (out / "dead_letter").exists()
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert (counts["input"], counts["written"], counts["dead_letter"]) == (0, 0, 0)
