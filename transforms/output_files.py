"""Which files in an output folder this tool wrote, so that it never deletes one it did not.

A file in `DIR` is the tool's own when one of these records names it:
  - the committed `manifest.json` (shards, their index sidecars, dead-letter files, side files,
    the previous generation's files it keeps as `superseded`, and `report.html`, which is
    derived from the output and so not listed);
  - `dead_letter/failed_run.json`, which a run that committed only its dead letters (exit 3,
    5 or 6) writes beside them;
  - the commit journal `DIR/.tmp-<run id>/commit-journal.json` of a run killed while it
    committed: written before the commit changes anything, it names every final file that
    commit may create or replace.

A run's temporary folder is `DIR/.tmp-<run id>` with the command's run ids (16 hex digits),
holding only files named as the writers and the commit name them (`_TEMP_FILE`): a folder
merely named `.tmp-...`, or one holding anything else, is not the tool's to remove.

Anything else under a name the tool writes (a `*-NNNNN-of-NNNNN*` shard name, `dead_letter/`,
a side file's name) is foreign: a run refuses to start rather than replace it, even with
`--overwrite`. Leftovers of interrupted runs are removed by `discard_interrupted_runs`,
which deletes only what their journals name and no committed record still lists.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
from collections.abc import Iterable
from typing import Any

from apache_beam.io.filesystems import FileSystems

from transforms import fs
from transforms.format.manifest_format import MANIFEST_NAME, SHARD_GLOB, Counts, Manifest, is_plain_relative
from transforms.format.tfrecord_index import INDEX_SUFFIX
from transforms.manifest import read_manifest
from transforms.shard_writers import DEAD_LETTER_DIR, TEMP_PREFIX

__all__ = ["DRIFT_DETECTED", "ERROR_RATE_EXCEEDED", "FAILED_RUN_NAME", "JOURNAL_NAME", "NOTHING_CONVERTED",
           "REPORT_NAME", "committed_manifest", "discard_interrupted_runs", "foreign_files",
           "interrupted_runs", "listed_paths", "listed_size_problems", "owned_paths", "read_failed_run"]

_LOG = logging.getLogger(__name__)

#: The page `tfrecord-pipeline report` derives from a committed output (not in its manifest).
REPORT_NAME = "report.html"

#: The record of a run that committed only its dead letters (relative to the output folder).
FAILED_RUN_NAME = f"{DEAD_LETTER_DIR}/failed_run.json"

#: `failed_run.json`'s `outcome`: why the run committed only its dead letters.
NOTHING_CONVERTED = "nothing_converted"
ERROR_RATE_EXCEEDED = "max_error_rate_exceeded"
DRIFT_DETECTED = "drift_detected"
#: Inside a run's temp folder: the final files its commit may create or replace.
JOURNAL_NAME = "commit-journal.json"


#: A manifest that cannot be read: it vouches for no file but itself.
_DAMAGED = Manifest(shards=(), counts=Counts(0, 0, 0), compression="")


def committed_manifest(output_dir: str) -> Manifest | None:
    """The committed manifest, or None when there is none; one listing nothing when it cannot
    be read (then it vouches for no file but itself)."""
    try:
        return read_manifest(output_dir)
    except ValueError:
        return _DAMAGED


def listed_paths(manifest: Manifest | None) -> set[str]:
    """The paths, relative to the output folder, that a committed manifest lists."""
    if manifest is None:
        return set()
    return {MANIFEST_NAME} | {entry.path for entry in manifest.listed_files()}


def listed_size_problems(output_dir: str, manifest: Manifest) -> list[str]:
    """What is wrong with the files a committed `manifest` lists, by one listing of
    `output_dir`: each one missing or of another size than listed (contents are `verify`'s
    to check)."""
    expected = {entry.path: entry.bytes for entry in manifest.listed_files()}
    prefix = output_dir.rstrip("/") + "/"
    found = {m.path[len(prefix):]: m.size_in_bytes
             for m in fs.match([fs.literal(prefix) + "**"])[0].metadata_list}
    return [f"{path} has {found[path]} bytes, not the {size} listed" if path in found
            else f"{path} is missing" for path, size in sorted(expected.items()) if found.get(path) != size]


def _read_json(path: str) -> Any:
    """The JSON document at `path`, or None when there is none or it cannot be read (a
    record that cannot be read vouches for nothing)."""
    try:
        if not FileSystems.exists(path):
            return None
        with FileSystems.open(path) as handle:
            return json.loads(handle.read(64 * 1024 * 1024))
    except Exception:  # noqa: BLE001 - any filesystem's error, or not JSON
        return None


def read_failed_run(output_dir: str) -> dict[str, Any] | None:
    """The record a failed run left beside its dead letters, or None."""
    record = _read_json(fs.join_path(output_dir, FAILED_RUN_NAME))
    return record if isinstance(record, dict) else None


def _journal_paths(journal: Any) -> set[str]:
    if not isinstance(journal, dict):
        return set()
    names = list(journal.get("writes") or ()) + list(journal.get("replaces") or ())
    return {name for name in names if is_plain_relative(name)}


#: A command run's temporary folder (`SinkConfig.temp_dir` with the default run id).
_TEMP_FOLDER = re.compile(re.escape(TEMP_PREFIX) + r"[0-9a-f]{16}")

#: A file in it, relative to it: the commit journal, or, in a split's, `dead_letter` or
#: `_progress` folder, an empty shard or a writer's uniquely named temporary file (32 hex
#: digits, then a shard's or dead letters' suffix, an index, a sidecar, a partial write);
#: the run's record and its units' completion records (`transforms.resume`).
_TEMP_FILE = re.compile(r"(?:" + re.escape(JOURNAL_NAME) + r"|run\.json|units/[0-9a-f]{64}\.unit)"
                        r"(?:\.partial)?"
                        r"|[^/]+/(?:empty-[^/]+|[0-9a-f]{32}(?:\.tfrecord(?:\.gz|\.zz)?|\.jsonl)?"
                        + f"(?:{re.escape(INDEX_SUFFIX)})?" + r"(?:\.json)?(?:\.partial)?)")


def _files_under(folder: str) -> list[str]:
    """Every file under `folder` (on object stores: every object under the prefix),
    relative to it."""
    if "://" in folder:
        prefix = folder.rstrip("/") + "/"
        return [m.path[len(prefix):] for m in fs.match([fs.literal(prefix) + "**"])[0].metadata_list]
    return [os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
            for root, _, names in os.walk(folder) for name in names]


def interrupted_runs(output_dir: str, warn: bool = False) -> list[str]:
    """The temporary folders interrupted runs of this tool left in `output_dir`: named as a
    run names them and holding nothing it does not write; `warn` about folders so named that
    hold more."""
    prefix = fs.join_path(output_dir, TEMP_PREFIX)
    if "://" in output_dir:
        matched = fs.match([fs.literal(prefix) + "*/**"])[0].metadata_list
        candidates = {prefix + m.path[len(prefix):].split("/", 1)[0] for m in matched}
    else:  # Beam's local match lists no folders
        candidates = {path for path in glob.glob(glob.escape(prefix) + "*") if os.path.isdir(path)}
    folders = []
    for folder in sorted(candidates):
        if not _TEMP_FOLDER.fullmatch(folder.rstrip("/").rsplit("/", 1)[-1]):
            continue
        strangers = [name for name in _files_under(folder) if not _TEMP_FILE.fullmatch(name)]
        if strangers:
            if warn:
                _LOG.warning("leaving %s alone: it holds files this tool does not write (%s)",
                             folder, ", ".join(sorted(strangers)[:3]))
            continue
        folders.append(folder)
    return folders


def _recorded_paths(output_dir: str, manifest: Manifest | None) -> set[str]:
    """The relative paths the committed `manifest` (with the report derived from it) and a
    failed run's record name: what stands, as opposed to what a journal says a commit may
    have begun to write."""
    recorded = listed_paths(manifest)
    if manifest is not None:
        recorded.add(REPORT_NAME)
    failed = read_failed_run(output_dir)
    if failed is not None:
        recorded.add(FAILED_RUN_NAME)
        recorded.update(name for name in failed.get("files") or () if is_plain_relative(name))
    return recorded


def owned_paths(output_dir: str, manifest: Manifest | None = None) -> set[str]:
    """Every relative path in `output_dir` that a record of this tool names (see the module
    docstring). `manifest` is the committed one when the caller has read it already."""
    if manifest is None:
        manifest = committed_manifest(output_dir)
    owned = _recorded_paths(output_dir, manifest)
    for folder in interrupted_runs(output_dir):
        owned |= _journal_paths(_read_json(fs.join_path(folder, JOURNAL_NAME)))
    return owned


def _candidates(output_dir: str, side_files: Iterable[str]) -> set[str]:
    """Relative paths in `output_dir` under names this tool writes."""
    folder = fs.literal(output_dir)
    patterns = [fs.join_path(folder, SHARD_GLOB), fs.join_path(folder, DEAD_LETTER_DIR, "*"),
                *(fs.join_path(folder, fs.literal(name)) for name in side_files),
                fs.join_path(folder, MANIFEST_NAME)]
    return {metadata.path[len(output_dir):].lstrip("/")
            for result in fs.match(patterns) for metadata in result.metadata_list}


def foreign_files(output_dir: str, side_files: Iterable[str] = (),
                  manifest: Manifest | None = None) -> list[str]:
    """Files under names this tool writes that no record of the tool names, sorted."""
    if "://" not in output_dir and not FileSystems.exists(output_dir):
        return []
    return sorted(_candidates(output_dir, side_files) - owned_paths(output_dir, manifest))


def _move_back(output_dir: str, folder: str, journal: Any, recorded: set[str]) -> None:
    """Moves the files a half-done commit renamed back to their temporary names in `folder`,
    so the run resuming there finds its work units' files where their records say."""
    moves = journal.get("moves") if isinstance(journal, dict) else None
    prefix = folder.rstrip("/") + "/"
    for move in moves if isinstance(moves, list) else ():
        if not (isinstance(move, list) and len(move) == 2 and all(isinstance(p, str) for p in move)):
            continue
        temp_path, name = move
        final = fs.join_path(output_dir, name)
        if (temp_path.startswith(prefix) and ".." not in temp_path.split("/")
                and is_plain_relative(name) and name not in recorded
                and not FileSystems.exists(temp_path) and FileSystems.exists(final)):
            fs.ensure_parent(temp_path)
            FileSystems.rename([final], [temp_path])


def discard_interrupted_runs(output_dir: str, keep: str | None = None) -> list[str]:
    """Removes what interrupted runs left: the final files their commit journals name that
    the committed manifest does not list, then their temp folders, except the folder `keep`
    (a run resumes in it), of which only the journal and progress files go. Returns the
    folders removed."""
    folders = interrupted_runs(output_dir, warn=True)
    if not folders:
        return []
    recorded = _recorded_paths(output_dir, committed_manifest(output_dir))
    removed = []
    for folder in folders:
        journal = fs.join_path(folder, JOURNAL_NAME)
        resumed = folder.rstrip("/") == (keep or "").rstrip("/")
        if resumed:
            _move_back(output_dir, folder, _read_json(journal), recorded)
        partial = _journal_paths(_read_json(journal)) - recorded
        fs.delete([path for path in (fs.join_path(output_dir, name) for name in sorted(partial))
                   if FileSystems.exists(path)])
        if resumed:
            fs.delete([path for path in (journal, fs.join_path(folder, "_progress"))
                       if FileSystems.exists(path)])
            continue
        _LOG.info("removing leftovers of an uncommitted run: %s", folder)
        fs.delete_tree(folder)
        removed.append(folder)
    return removed
