"""The report of real outputs: written by every conversion (and only warned about when it
cannot be), rebuilt by `tfrecord-pipeline report`, with statistics and drift when present,
contact sheets from image shards, bounded dead-letter sampling, and gs:// outputs."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from apache_beam.io.filesystems import FileSystems
from PIL import Image

from pipeline.cli import run
from tests.helpers import in_memory_args
from tests.report.fixtures import DRIFT, SAMPLE, convert_images, convert_tabular, write_drift
from transforms.format.manifest_format import Counts, Manifest, ShardEntry
from transforms.manifest import read_manifest
from transforms.report.build import REPORT_NAME, build_report, write_report
from transforms.report.collect import collect_report_data
from transforms.report.dead_letters import sample_dead_letters
from transforms.report.thumbnails import contact_sheets


@pytest.fixture(scope="module")
def tabular_run(tmp_path_factory) -> tuple[Path, str]:
    """The sample tables converted (gzip), not quiet: (output, what it printed). Read only."""
    out = tmp_path_factory.mktemp("tabular") / "out"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert run(["convert", "--input", str(SAMPLE / "tabular" / "*.csv"), "--format", "csv",
                    "--spec", str(SAMPLE / "tabular" / "customers.spec.yaml"), "--output", str(out),
                    "--compression", "gzip", "--direct_running_mode=in_memory",
                    "--direct_num_workers=1"]) == 0
    return out, printed.getvalue()


@pytest.fixture(scope="module")
def tabular(tabular_run) -> Path:
    return tabular_run[0]


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    return convert_images(tmp_path_factory.mktemp("images"))


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(source, target)
    return target


def test_convert_writes_the_report_beside_the_shards_unlisted_and_verify_still_passes(tabular):
    page = (tabular / REPORT_NAME).read_text()
    assert page.startswith("<!DOCTYPE html>")
    manifest = read_manifest(str(tabular))
    assert manifest.side_file(REPORT_NAME) is None  # derived, rebuildable: not part of the commit
    for split in ("train", "validation", "test"):
        assert f"<td>{split}</td>" in page
    assert "pipeline/sample_data/tabular/*.csv" in page  # the input, from the manifest's options
    stats = json.loads((tabular / "stats.json").read_text())
    features = sum(len(split["features"]) for split in stats["splits"].values())
    assert page.count('<svg class="spark"') == features  # one small histogram per feature and split
    assert "median" in page and "distinct" in page and "top:" in page and "no stats.json" not in page
    assert run(["verify", str(tabular)]) == 0


def test_without_stats_json_the_features_come_from_the_feature_spec(tabular, tmp_path):
    out = _copy(tabular, tmp_path)
    (out / "stats.json").unlink()
    page = build_report(str(out))
    assert "no stats.json" in page and "<code>customer_id</code>" in page and "98.3%" in page
    assert '<svg class="spark"' not in page and 'id="overview"' in page


def test_convert_prints_where_the_report_is(tabular_run):
    out, printed = tabular_run
    assert printed.strip().splitlines()[-1] == f"  report: {out}/{REPORT_NAME}"


def test_a_report_that_cannot_be_written_is_a_warning_not_a_failed_conversion(tmp_path, monkeypatch, caplog):
    def broken(output_dir, destination=None):
        raise OSError("disk full")

    monkeypatch.setattr("pipeline.report.write_report", broken)
    with caplog.at_level(logging.WARNING, logger="tfrecord_pipeline"):
        out = convert_tabular(tmp_path / "out")
    assert not (out / REPORT_NAME).exists() and read_manifest(str(out)) is not None
    assert "report.html could not be written (OSError: disk full)" in caplog.text


def test_the_report_command_rebuilds_it_and_prints_one_line(tabular, tmp_path, capsys):
    target = tmp_path / "elsewhere" / "r.html"
    assert run(["report", str(tabular), "--output", str(target)]) == 0
    assert capsys.readouterr().out == f"wrote {target}\n"
    assert target.read_text() == (tabular / REPORT_NAME).read_text()  # deterministic


def test_the_report_command_on_a_folder_without_manifest_is_a_usage_error(tmp_path, capsys):
    assert run(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "has no manifest.json" in err and "hint:" in err
    assert not (tmp_path / REPORT_NAME).exists()


def test_the_report_command_refuses_an_output_that_is_a_folder_up_front(tabular, tmp_path, capsys):
    folder = tmp_path / "reports"
    folder.mkdir()
    assert run(["report", str(tabular), "--output", str(folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"tfrecord-pipeline report: error: --output {folder} is a folder; give the HTML file to "
        f"write (e.g. {folder / REPORT_NAME})"]
    assert list(tmp_path.iterdir()) == [folder] and not list(folder.iterdir())


def test_a_failed_report_write_leaves_no_partial_file(tabular, tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):  # the final rename onto a folder fails
        write_report(str(tabular), str(folder))
    assert list(tmp_path.iterdir()) == [folder]


def test_a_malformed_manifest_is_one_line_as_for_the_other_malformed_manifests(tabular, tmp_path, capsys):
    """Exit 4 (corrupt data, as verify, inspect and index say) and one line naming the
    manifest, for dead letters by reason that are not a mapping (were exit 1,
    AttributeError) as for counts that are not counts."""
    for counts in ({"dead_letter_reasons": ["missing_required"]}, {"written": -1}):
        out = _copy(tabular, tmp_path / str(len(counts)) / next(iter(counts)))
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["counts"].update(counts)
        (out / "manifest.json").write_text(json.dumps(manifest))
        assert run(["report", str(out)]) == 4
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and f"{out / 'manifest.json'}: manifest is malformed" in err[0], err


def test_a_non_utf8_input_file_name_is_shown_escaped_not_a_failed_report(tmp_path, capsys):
    source = os.fsdecode(bytes(tmp_path) + b"/f\xe9.csv")  # \udce9 in the name Python gives
    shutil.copy(SAMPLE / "tabular" / "customers.csv", source)
    out = tmp_path / "out"
    assert run(["convert", "--input", source, "--format", "csv", "--output", str(out),
                *in_memory_args()]) == 0
    page = (out / REPORT_NAME).read_text(encoding="utf-8")  # written by the conversion
    assert f"<code>{tmp_path}/f\\xe9.csv</code>" in page
    (out / REPORT_NAME).unlink()
    capsys.readouterr()
    assert run(["report", str(out)]) == 0
    assert capsys.readouterr().err == ""
    assert (out / REPORT_NAME).read_text(encoding="utf-8") == page


def test_a_sequence_output_shows_its_features_and_counts_that_reconcile(tmp_path):
    """stats.json of SequenceExamples has no feature statistics: the features come from
    feature_spec.json (context and sequence parts); the counts add up in rows, as the
    manifest's do (input = written_rows + dead_letter), beside the sequences written."""
    (tmp_path / "a.csv").write_text("user,country,ts,item\nu1,de,1,a\nu1,de,2,b\n,de,3,c\n"
                                    "u2,fr,,d\nu2,fr,1,e\nu3,it,1,f\n")
    (tmp_path / "spec.yaml").write_text(
        "features:\n  - {name: user, type: string}\n  - {name: country, type: string}\n"
        "  - {name: ts, type: int64}\n  - {name: item, type: string}\n"
        "sequence: {group_by: user, order_by: ts, context: [user, country]}\n")
    out = tmp_path / "out"
    assert run(["convert", "--input", str(tmp_path / "a.csv"), "--format", "csv", "--spec",
                str(tmp_path / "spec.yaml"), "--output", str(out), "--max-error-rate", "1",
                *in_memory_args()]) == 0
    counts = read_manifest(str(out)).counts
    assert (counts.input, counts.written_rows, counts.dead_letter, counts.written) == (6, 4, 2, 3)
    page = (out / REPORT_NAME).read_text()
    overview = page[page.index('id="overview"'):page.index('id="dead-letters"')]
    for title, value in (("rows read", 6), ("rows written", 4), ("dead-lettered rows", 2),
                         ("sequences written", 3)):
        assert f'<div class="card">{title}<b>{value}</b></div>' in overview, title
    assert "<th>sequences</th><th>rows</th>" in overview
    assert "<td>data</td><td>3</td><td>4</td><td>2</td>" in overview
    features = page[page.index('id="features"'):]
    assert "No features." not in features
    for name in ("context:user", "context:country", "sequence:ts", "sequence:item"):
        assert f"<code>{name}</code>" in features, name


