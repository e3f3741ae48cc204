"""What a class-folder tree becomes: `FolderSlices`, one definition used twice.

* On the launcher, `survey_folder` walks the tree once, keeping per folder only its file
  count, whether it holds an image, and every `step`-th file name (the candidate cuts). A
  work unit names one folder and a range [first, stop) of its sorted file names, either end
  open, so the plan does not grow with the number of images (about `max_slices` units, plus
  one per folder) and the launcher holds no listing: a local tree is walked one folder at a
  time, a gs:// tree listed one page at a time (`transforms.object_listing`).
* In the workers, `FolderSlices.items(unit)` lists the unit's range of that folder (a gs://
  slice just its range; others keep a folder's sorted listing for the next slice) and
  applies the tree's rules (`entry_rules`) to each file. A file that appears between
  planning and reading falls in exactly one slice, or in none where a worker kept an object
  store's older listing; never in two. One that disappears is a `missing_file` dead letter
  or simply not read.

The rules: ROOT/<label>/**/<file>, or ROOT/<split>/<label>/**/<file> when a top-level folder
is named train, validation or test; hidden files and folders, files without an image
extension and files directly in ROOT (or in a split folder) are dead letters, and in a tree
of split folders those beside them belong to no split (`DEAD_LETTER_SPLIT`). A symlinked
folder is not followed (`os.walk`): it is a `symlinked_folder` dead letter; dangling symlinks
are `missing_file` when read. Object stores other than gs:// are listed by Beam's
FileSystems, whole (there the launcher and each worker hold a folder's listing).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import os
import stat
import time
from collections.abc import Iterator, Sequence

from transforms import fs, object_listing
from transforms.images.config import SPLIT_DIRECTORIES, planned_item
from transforms.images.labels import label_problem, sorted_labels
from transforms.records import DEFAULT_SPLIT, WorkUnit
from transforms.splits import DEAD_LETTER_SPLIT

__all__ = ["IMAGE_EXTENSIONS", "FolderSlices", "FolderSurvey", "entry_rules", "survey_folder"]

#: File extensions (lower case) taken as images in a class-folder tree.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")


def _separator(root: str) -> str:
    return "/" if "://" in root else os.sep


def _relative_parts(root: str, folder: str) -> tuple[str, ...]:
    return tuple(folder[len(root) + 1:].split(_separator(root))) if folder != root else ()


def _image_extension(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def entry_rules(parts: Sequence[str], split_mode: bool, labels: dict[str, int] | None
                ) -> tuple[str, str | None, tuple[str, str, None] | None]:
    """(split, label folder, reject) of the file at ROOT/<parts...>; `labels` is None while
    the label map is being found (no `unknown_label` then). In a tree of split folders a file
    outside them (always a dead letter: the plan refuses other top-level folders) has no
    split, rather than the "data" split the tree does not have."""
    split, rest = (DEAD_LETTER_SPLIT if split_mode else DEFAULT_SPLIT), list(parts)
    if split_mode and len(parts) > 1 and parts[0] in SPLIT_DIRECTORIES:
        split, rest = parts[0], rest[1:]
    label = rest[0] if len(rest) > 1 else None
    if any(part.startswith(".") for part in parts):
        reject = ("hidden_file", "hidden file or folder", None)
    elif label is None:
        reject = ("no_label", "file is not inside a label folder", None)
    elif not _image_extension(parts[-1]):
        extension = os.path.splitext(parts[-1])[1]
        reject = ("not_an_image_extension", f"extension {extension or '(none)'!r} is not one of "
                  f"{', '.join(IMAGE_EXTENSIONS)}", None)
    elif (problem := label_problem(label)) is not None:
        reject = ("invalid_label", problem, None)
    elif labels is not None and label not in labels:
        reject = ("unknown_label", f"label folder {label!r} is not in the label list", None)
    else:
        reject = None
    return split, label, reject


def _name_range(names: Sequence[str], first: str | None, stop: str | None) -> slice:
    """The positions of the names in [first, stop) (None: open) in sorted `names`."""
    return slice(0 if first is None else bisect.bisect_left(names, first),
                 len(names) if stop is None else bisect.bisect_left(names, stop))


def _objects(pattern: str) -> list[tuple[str, int, float | None]]:
    """(path, size, mtime) of the objects Beam's FileSystems match (folder markers left out)."""
    return [(m.path, m.size_in_bytes, getattr(m, "last_updated_in_seconds", None))
            for m in fs.match([pattern])[0].metadata_list if not m.path.endswith("/")]


