"""The command line is strict: a flag it does not know, a value that does not parse or a stray
argument is a usage error (exit 2) of one line plus a hint, before anything is read."""

from __future__ import annotations

import pathlib

import pytest

import pipeline
from pipeline.cli import run
from pipeline.options import ConvertOptions, RaisingParser, output_options

SAMPLE = pathlib.Path(pipeline.__file__).parent / "sample_data" / "tabular"


def _convert(tmp_path, *extra: str) -> list[str]:
    return ["convert", "--input", str(SAMPLE / "*.csv"), "--format", "csv",
            "--spec", str(SAMPLE / "customers.spec.yaml"), "--output", str(tmp_path / "out"),
            "--direct_running_mode=in_memory", "--quiet", *extra]


@pytest.mark.parametrize("flag, suggestion", [
    (["--compresion", "gzip"], "--compression"),
    (["--num-shard", "3"], "--num-shards"),
    (["--max-shard-size", "3MB"], "--max-shard-bytes"),
    (["--max_shard_record=5"], "--max_shard_records"),
])
def test_a_misspelled_flag_is_a_usage_error_with_a_suggestion(tmp_path, capsys, flag, suggestion):
    assert run(_convert(tmp_path, *flag)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == (f"tfrecord-pipeline convert: error: unknown flag {flag[0].split('=')[0]} "
                        f"(did you mean {suggestion}?)")
    assert lines[1].startswith("hint: ") and len(lines) == 2
    assert not (tmp_path / "out").exists()


def test_an_unquoted_glob_expanded_by_the_shell_is_refused(tmp_path, capsys):
    files = []
    for name in ("a.csv", "b.csv", "c.csv"):
        (tmp_path / name).write_text("x\n1\n")
        files.append(str(tmp_path / name))
    argv = ["convert", "--input", *files, "--format", "csv", "--output", str(tmp_path / "out")]
    assert run(argv) == 2
    first, hint = capsys.readouterr().err.strip().splitlines()
    assert first.startswith(f"tfrecord-pipeline convert: error: unexpected argument {files[1]!r}")
    assert "quote" in hint and not (tmp_path / "out").exists()


def test_a_value_that_does_not_parse_is_one_line(tmp_path, capsys):
    assert run(_convert(tmp_path, "--num-shards", "x")) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "--num-shards" in lines[0] and "'x'" in lines[0]


def test_beams_own_options_stay_accepted(tmp_path):
    assert run(_convert(tmp_path, "--direct_num_workers=1", "--job_name", "x",
                        "--temp_location", str(tmp_path))) == 0


@pytest.mark.parametrize("spelling", ["--dry-run", "--dry_run"])
def test_both_spellings_of_dry_run_are_ours(tmp_path, capsys, spelling):
    assert run(_convert(tmp_path, spelling)) == 0
    assert '"spec"' in capsys.readouterr().out  # the plan summary, nothing written
    assert not (tmp_path / "out").exists()


def test_every_flag_has_its_underscore_spelling():
    parser = RaisingParser(add_help=False)
    ConvertOptions._add_argparse_args(parser)
    for action in parser._actions:
        hyphenated = [s for s in action.option_strings if "-" in s[2:]]
        for spelling in hyphenated:
            if spelling != "--dry-run":  # Beam owns that spelling's registration; see normalize_argv
                assert spelling.replace("-", "_")[0:2] == "__"
                assert "--" + spelling[2:].replace("-", "_") in action.option_strings


def test_an_unknown_subcommand_is_one_line(capsys):
    assert run(["verfy", "x"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "invalid choice: 'verfy'" in lines[0]


def test_the_output_affecting_flags_are_marked_where_they_are_defined():
    marked = set(output_options())
    assert {"format", "compression", "num_shards", "resize", "max_pixels"} <= marked
    assert not marked & {"input", "output", "quiet", "overwrite", "log_level", "run_date",
                         "converter_processes", "converter_threads", "no_wait"}
