"""gs:// image trees are listed as they stream (`transforms.object_listing`): the launcher's
survey holds no listing, a worker's slice asks the store for its range of names only, and a
tree converts on the GCS emulator (which ignores ranges) exactly as the same tree on local
disk, however finely it is sliced, through the API and through the command line."""

from __future__ import annotations

import datetime
import tracemalloc
from types import SimpleNamespace

import pytest
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.cli import run
from tests.images import image_samples as samples
from tests.images.test_images import convert, planned_items, reasons, write
from transforms.images import folder_slices
from transforms.images.plan import plan_image_folder
from transforms.records import WorkUnit
from transforms.tfrecord_io import read_tfrecord_file

_UPDATED = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)


class _FakeStore:
    """One bucket's objects, listed as GCS lists them: name order, then prefix, delimiter and
    the [start_offset, end_offset) range applied by the store. `names` is called per listing
    and may generate its names lazily (in sorted order)."""

    def __init__(self, names):
        self._names = names
        self.queries: list[dict] = []
        self.listed = 0  # objects the store sent

    def list_blobs(self, bucket, prefix="", delimiter=None, start_offset=None, end_offset=None,
                   fields=None):
        assert bucket == "b"
        self.queries.append({"prefix": prefix, "delimiter": delimiter, "start_offset": start_offset,
                             "end_offset": end_offset})
        for name in self._names():
            if not name.startswith(prefix) or (delimiter and delimiter in name[len(prefix):]):
                continue
            if (start_offset and name < start_offset) or (end_offset and name >= end_offset):
                continue
            self.listed += 1
            yield SimpleNamespace(name=name, size=10, updated=_UPDATED)


@pytest.fixture
def fake_store(monkeypatch):
    """Installs a `_FakeStore` as the client of Beam's GCS filesystem (`GcsIO().client`). A
    client is kept per emulator address: each store gets an address of its own."""
    from apache_beam.io.gcp import gcsio

    def install(names):
        store = _FakeStore(names)
        monkeypatch.setattr(gcsio, "GcsIO", lambda *args, **kwargs: SimpleNamespace(client=store))
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://fake-store-{id(store)}.invalid")
        return store
    return install


_TREE = ["top.jpg", ".hidden/d.jpg", "cat/a.jpg", "cat/b.txt", "cat/sub/c.jpg", "cat/z.jpg",
         "cat-x/e.png", "dog/f.jpg", "dog/g.jpg", "dog/h.jpg"]


def _folders(survey) -> dict:
    return {f.parts: (f.files, f.has_image, f.cuts) for f in survey.folders}


def test_a_gcs_survey_finds_what_a_local_walk_finds(tmp_path, fake_store):
    """Folders interleave in a recursive listing (cat/sub/c.jpg lies between cat/b.txt and
    cat/z.jpg, cat-x/ before cat/sub/): each still gets its own count, image flag and cuts."""
    for name in _TREE:
        write(tmp_path / "tree" / name, b"x")
    fake_store(lambda: iter(sorted(f"tree/{name}" for name in _TREE)))
    local = folder_slices.survey_folder(str(tmp_path / "tree"), 2)
    remote = folder_slices.survey_folder("gs://b/tree", 2)
    assert _folders(remote) == _folders(local)
    assert (remote.files, remote.split_mode, remote.label_folders, remote.splits) == \
           (local.files, local.split_mode, local.label_folders, local.splits) == \
           (10, False, ("cat", "cat-x", "dog"), ("data",))
    assert [f.path for f in remote.folders] == sorted(f.path for f in remote.folders)


