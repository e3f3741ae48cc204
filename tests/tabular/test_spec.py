"""The conversion spec: parsing, validation errors, YAML round trip, feature_spec.json."""

from __future__ import annotations

import json

import pytest
import yaml

from transforms.tabular.spec import (
    DEFAULT_MAX_BYTES_LENGTH,
    ConversionSpec,
    CsvOptions,
    FeatureSpec,
    SpecError,
    load_spec,
    parse_spec,
)

# The example of issue 3, verbatim.
ISSUE_SPEC = """\
features:
  - name: id
    type: int64
    required: true
  - name: age            # column defaults to the name
    type: int64
  - name: score
    column: score_raw
    type: float
    nan: reject          # allow | reject
  - name: name
    type: string
  - name: tags
    type: string
    list: true
    separator: "|"       # CSV cells only; JSON arrays / Parquet lists need none
  - name: weight
    type: float
    default: 1.0
include_unlisted: false
splits: {train: 80, validation: 10, test: 10}
split_key: [id]
csv: {delimiter: ",", quotechar: "\\"", header: true, encoding: utf-8}
"""


def test_issue_example_parses_to_the_documented_fields():
    spec = parse_spec(ISSUE_SPEC)
    assert [f.name for f in spec.features] == ["id", "age", "score", "name", "tags", "weight"]
    id_, age, score, name, tags, weight = spec.features
    assert (id_.type, id_.required, id_.source_column) == ("int64", True, "id")
    assert (age.type, age.required, age.default) == ("int64", False, None)
    assert (score.source_column, score.type, score.nan) == ("score_raw", "float", "reject")
    assert (name.type, name.kind) == ("string", "bytes")
    assert (tags.is_list, tags.separator) == (True, "|")
    assert weight.default == 1.0
    assert spec.include_unlisted is False
    assert spec.splits == (("train", 80), ("validation", 10), ("test", 10))
    assert spec.split_names == ("train", "validation", "test")
    assert spec.split_key == ("id",)
    assert spec.csv == CsvOptions(delimiter=",", quotechar='"', header=True, encoding="utf-8")
    assert spec.max_bytes_length == DEFAULT_MAX_BYTES_LENGTH == 10 * 1024 * 1024
    assert spec.source_columns == ("id", "age", "score_raw", "name", "tags", "weight")


def test_yaml_round_trip_is_equal():
    spec = parse_spec(ISSUE_SPEC)
    text = spec.to_yaml()
    assert parse_spec(text) == spec
    # The written YAML has the documented shape (keys, `list`, not Python names).
    data = yaml.safe_load(text)
    assert list(data) == ["features", "include_unlisted", "splits", "split_key", "csv",
                          "max_bytes_length"]
    assert data["features"][4] == {"name": "tags", "type": "string", "list": True,
                                   "separator": "|"}
    assert data["features"][2] == {"name": "score", "column": "score_raw", "type": "float",
                                   "nan": "reject", "missing": "mask"}


def test_minimal_spec_defaults():
    spec = parse_spec("features: [{name: x, type: bytes}]")
    assert spec.splits == () and spec.split_key == () and spec.include_unlisted is False
    assert spec.csv == CsvOptions()
    assert spec.csv.delimiter_for("csv") == "," and spec.csv.delimiter_for("tsv") == "\t"
    assert spec.features[0].nan == "allow"