def test_drift_is_shown_when_present(tabular, tmp_path):
    out = _copy(tabular, tmp_path)
    write_drift(out)
    drift = build_report(str(out))
    drift = drift[drift.index('id="drift"'):]
    assert DRIFT["compared_to"] in drift and drift.count(">drifted<") == 1 and "kind_changed" in drift


def test_a_conversion_compared_to_the_previous_one_reports_its_drift(tabular, tmp_path):
    out = convert_tabular(tmp_path / "again", "--compare-to", str(tabular))
    assert (out / "drift.json").exists()
    page = (out / REPORT_NAME).read_text()
    assert 'id="drift"' in page and str(tabular) in page


def test_a_malformed_stats_file_is_left_out_with_a_note(tabular, tmp_path):
    out = _copy(tabular, tmp_path)
    (out / "stats.json").write_text('{"schema_version": 99, "splits": {}}')
    (out / "drift.json").write_text("not json")
    data = collect_report_data(str(out))
    assert data.stats is None and data.drift is None
    assert any("schema_version 99" in note for note in data.notes)
    assert any(note.startswith("drift.json could not be read") for note in data.notes)


def _thumbnail_image(uri: str) -> Image.Image:
    assert uri.startswith("data:image/jpeg;base64,")
    return Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))


def test_image_outputs_get_a_contact_sheet_per_label_and_the_dead_lettered_images(images):
    data = collect_report_data(str(images))
    assert data.is_image_output and data.labels == ["cat", "coffee", "person"]
    assert [sheet.label for sheet in data.contact_sheets] == ["cat", "coffee", "person"]
    for sheet in data.contact_sheets:
        assert len(sheet.thumbnails) == 2
        for thumbnail in sheet.thumbnails:
            assert thumbnail.caption.startswith(sheet.label + "/") and thumbnail.problem is None
            assert max(_thumbnail_image(thumbnail.data_uri).size) == 96
    page = (images / REPORT_NAME).read_text()
    assert page.count("<img ") == 6 and 'id="contact-sheets"' in page
    tail = page[page.index("Dead-lettered images"):]
    assert "not_an_image" in tail and "cat/bad.jpg" in tail and "truncated_image" in tail