class _KeptListing:
    """The listing of one folder, kept for the next slice of the same folder: a worker lists
    a large folder once, not once per slice (measured: 160 slices of two 10,000-file folders
    cost 1.3 s of listing; a 100,000-object folder, about 256 slices, would cost 100 list
    requests per slice). One (key, listing) object, replaced whole, so threads of one worker
    never see a folder with another's listing."""

    def __init__(self):
        self._kept = None

    def get(self, key: tuple, listing, keep: bool):
        """The listing kept under `key`, else `listing()`, kept from now on if `keep`."""
        kept = self._kept
        if kept is None or kept[0] != key:
            kept = (key, listing())
            self._kept = kept if keep else None
        return kept[1]


# A local folder's sorted names, kept while its modification time stays the same (adding or
# removing a file changes it). As git does with racily clean files, only when the folder was
# last changed `_SETTLED_NS` before the listing: a filesystem's clock ticks coarsely, so a
# change right after a listing may keep the same time, but never a settled folder's time.
_LOCAL_NAMES = _KeptListing()
_SETTLED_NS = 2_000_000_000
# A folder of an object store that Beam's FileSystems list (not gs://) has no modification
# time to check: its sorted names and (name, size, mtime) are kept under the plan's token
# (its listing digest), so slices of one run share them and a later run lists again.
_REMOTE_ENTRIES = _KeptListing()


def _remote_entries(folder: str) -> tuple[list[str], list[tuple]]:
    entries = sorted((path.rsplit("/", 1)[1], size, mtime)
                     for path, size, mtime in _objects(fs.literal(folder.rstrip("/")) + "/*"))
    return [entry[0] for entry in entries], entries


#: The size `_list_folder` gives a symlink to a folder.
_FOLDER_LINK = -1


def _list_folder(folder: str, first: str | None = None, stop: str | None = None,
                 token: str = "") -> list[tuple[str, int | None, float | None]]:
    """(name, size or None, mtime or None) of the files directly in `folder` whose names
    are in [first, stop) (None: open), sorted. Only those are stat'ed: a slice of a large
    folder costs a listing of names, not a stat of every file. `token`: the plan's, under
    which a remote folder's listing is kept. A symlink to a folder has size `_FOLDER_LINK`."""
    if object_listing.streams(folder):
        return list(object_listing.list_objects(folder, recursive=False, first=first, stop=stop))
    if "://" in folder:
        names, entries = _REMOTE_ENTRIES.get((folder, token), lambda: _remote_entries(folder), bool(token))
        return entries[_name_range(names, first, stop)]
    listed_at = time.time_ns()
    mtime_ns = os.stat(folder).st_mtime_ns
    names = _LOCAL_NAMES.get((folder, mtime_ns), lambda: sorted(os.listdir(folder)),
                             mtime_ns <= listed_at - _SETTLED_NS)
    found = []
    for name in names[_name_range(names, first, stop)]:
        try:
            status = os.stat(os.path.join(folder, name))
        except OSError:
            found.append((name, None, None))  # a dangling symlink: missing_file when read
            continue
        if stat.S_ISDIR(status.st_mode):
            # os.walk does not follow a symlinked folder: what it holds is not read, and
            # the link is a dead letter of its own rather than images vanishing unseen.
            if os.path.islink(os.path.join(folder, name)):
                found.append((name, _FOLDER_LINK, None))
            continue
        found.append((name, status.st_size, status.st_mtime))
    return found


def _refuse_unreadable(error: OSError) -> None:
    """`os.walk`'s handler of a folder it cannot list: refused, where the walk would pass
    over it (a class folder without read permission would silently be left out); one removed
    since its parent was listed is passed over."""
    if not isinstance(error, FileNotFoundError):
        raise ValueError(fs.unreadable_folder(error.filename, error)) from error


def _files(root: str) -> Iterator[tuple[str, str, int | None, float | None]]:
    """(folder, name, size, mtime) of every file under `root`, a folder's names sorted: a
    gs:// tree as its listing streams (folders interleaved), a local one folder by folder."""
    if object_listing.streams(root):
        for relative, size, mtime in object_listing.list_objects(root, recursive=True):
            folder, _, name = relative.rpartition("/")
            yield (f"{root}/{folder}" if folder else root), name, size, mtime
        return
    if "://" in root:
        yield from sorted((*path.rsplit("/", 1), size, mtime)
                          for path, size, mtime in _objects(fs.literal(root.rstrip("/")) + "/**"))
        return
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root} is not a folder")
    for folder, subfolders, _ in os.walk(root, onerror=_refuse_unreadable):
        subfolders.sort()
        for name, size, mtime in _list_folder(folder):
            yield folder, name, size, mtime