def test_load_spec_from_file_and_text(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(ISSUE_SPEC)
    assert load_spec(str(path)) == parse_spec(ISSUE_SPEC)
    assert load_spec(ISSUE_SPEC) == parse_spec(ISSUE_SPEC)
    assert load_spec('{"features": [{"name": "a", "type": "int64"}]}').features[0].name == "a"
    with pytest.raises(SpecError, match="cannot read spec .*missing.yaml"):
        load_spec(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("features:\n  - name: a\n    type: int32\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: spec: feature 'a': 'type' must be one of"):
        load_spec(str(bad))


@pytest.mark.parametrize(
    "text, message",
    [
        ("features: [{name: a, type: int64}]\nfeature: []",
         r"spec: unknown key 'feature' \(did you mean 'features'\?\)"),
        ("features: [{name: a, type: int64, requried: true}]",
         r"feature 'a': unknown key 'requried' \(did you mean 'required'\?\)"),
        ("features: [{name: a, type: int32}]",
         r"feature 'a': 'type' must be one of int64, float, bytes, string, got 'int32'"),
        ("features: [{type: int64}]", r"features\[0\]\): missing 'name'"),
        ("features: [{name: a}]", r"feature 'a' \(features\[0\]\): missing 'type'"),
        ("features: [{name: a, type: int64}, {name: a, type: float}]",
         r"duplicate feature names \['a'\]"),
        ("features: [{name: a, type: string, separator: '|'}]",
         r"feature 'a': 'separator' is only valid with 'list: true'"),
        ("features: [{name: a, type: int64, nan: reject}]",
         r"feature 'a': 'nan' applies to float features only"),
        ("features: [{name: a, type: float, nan: drop}]",
         r"feature 'a': 'nan' must be allow or reject"),
        ("features: [{name: a, type: int64, required: true, default: 1}]",
         r"feature 'a': 'required' and 'default' exclude each other"),
        ("features: [{name: a, type: int64, default: 1.5}]",
         r"feature 'a': 'default' must be an integer"),
        ("features: [{name: a, type: int64, default: 9223372036854775808}]",
         r"feature 'a': 'default' 9223372036854775808 is outside int64"),
        ("features: [{name: a, type: string, default: 3}]",
         r"feature 'a': 'default' must be a string"),
        ("features: [{name: a, type: float, list: true, default: 1.0}]",
         r"feature 'a': 'default' of a list feature must be a list"),
        ("features: [{name: a, type: float, nan: reject, default: .nan}]",
         r"contradicts 'nan: reject'"),
        ("features: [{name: a, type: float, default: 1.0e+39}]",
         r"feature 'a': 'default' 1e\+39 is outside the float32 range"),
        ("features: [{name: a, type: float, default: -3.5e+38, nan: reject}]",
         r"feature 'a': 'default' -3.5e\+38 is outside the float32 range"),
        ("features: [{name: a, type: float, list: true, default: [1.0, 1.0e+39]}]",
         r"feature 'a': 'default' 1e\+39 is outside the float32 range"),
        ("features: [{name: a, type: int64, required: 'yes'}]",
         r"feature 'a': 'required' must be true or false"),
        ("features: [{name: 7, type: int64}]", r"'name' must be a non-empty string"),
        ("features: {a: int64}", r"'features' must be a list"),
        ("features: []", r"'features' is empty and 'include_unlisted' is false"),
        ("features: [{name: a, type: int64}]\nsplits: {train: 0}",
         r"split 'train' needs a positive weight"),
        ("features: [{name: a, type: int64}]\nsplits: {dead_letter: 1}",
         r"invalid split name 'dead_letter'"),
        ("features: [{name: a, type: int64}]\nsplits: [train]", r"'splits' must be a mapping"),
        ("features: [{name: a, type: int64}]\nsplit_key: [a]",
         r"'split_key' is given but 'splits' is not"),
        ("features: [{name: a, type: int64}]\ncsv: {delimiter: ';;'}",
         r"csv: 'delimiter' must be a single character"),
        ("features: [{name: a, type: int64}]\ncsv: {delimiter: '\"'}",
         r"csv: delimiter and quotechar must differ"),
        ("features: [{name: a, type: int64}]\ncsv: {header: false}",
         r"csv: 'header: false' needs 'column_names'"),
        ("features: [{name: a, type: int64}]\ncsv: {column_names: [a, a]}",
         r"csv: 'column_names' has duplicates"),
        ("features: [{name: a, type: int64}]\ncsv: {encoding: klingon}",
         r"csv: unknown encoding 'klingon'"),
        ("features: [{name: a, type: int64}]\ncsv: {sep: ','}", r"csv: unknown key 'sep'"),
        ("features: [{name: a, type: int64}]\nmax_bytes_length: 0",
         r"'max_bytes_length' must be a positive integer"),
        ("- a\n- b", r"expected a mapping at the top level, got list"),
        ("features: [", r"not valid YAML"),
    ],
)
def test_invalid_specs_name_the_offending_key(text, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(text)


def test_spec_error_is_a_value_error():
    assert issubclass(SpecError, ValueError)


def test_defaults_are_normalised():
    spec = parse_spec(
        "features:\n"
        "  - {name: w, type: float, default: 2}\n"
        "  - {name: t, type: string, list: true, separator: ',', default: [a, b]}\n"
        "  - {name: n, type: int64, list: true, separator: ',', default: []}\n"
    )
    w, t, n = spec.features
    assert w.default == 2.0 and isinstance(w.default, float)
    # The largest float32, and a float64 just above it that rounds down to it, are defaults.
    for text in ("3.4028235e+38", "3.4028235677973362e+38", "-3.4028235e+38", "1.0e-50"):
        assert parse_spec(f"features: [{{name: w, type: float, default: {text}}}]")
    # PyYAML (YAML 1.1) reads 1e-3 as a string; YAML 1.2 and JSON read a number.
    spec = parse_spec("features:\n  - {name: w, type: float, default: 1e-3}\n"
                      "  - {name: v, type: float, list: true, default: [2E+5, -.5e1]}\n")
    assert [f.default for f in spec.features] == [0.001, (200000.0, -5.0)]
    assert parse_spec(spec.to_yaml()) == spec
    with pytest.raises(SpecError, match=r"feature 'w': 'default' must be a number, got '1e'"):
        parse_spec("features: [{name: w, type: float, default: 1e}]")
    assert t.default == ("a", "b")
    assert n.default == ()
    assert parse_spec(spec.to_yaml()) == spec


def test_header_with_column_names_and_headerless():
    spec = parse_spec("features: [{name: a, type: int64}]\n"
                      "csv: {header: false, column_names: [a, b], delimiter: ';', quotechar: null}")
    assert spec.csv.header is False and spec.csv.column_names == ("a", "b")
    assert spec.csv.quotechar is None and spec.csv.delimiter_for("tsv") == ";"
    assert parse_spec(spec.to_yaml()) == spec


def test_feature_spec_json_kinds():
    spec = parse_spec(ISSUE_SPEC)
    doc = json.loads(spec.feature_spec_json())
    assert doc["version"] == 2
    masked = {"kind": "var_len", "default": None, "list": False, "missing": "mask"}
    assert doc["features"] == {
        # required scalar: always present -> fixed, no default
        "id": {"dtype": "int64", "kind": "fixed", "shape": [], "default": None},
        # optional scalar without default: missing: mask (absent on the wire -> var_len)
        "age": {"dtype": "int64", **masked},
        "score": {"dtype": "float32", **masked},
        "name": {"dtype": "string", **masked},
        # lists are var_len
        "tags": {"dtype": "string", "kind": "var_len", "default": None, "list": True},
        # scalar with default: always present (the default is written) -> fixed
        "weight": {"dtype": "float32", "kind": "fixed", "shape": [], "default": 1.0,
                   "missing": "default"},
    }
    assert spec.to_feature_spec() == doc


def test_missing_says_how_an_optional_scalar_reads_and_contradictions_are_refused():
    spec = parse_spec("features:\n  - {name: a, type: int64, missing: default}\n"
                      "  - {name: b, type: string}\n  - {name: c, type: float, default: 2.5}\n")
    assert [(f.missing, f.default) for f in spec.features] == [("default", 0), ("mask", None),
                                                                ("default", 2.5)]
    assert parse_spec(spec.to_yaml()) == spec
    for feature, message in [
            ("{name: a, type: int64, missing: maybe}", "'missing' must be default or mask"),
            ("{name: a, type: int64, missing: mask, default: 1}", "exclude each other"),
            ("{name: a, type: int64, list: true, missing: mask}", "optional scalar features only"),
            ("{name: a, type: int64, required: true, missing: mask}", "optional scalar features"),
            ("{name: a, type: int64, mising: mask}", "did you mean 'missing'"),
    ]:
        with pytest.raises(SpecError, match=message):
            parse_spec(f"features:\n  - {feature}\n")
    with pytest.raises(SpecError, match="'a/present' is the name readers give the mask of"):
        parse_spec("features: [{name: a, type: int64}, {name: a/present, type: int64}]")


def test_dataclasses_validate_when_built_in_python():
    with pytest.raises(SpecError, match="'type' must be one of"):
        FeatureSpec(name="a", type="text")
    spec = ConversionSpec(features=(FeatureSpec("a", "int64"),), splits={"train": 1, "test": 1},
                          split_key="a")
    assert spec.splits == (("train", 1), ("test", 1)) and spec.split_key == ("a",)
    assert spec.split_weights == {"train": 1, "test": 1}
    assert spec.feature("a").kind == "int64"
    with pytest.raises(KeyError):
        spec.feature("b")
    # include_unlisted alone is a valid spec (features are added when the job is planned).
    assert ConversionSpec(include_unlisted=True).features == ()