def test_the_sample_is_bounded_per_label_and_in_labels(images):
    manifest = read_manifest(str(images))
    one_each = contact_sheets(str(images), manifest, manifest.metadata["labels"], per_label=1)
    assert [len(sheet.thumbnails) for sheet in one_each] == [1, 1, 1]
    assert [sheet.label for sheet in contact_sheets(str(images), manifest, manifest.metadata["labels"],
                                                    max_labels=2)] == ["cat", "coffee"]
    unlabelled = contact_sheets(str(images), manifest, None, max_labels=1)  # labels as met
    assert len(unlabelled) == 1 and len(unlabelled[0].thumbnails) == 2


def test_a_corrupt_shard_leaves_the_other_sheets_and_the_report(images, tmp_path):
    out = _copy(images, tmp_path)
    shards = [out / shard.path for shard in read_manifest(str(out)).shards]
    def thumbnails():
        return sum(len(sheet.thumbnails) for sheet in collect_report_data(str(out)).contact_sheets)
    whole = thumbnails()
    assert len(shards) > 1 and whole > 0
    shards[0].write_bytes(shards[0].read_bytes()[:100])
    assert 0 < thumbnails() < whole  # the other shards' images are still sampled
    for shard in shards[1:]:
        shard.write_bytes(shard.read_bytes()[:100])
    assert collect_report_data(str(out)).contact_sheets == []
    assert "No image could be sampled" in build_report(str(out))


def _dead_letter_output(tmp_path: Path, lines: list[str], reasons: dict) -> tuple[Path, Manifest]:
    (tmp_path / "dead_letter").mkdir()
    (tmp_path / "dead_letter" / "dead_letter-00000-of-00001.jsonl").write_text("\n".join(lines) + "\n")
    letters = ShardEntry("dead_letter/dead_letter-00000-of-00001.jsonl", len(lines), 0, "")
    total = sum(reasons.values())
    return tmp_path, Manifest((), Counts(total, 0, total, dead_letter_reasons=reasons), "none", (letters,))


def test_dead_letters_are_sampled_per_reason_without_raw_and_skipping_huge_lines(tmp_path, monkeypatch):
    monkeypatch.setattr("transforms.report.dead_letters.MAX_LINE_BYTES", 2000)
    letter = {"source": "a.csv", "row": 1, "reason": "wrong_type", "message": "m", "raw": "x,y"}
    huge = dict(letter, reason="value_too_long", raw="z" * 10_000)
    lines = [json.dumps(huge)] + [json.dumps(dict(letter, row=row)) for row in range(10)] + ["not json"]
    folder, manifest = _dead_letter_output(tmp_path, lines, {"wrong_type": 10, "value_too_long": 1})
    sample = sample_dead_letters(str(folder), manifest, per_reason=3)
    assert [example["row"] for example in sample.by_reason["wrong_type"]] == [0, 1, 2]
    assert "raw" not in sample.by_reason["wrong_type"][0]
    assert "value_too_long" not in sample.by_reason and sample.complete


def test_dead_letter_sampling_stops_at_its_byte_budget(tmp_path, monkeypatch):
    monkeypatch.setattr("transforms.report.dead_letters.MAX_SCAN_BYTES", 500)
    lines = [json.dumps({"source": "a.csv", "row": row, "reason": "r", "message": "m"}) for row in range(100)]
    folder, manifest = _dead_letter_output(tmp_path, lines, {"r": 100, "rare": 1})
    sample = sample_dead_letters(str(folder), manifest, per_reason=3)
    assert not sample.complete and len(sample.by_reason["r"]) == 3


def _upload(local: Path, remote: str) -> None:
    for path in sorted(local.rglob("*")):
        if path.is_file():
            with FileSystems.create(f"{remote}/{path.relative_to(local).as_posix()}") as handle:
                handle.write(path.read_bytes())


def test_a_gs_output_gets_its_report_on_gs(images, gcs_emulator):
    remote = f"{gcs_emulator}/run"
    _upload(images, remote)
    FileSystems.delete([f"{remote}/{REPORT_NAME}"])
    assert write_report(remote) == f"{remote}/{REPORT_NAME}"
    with FileSystems.open(f"{remote}/{REPORT_NAME}") as handle:
        page = handle.read().decode()
    assert page.count("<img ") == 6 and "not_an_image" in page