@dataclasses.dataclass
class _Folder:
    """What the survey keeps of one folder while its files stream by (in name order)."""

    path: str
    parts: tuple[str, ...]  # relative to the root
    files: int = 0
    has_image: bool = False  # a visible file with an image extension (what entry_rules asks of the name)
    cuts: list[str] = dataclasses.field(default_factory=list)  # every `step`-th name, from the first

    def add(self, name: str, step: int) -> None:
        if self.files % step == 0:
            self.cuts.append(name)
        self.files += 1
        self.has_image = self.has_image or (not name.startswith(".") and _image_extension(name))


@dataclasses.dataclass(frozen=True)
class FolderSurvey:
    """What the launcher learns from walking a tree once (module docstring)."""

    files: int  # every file under the root (each becomes a record or a dead letter)
    split_mode: bool  # the tree has split folders (train, validation, test) at its top
    label_folders: tuple[str, ...]  # those holding a visible image, in label order (`sorted_labels`)
    splits: tuple[str, ...]  # of every folder holding files (files beside split folders have none)
    listing_digest: str  # SHA-256 of every file's relative path, size and mtime, in listing order
    folders: tuple[_Folder, ...]  # per folder with files, its candidate cuts (for `slices`)

    def slices(self, step: int, max_slices: int) -> tuple[WorkUnit, ...]:
        """Work units of whole multiples of `step` files, about `max_slices` of them (at
        least one per folder)."""
        stride = max(1, -(-self.files // (max_slices * step)))
        units = []
        for folder in self.folders:
            cuts = folder.cuts[::stride]
            for k, first in enumerate(cuts):
                units.append(WorkUnit(path=folder.path, index=len(units), extra={
                    "first": first if k else None,
                    "stop": cuts[k + 1] if k + 1 < len(cuts) else None,
                }))
        return tuple(units)


def survey_folder(root: str, step: int) -> FolderSurvey:
    """Walks the tree at `root` once (module docstring). Raises FileNotFoundError when `root`
    is not a folder or holds no file, ValueError when it mixes split folders with others."""
    digest = hashlib.sha256()
    found: dict[str, _Folder] = {}
    for path, name, size, mtime in _files(root):
        folder = found.get(path)
        if folder is None:
            folder = found[path] = _Folder(path, _relative_parts(root, path))
        folder.add(name, step)
        digest.update(repr(("/".join([*folder.parts, name]), size, mtime)).encode("utf-8"))
    # A local walk visits folders in its own order; an object store's, sorted by path.
    folders = [found[path] for path in (sorted(found) if "://" in root else found)]
    if not folders:
        raise FileNotFoundError(f"no files under {root}")
    top = {f.parts[0] for f in folders if f.parts and not f.parts[0].startswith(".")}
    split_mode = bool(top & set(SPLIT_DIRECTORIES))
    if split_mode and top - set(SPLIT_DIRECTORIES):
        raise ValueError(
            f"{root} mixes split folders ({', '.join(sorted(top & set(SPLIT_DIRECTORIES)))}) with "
            f"other folders ({', '.join(sorted(top - set(SPLIT_DIRECTORIES)))}) at its top level"
        )
    labels, splits = set(), []
    for folder in folders:
        split, label, reject = entry_rules([*folder.parts, "image.jpg"], split_mode, None)
        if split != DEAD_LETTER_SPLIT:
            splits.append(split)
        if folder.has_image and reject is None:
            labels.add(label)
    return FolderSurvey(sum(f.files for f in folders), split_mode, sorted_labels(labels),
                        tuple(dict.fromkeys(splits)), digest.hexdigest(), tuple(folders))


@dataclasses.dataclass(frozen=True)
class FolderSlices:
    """How the workers read the slices of one tree (module docstring)."""

    root: str
    roots: tuple[str, ...]  # the allowed roots every image must lie in
    split_mode: bool
    labels: tuple[str, ...]  # the label map; a label's index is its position
    plan_token: str = ""  # the plan's listing digest, under which a remote folder's listing is kept

    def items(self, unit: WorkUnit) -> Iterator[dict]:
        """The planned item of every file of the slice `unit`, in name order."""
        extra = unit.extra or {}
        first, stop = extra.get("first"), extra.get("stop")
        folder = unit.path
        parts, prefix = _relative_parts(self.root, folder), folder + _separator(self.root)
        index = {label: i for i, label in enumerate(self.labels)}
        for name, size, _ in _list_folder(folder, first, stop, self.plan_token):
            split, label, reject = entry_rules([*parts, name], self.split_mode, index)
            if size == _FOLDER_LINK:
                size, reject = None, ("symlinked_folder", "a symlink to a folder, not followed: "
                                      "link the files, or convert the folder it names", None)
            yield planned_item(prefix + name, split, filename="/".join([*parts, name]),
                               label=index.get(label), text=label, size=size, reject=reject)
