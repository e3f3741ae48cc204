"""The Beam DoFn `ConvertImages`: reads the images of a work unit and yields their
tf.train.Examples, framed, in one `RecordBatch` per split, or a dead letter per image.

Images are read through Beam's FileSystems (gs:// like a local path). Every planned item,
including one the planner already knows is bad, ends up as a record or as a dead letter
with a reason code (`transforms.records.REASONS`), so input == written + dead-lettered. By
default the original bytes are kept and height/width/channels read from the header, never
decoding pixels; formats TensorFlow cannot decode (TIFF, ...) become PNG losslessly;
optional transforms go through Pillow (`transforms.images.processing`).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import io
import os
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from PIL import Image

from transforms.format.example_codec import encode_example_parts
from transforms.format.tfrecord_format import FramedRecords, frame_parts
from transforms.images.config import ImageConfig
from transforms.images.headers import HeaderError, ImageInfo, parse_header, sniff_format
from transforms.images.paths import is_real_path_within_roots, is_remote, is_within_roots, opened_real_path
from transforms.images.processing import decode_fully, exif_orientation, needs_render, render
from transforms.ordered_pool import default_threads, ordered_map
from transforms.records import DeadLetterError, RecordBatch, WorkUnit, batch_key, dead_letter
from transforms.splits import DEAD_LETTER_SPLIT
from transforms.stats.images import ENCODED, image_batch_stats
from transforms.stats.sketches import stats_enabled

__all__ = ["ConvertImages"]

_COUNTERS = "tfrecord_pipeline"


class _Chunk:
    """Records, dead letters and input counts of one chunk of a work unit, per split (in order met)."""

    def __init__(self):
        self.counts = collections.Counter()
        self.records: dict[str, list[_Converted]] = collections.defaultdict(list)
        self.dead = collections.defaultdict(list)
        self.size = 0
        self.reencoded = 0
        self.reasons: collections.Counter = collections.Counter()  # dead letters by reason

    def add(self, item: Mapping[str, Any], outcome: _Converted | DeadLetterError) -> None:
        split = item["split"]
        self.counts[split] += 1
        if isinstance(outcome, _Converted):
            self.records[split].append(outcome)
            self.size += len(outcome.framed)
            self.reencoded += outcome.reencoded
            return
        document = dead_letter(
            source=item["uri"], reason=outcome.reason, message=outcome.message,
            split=None if split == DEAD_LETTER_SPLIT else split, row=item.get("row"),
            column=outcome.column, raw=item.get("raw"),
            filename=item.get("filename"), label=item.get("text"),
        )
        self.dead[split].append(document)
        self.size += len(document)
        self.reasons[outcome.reason] += 1

    def batches(self, key: str) -> Iterator[RecordBatch]:
        for split, count in self.counts.items():
            records = self.records[split]
            framed = [record.framed for record in records]
            sizes = np.fromiter(map(len, framed), dtype=np.int64, count=len(framed))
            stats = (image_batch_stats([r.features for r in records], [r.encoded_length for r in records])
                     if records and stats_enabled() else None)
            yield RecordBatch(key=key, split=split, records=FramedRecords(b"".join(framed), np.cumsum(sizes)),
                              dead_letters=self.dead[split], input_count=count, feature_stats=stats)


class _Converted(NamedTuple):
    framed: bytes  # the Example, framed as a TFRecord
    reencoded: bool  # the image was rendered again (resized, converted, ...)
    features: Mapping[str, Any]  # the Example's features but image/encoded (for statistics)
    encoded_length: int  # the length of image/encoded


@beam.typehints.with_output_types(RecordBatch)
class ConvertImages(beam.DoFn):
    """Reads and converts the images of a `WorkUnit`; yields one RecordBatch per split."""

    def __init__(self, config: ImageConfig | None = None, source: Any = None):
        """`source`: `ImagePlan.source`, what reads the items of work units planned as data."""
        super().__init__()
        self._config = config or ImageConfig()
        self._source = source

    def __getstate__(self):
        # Runtime caches (filesystem clients, counters) are rebuilt on the worker.
        return {"_config": self._config, "_source": self._source}

    def setup(self):
        # Our own pixel check runs first with config.max_pixels; lift Pillow's global
        # guard to at least that so it does not refuse images the user allowed.
        if Image.MAX_IMAGE_PIXELS is not None and Image.MAX_IMAGE_PIXELS < self._config.max_pixels:
            Image.MAX_IMAGE_PIXELS = self._config.max_pixels
        self._written = Metrics.counter(_COUNTERS, "images_written")
        self._converted = Metrics.counter(_COUNTERS, "images_reencoded")
        self._dead = Metrics.counter(_COUNTERS, "images_dead_lettered")

    def process(self, unit: WorkUnit) -> Iterator[RecordBatch]:
        if not hasattr(self, "_written"):
            self.setup()
        for index, chunk in enumerate(self._chunks(unit)):
            self._count(chunk)
            yield from chunk.batches(batch_key(unit.index, index))

    def _count(self, chunk: _Chunk) -> None:
        """Beam metrics (lost in a forked process, which has no metrics context)."""
        self._written.inc(sum(map(len, chunk.records.values())))
        self._converted.inc(chunk.reencoded)
        for reason, count in chunk.reasons.items():
            self._dead.inc(count)
            Metrics.counter(_COUNTERS, f"image_dead_letter_{reason}").inc(count)

    def _chunks(self, unit: WorkUnit) -> Iterator[_Chunk]:
        """The images of one work unit, in chunks of at most ~`ImageConfig.chunk_bytes`."""
        extra = unit.extra or {}
        if "items" in extra:
            items, roots = extra["items"], tuple(extra.get("allowed_roots") or ())
        elif self._source is not None:  # planned as data: the items are read here
            items, roots = self._source.items(unit), tuple(self._source.roots)
        else:
            raise ValueError(f"work unit {unit.index} of {unit.path} has no items and "
                             f"ConvertImages was given no source to read them")
        chunk = _Chunk()
        # Images are read, checked and framed on `threads` threads (file reads, hashing,
        # CRCs and Pillow release the GIL); results arrive in item order.
        outcomes = ordered_map(functools.partial(self._outcome, roots=roots), items,
                               self._config.threads or default_threads())
        for item, outcome in outcomes:
            chunk.add(item, outcome)
            # Memory stays bounded even for a unit of very large images: its records
            # leave in several chunks once they hold more than `chunk_bytes`.
            if chunk.size >= self._config.chunk_bytes:
                yield chunk
                chunk = _Chunk()
        yield chunk

    def _outcome(self, item: Mapping[str, Any], roots: tuple[str, ...]
                 ) -> tuple[Mapping[str, Any], _Converted | DeadLetterError]:
        """The item with its record or why it was refused (on a pool thread: no metrics)."""
        uri = item["uri"]
        try:
            if item.get("reject"):
                raise DeadLetterError(*item["reject"])
            stored, info, reencoded = self._store(self._read(uri, item.get("size"), roots))
        except DeadLetterError as reject:
            return item, reject
        features = {
            "image/encoded": ("bytes", [stored]),
            "image/format": ("bytes", [info.format]),
            "image/height": ("int64", [info.height]),
            "image/width": ("int64", [info.width]),
            "image/channels": ("int64", [info.channels]),
            # A local name of bytes invalid in UTF-8 reaches us with surrogate escapes: the
            # feature holds the name's own bytes.
            "image/filename": ("bytes", [(item.get("filename") or os.path.basename(uri))
                                         .encode("utf-8", "surrogateescape")]),
            "image/key/sha256": ("bytes", [hashlib.sha256(stored).hexdigest()]),
        }
        if item.get("label") is not None:
            features["image/class/label"] = ("int64", [item["label"]])
            features["image/class/text"] = ("bytes", [item["text"]])
        features.update(item.get("features") or {})
        described = {name: value for name, value in features.items() if name != ENCODED}
        return item, _Converted(frame_parts(encode_example_parts(features)), reencoded, described,
                                len(stored))

    def _read(self, uri: str, size: int | None, roots: tuple[str, ...]) -> bytes:
        """The bytes of the image at `uri`, or raises DeadLetterError saying why not."""
        config = self._config
        checks = [allowed for allowed in (roots, config.allowed_roots) if allowed]
        for allowed in checks:  # lexical check first: nothing outside is even stat'ed
            if not is_within_roots(uri, allowed, resolve_symlinks=False):
                raise DeadLetterError("outside_allowed_roots",
                                      f"{uri} is outside the allowed roots {list(allowed)}")
        if size is None:
            filesystem = self._filesystem(uri)
            try:
                size = filesystem.metadata(uri).size_in_bytes
            except Exception as error:  # noqa: BLE001 - BeamIOError, NotFound, ...
                raise _unreadable(filesystem, uri, f"cannot stat {uri}: {error}") from None
        # Sizes are checked before opening: an empty "file" may be a FIFO or a device.
        if size == 0:
            raise DeadLetterError("empty_file", "the file is empty")
        if size > config.max_image_bytes:
            raise DeadLetterError("image_too_large",
                                  f"{size} bytes exceeds --max-image-bytes {config.max_image_bytes}")
        try:
            filesystem = self._filesystem(uri)
            with filesystem.open(uri, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                if not is_remote(uri):  # symlinks: check the file that was actually opened
                    real = opened_real_path(handle, uri)
                    for allowed in checks:
                        if not is_real_path_within_roots(real, allowed):
                            raise DeadLetterError("outside_allowed_roots",
                                                  f"{uri} resolves to {real}, outside the allowed "
                                                  f"roots {list(allowed)}")
                data = _read_bounded(handle, size, config.max_image_bytes)
        except DeadLetterError:
            raise
        except FileNotFoundError:
            raise DeadLetterError("missing_file", f"{uri} does not exist") from None
        except Exception as error:  # noqa: BLE001 - permissions, I/O, directories, ...
            raise _unreadable(self._filesystem(uri), uri,
                              f"cannot read {uri}: {type(error).__name__}: {error}") from None
        if len(data) > config.max_image_bytes:  # the file grew after it was listed
            raise DeadLetterError("image_too_large",
                                  f"more than --max-image-bytes {config.max_image_bytes}")
        if not data:
            raise DeadLetterError("empty_file", "the file is empty")
        return data

    def _filesystem(self, uri: str):
        """The Beam filesystem of `uri`, cached per scheme (Beam's lookup is slow)."""
        scheme = uri.split("://", 1)[0] if "://" in uri else ""
        cache = self.__dict__.setdefault("_filesystems", {})
        if scheme not in cache:
            try:
                cache[scheme] = FileSystems.get_filesystem(uri)
            except Exception as error:  # noqa: BLE001 - unknown scheme
                raise DeadLetterError("unreadable_uri", f"no filesystem for {uri}: {error}") from None
        return cache[scheme]

    def _store(self, data: bytes) -> tuple[bytes, ImageInfo, bool]:
        """(bytes to store, what TF decodes them to, re-encoded?), or raises DeadLetterError."""
        config = self._config
        options = config.render
        try:
            info = parse_header(data)
        except HeaderError as error:
            if error.reason != "unsupported_format" or sniff_format(data) is None:
                raise
            info = None  # an image format TF cannot decode: Pillow converts it
        if info is not None and info.pixels > config.max_pixels:
            raise DeadLetterError("decompression_bomb",
                                  f"{info.width}x{info.height}x{info.frames} frames = {info.pixels} "
                                  f"pixels exceeds --max-pixels {config.max_pixels}")
        if config.validate == "full":
            decode_fully(data, config.max_pixels)
        orientation = exif_orientation(data) if options.apply_exif_orientation else 1
        if not needs_render(info, options, orientation):
            return data, info, False
        source_format = info.format if info is not None else sniff_format(data)
        # Without a transform asked for, only what TF cannot decode is rendered (`needs_render`).
        if not options.transforms_requested and (info.frames if info else _frame_count(data)) > 1:
            what = (f"{info.note}: TensorFlow cannot decode it and" if info
                    else f"multi-frame {source_format}:")
            raise DeadLetterError("unsupported_format", f"{what} converting would drop frames; "
                                                        f"pass --encode png to keep the first frame")
        return *render(data, options, source_format, config.max_pixels), True


def _read_bounded(handle, size: int, limit: int) -> bytes:
    """Reads a file expected to hold `size` bytes, never more than `limit` + 1 bytes: asking
    for exactly the expected size (plus one, to notice growth) avoids a `limit`-sized buffer
    per image."""
    first = handle.read(min(size, limit) + 1)
    if len(first) <= size or len(first) > limit:
        return first
    parts = [first]
    total = len(first)
    while total <= limit:
        part = handle.read(min(1 << 20, limit + 1 - total))
        if not part:
            break
        parts.append(part)
        total += len(part)
    return b"".join(parts)


def _unreadable(filesystem, uri: str, message: str) -> DeadLetterError:
    """`missing_file` when `uri` does not exist, else `unreadable_uri` with `message`."""
    try:
        missing = not filesystem.exists(uri)
    except Exception:  # noqa: BLE001 - cannot tell: report unreadable, not missing
        missing = False
    if missing:
        return DeadLetterError("missing_file", f"{uri} does not exist")
    return DeadLetterError("unreadable_uri", message)


def _frame_count(data: bytes) -> int:
    try:
        with Image.open(io.BytesIO(data)) as image:
            return int(getattr(image, "n_frames", 1))
    except Exception:  # noqa: BLE001 - render() reports the real error
        return 1
