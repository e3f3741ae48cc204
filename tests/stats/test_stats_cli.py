"""stats.json through the CLI: equal to numpy on the source, the same whatever the bundle size
or the runner, dead-letter examples, image statistics and the summary table."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from tests.images import image_samples
from tests.stats import stats_samples as samples


def convert(folder, output, *extra) -> int:
    """A conversion whose dead letters are counted in the statistics: they are committed."""
    return run(["convert", "--input", str(folder / "*.csv"), "--format", "csv", "--spec",
                str(folder / "spec.yaml"), "--output", str(output), "--max-error-rate", "1", *extra,
                *in_memory_args()])


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    columns = samples.source_values()
    folder = samples.write_csv(tmp_path_factory.mktemp("stats") / "in", columns)
    return folder, columns


@pytest.fixture(scope="module")
def default_run(source, tmp_path_factory):
    """The source converted with the default options, not quiet: (output, what it printed).
    Read only: the statistics and the summary tests both check it."""
    folder, _ = source
    out = tmp_path_factory.mktemp("default") / "out"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = run(["convert", "--input", str(folder / "*.csv"), "--format", "csv", "--spec",
                    str(folder / "spec.yaml"), "--output", str(out),
                    "--direct_running_mode=in_memory", "--direct_num_workers=1"])
    assert code == 0
    return out, printed.getvalue()


def test_statistics_equal_numpy_on_the_source(source, default_run):
    _, columns = source
    samples.check_against_source(samples.read_stats(default_run[0]), columns)


def test_statistics_do_not_depend_on_the_batch_size(source, tmp_path):
    folder, columns = source
    assert convert(folder, tmp_path / "small", "--batch-rows", "37") == 0
    assert convert(folder, tmp_path / "large", "--batch-rows", "100000") == 0
    small, large = samples.read_stats(tmp_path / "small"), samples.read_stats(tmp_path / "large")
    samples.check_against_source(small, columns)
    samples.check_against_source(large, columns)
    assert samples.exact_part(small) == samples.exact_part(large)


def test_statistics_per_split_add_up_and_dead_letters_have_examples(tmp_path):
    columns = samples.source_values(rows=600)
    spec = samples.SPEC + "splits: {train: 70, test: 30}\nsplit_key: [id]\n"
    folder = samples.write_csv(tmp_path / "in", columns, spec=spec, bad_rows=4)
    assert convert(folder, tmp_path / "out", "--batch-rows", "50") == 0
    stats = samples.read_stats(tmp_path / "out")
    splits = stats["splits"]
    assert sorted(splits) == ["test", "train"]
    assert sum(s["records"] for s in splits.values()) == 600
    assert sum(s["features"]["id"]["records"] for s in splits.values()) == 600
    assert sum(s["features"]["city"]["bytes"]["count"] for s in splits.values()) == 600
    dead = stats["dead_letters"]
    assert dead["total"] == 12 and dead["by_reason"] == {"invalid_int": 12}
    examples = dead["examples"]["invalid_int"]
    assert len(examples) == 3
    assert all(e["source"].endswith(".csv") and isinstance(e["row"], int) and "x" in e["message"]
               for e in examples)


def test_image_statistics(tmp_path):
    root = tmp_path / "photos"
    files = {"cat/a.jpg": "jpeg_rgb", "cat/b.png": "png_palette_transparent",
             "dog/c.gif": "gif_animated", "dog/d.webp": "webp_alpha", "dog/e.jpg": "jpeg_rgb"}
    for relative, variant in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(image_samples.build(variant))
    (root / "dog" / "bad.jpg").write_bytes(b"not an image")
    assert run(["convert", "--input", str(root), "--format", "image-folder", "--output",
                str(tmp_path / "out"), "--max-error-rate", "1", *in_memory_args()]) == 0
    stats = samples.read_stats(tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    split = stats["splits"]["data"]
    assert split["records"] == 5
    images = split["images"]
    assert images["formats"] == {"gif": 1, "jpeg": 2, "png": 1, "webp": 1}
    assert images["labels"] == {"cat": 2, "dog": 3}
    assert sum(images["channels"].values()) == 5
    heights = [e["image/height"] for e in _image_sizes(tmp_path / "out", manifest)]
    assert (images["height"]["min"], images["height"]["max"]) == (min(heights), max(heights))
    assert images["height"]["count"] == 5 and images["width"]["count"] == 5
    encoded = split["features"]["image/encoded"]
    assert encoded["kind"] == "bytes" and encoded["bytes"]["distinct"] == 4  # two identical JPEGs
    assert encoded["bytes"]["top"] == []
    assert split["features"]["image/class/label"]["numeric"]["max"] == 1
    assert stats["dead_letters"]["by_reason"] == {"not_an_image": 1}
    assert stats["dead_letters"]["examples"]["not_an_image"][0]["source"].endswith("bad.jpg")


def _image_sizes(output, manifest):
    from transforms.format.example_codec import decode_example
    from transforms.tfrecord_io import read_tfrecord_file

    out = []
    for shard in manifest["shards"]:
        for record in read_tfrecord_file(os.path.join(output, shard["path"])):
            features = decode_example(record)
            out.append({name: features[name][1][0] for name in ("image/height", "image/width")})
    return out


def test_summary_has_a_short_feature_table(default_run):
    out = default_run[1]
    table = out[out.index("features ("):].splitlines()
    assert table[0].strip().startswith("features (3,000 records)")
    rows = {line.split()[0]: line for line in table[1:6]}
    assert set(rows) == {"city", "id", "note", "score", "tags"}
    assert "100.0%" in rows["id"] and "0 / 1,500 / 2,999" in rows["id"]
    assert "  7 distinct" in rows["city"]  # exact: no "~"


def test_many_features_are_cut_short_in_the_summary(tmp_path, capsys):
    names = [f"f{i:02d}" for i in range(20)]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "wide.csv").write_text(",".join(names) + "\n" + ",".join("1" for _ in names) + "\n")
    assert run(["convert", "--input", str(folder / "wide.csv"), "--format", "csv", "--output",
                str(tmp_path / "out"), "--direct_running_mode=in_memory"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("features ("):].splitlines()
    end = [line.strip() for line in table].index("8 more features in stats.json")
    assert end == 13  # the header, 12 features, the rest counted


@pytest.mark.slow
def test_dask_run_has_the_same_statistics(source, tmp_path, dask_address):
    folder, columns = source
    assert convert(folder, tmp_path / "local", "--batch-rows", "500") == 0
    assert run(["convert", "--input", str(folder / "*.csv"), "--format", "csv", "--spec",
                str(folder / "spec.yaml"), "--output", str(tmp_path / "dask"), "--batch-rows", "500",
                "--runner", "dask", "--dask_client_address", dask_address, "--quiet"]) == 0
    local, dask = samples.read_stats(tmp_path / "local"), samples.read_stats(tmp_path / "dask")
    samples.check_against_source(dask, columns)
    assert samples.exact_part(local) == samples.exact_part(dask)


def _feature_stats(output, name, split="data") -> dict:
    return samples.read_stats(output)["splits"][split]["features"][name]


@pytest.mark.parametrize("batch_rows", ["16384", "1"])
def test_the_empty_string_counts_as_a_distinct_value(tmp_path, batch_rows):
    # The HLL sketch skips ""; with one row per batch the batches' partials are merged, one
    # holding only "" and the next only "a".
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "data.csv").write_text('id,s\n1,""\n2,a\n3,""\n')
    (folder / "spec.yaml").write_text("features: [{name: id, type: int64}, {name: s, type: string}]\n")
    assert convert(folder, tmp_path / "out", "--batch-rows", batch_rows) == 0
    strings = _feature_stats(tmp_path / "out", "s")["bytes"]
    assert sorted(entry["value"] for entry in strings["top"]) == ["", "a"]
    assert strings["distinct"] == 2


def test_int64_quantiles_stay_within_min_max_near_the_int64_limit(tmp_path):
    top = 2**63 - 1
    (tmp_path / "data.jsonl").write_text(f'{{"v": {top}}}\n{{"v": {top - 1}}}\n{{"v": 0}}\n')
    assert run(["convert", "--input", str(tmp_path / "data.jsonl"), "--format", "jsonl",
                "--output", str(tmp_path / "out"), *in_memory_args()]) == 0
    numeric = _feature_stats(tmp_path / "out", "v")["numeric"]
    assert (numeric["min"], numeric["max"]) == (0, top)
    values = [value for _, value in numeric["quantiles"]]
    assert all(isinstance(value, int) and 0 <= value <= top for value in values), values
    assert values == sorted(values) and values[0] == 0 and values[-1] == top