def test_surveying_a_gcs_tree_holds_no_listing(fake_store):
    """40,000 objects: the survey keeps every 64th name of a folder (about 50 kB in all), not
    the listing (whose names alone take 3 MB, one folder's 1.5 MB; as (name, size, mtime)
    tuples 5.5 MB). Traced allocations are slow, so the tree is only as big as that margin
    needs."""
    count = 20_000

    def names():
        for label in ("a", "b"):
            for i in range(count):
                yield f"tree/{label}/{i:07d}.jpg"

    fake_store(names)
    tracemalloc.start()
    try:
        survey = folder_slices.survey_folder("gs://b/tree", 64)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert survey.files == 2 * count
    assert [len(f.cuts) for f in survey.folders] == [-(-count // 64)] * 2
    assert peak < 2**20, peak


def test_a_gcs_slice_lists_its_range_only(fake_store):
    names = [f"tree/cat/{i:03d}.jpg" for i in range(12)] + ["tree/cat/sub/x.jpg", "tree/dog/y.jpg"]
    store = fake_store(lambda: iter(sorted(names)))
    source = folder_slices.FolderSlices("gs://b/tree", ("gs://b/tree/",), False, ("cat", "dog"))
    unit = WorkUnit("gs://b/tree/cat", 1, extra={"first": "004.jpg", "stop": "008.jpg"})
    items = list(source.items(unit))
    assert [item["filename"] for item in items] == [f"cat/{i:03d}.jpg" for i in range(4, 8)]
    assert store.queries == [{"prefix": "tree/cat/", "delimiter": "/",
                              "start_offset": "tree/cat/004.jpg", "end_offset": "tree/cat/008.jpg"}]
    assert store.listed == 4
    last = WorkUnit("gs://b/tree/cat", 2, extra={"first": "008.jpg", "stop": None})
    assert [item["filename"] for item in source.items(last)] == [f"cat/{i:03d}.jpg" for i in range(8, 12)]
    assert store.queries[-1]["end_offset"] is None


def test_empty_name_segments_make_folders_of_their_own(fake_store):
    """`cat//x.jpg` lies in the folder `cat/`, which is not `cat`: each file is read once."""
    names = ["tree/cat//x.jpg", "tree/cat/a.jpg", "tree/cat/b.jpg"]
    fake_store(lambda: iter(sorted(names)))
    survey = folder_slices.survey_folder("gs://b/tree", 64)
    assert {f.path: f.files for f in survey.folders} == {"gs://b/tree/cat": 2, "gs://b/tree/cat/": 1}
    source = folder_slices.FolderSlices("gs://b/tree", ("gs://b/tree/",), False, ("cat",))
    read = [(item["uri"], item["text"]) for unit in survey.slices(64, 256) for item in source.items(unit)]
    assert sorted(read) == [("gs://b/tree/cat//x.jpg", "cat"), ("gs://b/tree/cat/a.jpg", "cat"),
                            ("gs://b/tree/cat/b.jpg", "cat")]


def test_a_missing_bucket_or_a_refused_listing_is_one_clear_error(fake_store):
    from google.api_core import exceptions

    def refused(error):
        def names():
            raise error
            yield  # a generator, as the client's listing is
        return names

    fake_store(refused(exceptions.NotFound("no bucket")))
    with pytest.raises(FileNotFoundError, match="bucket gs://b does not exist"):
        folder_slices.survey_folder("gs://b/tree", 64)
    fake_store(refused(exceptions.Forbidden("caller lacks storage.objects.list")))
    with pytest.raises(ValueError, match=r"cannot read the folder gs://b/tree: permission denied "
                                         r"\(403 caller lacks storage.objects.list\)"):
        folder_slices.survey_folder("gs://b/tree", 64)


def _upload_tree(gcs_emulator, root) -> dict[str, bytes]:
    files = {"cat/a.jpg": samples.build("jpeg_rgb"), "cat/b.png": samples.build("png_rgb"),
             "cat/sub/c.jpg": samples.build("jpeg_gray"), "cat/z.webp": samples.build("webp_alpha"),
             "cat-x/d.png": samples.build("png_rgba"), "dog/e.gif": samples.build("gif"),
             "dog/f.jpg": b"not an image", "dog/.g.jpg": samples.build("jpeg_rgb"),
             "dog/h.txt": b"notes", "top.jpg": samples.build("jpeg_rgb")}
    for relative, data in files.items():
        write(root / relative, data)
        with FileSystems.create(f"{gcs_emulator}/images/{relative}",
                                compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            handle.write(data)
    return files


def test_a_finely_sliced_gcs_tree_converts_as_the_local_tree(tmp_path, gcs_emulator):
    files = _upload_tree(gcs_emulator, tmp_path / "images")
    local_plan = plan_image_folder(str(tmp_path / "images"), images_per_unit=1)
    remote_plan = plan_image_folder(f"{gcs_emulator}/images", images_per_unit=1)
    assert remote_plan.input_count == local_plan.input_count == len(files)
    remote_items = [item["filename"] for item in planned_items(remote_plan)]
    assert sorted(remote_items) == sorted(files)  # every file once, in slices of one
    assert len(remote_plan.work_units) == len(local_plan.work_units) == len(files)
    _, local_records, local_dead = convert(local_plan)
    _, remote_records, remote_dead = convert(remote_plan)
    assert remote_records == local_records
    assert reasons(remote_dead) == reasons(local_dead) == {
        "dog/f.jpg": "not_an_image", "dog/.g.jpg": "hidden_file",
        "dog/h.txt": "not_an_image_extension", "top.jpg": "no_label"}


def test_the_cli_converts_a_gcs_tree_on_forked_converters_as_the_local_tree(tmp_path, gcs_emulator):
    """Forked converters list their slices with a client of their own (one per process)."""
    _upload_tree(gcs_emulator, tmp_path / "images")
    outputs = {}
    for name, source in (("local", str(tmp_path / "images")), ("remote", f"{gcs_emulator}/images")):
        output = tmp_path / name
        assert run(["convert", "--input", source, "--format", "image-folder", "--output", str(output),
                    "--converter-processes", "2", "--quiet", "--max-error-rate", "1"]) == 0
        outputs[name] = sorted(record for path in sorted(output.glob("*.tfrecord*"))
                               for record in read_tfrecord_file(str(path)))
    assert outputs["remote"] == outputs["local"] and len(outputs["local"]) == 6
