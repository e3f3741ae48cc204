"""Contact sheets of an image output: records of each label, from the shards in the
manifest's order (the same output always gives the same pictures), as JPEG `data:` URIs.

Bounded in memory and time: shards are streamed (every CRC checked), the scan stops when
every sheet is full or after `MAX_SCAN_RECORDS` records / `MAX_SCAN_BYTES` bytes, and only
the chosen records are decoded by Pillow (JPEGs at a reduced scale)."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import itertools
import logging
from collections.abc import Sequence

from PIL import Image

from transforms import fs
from transforms.format.example_codec import decode_example
from transforms.format.manifest_format import Manifest
from transforms.tfrecord_io import read_tfrecord_file

__all__ = ["ContactSheet", "Thumbnail", "contact_sheets", "thumbnail_data_uri"]

_LOG = logging.getLogger(__name__)

THUMBNAIL_PIXELS = 96
PER_LABEL = 8
MAX_LABELS = 50
MAX_SCAN_RECORDS = 20_000
MAX_SCAN_BYTES = 256 << 20
#: The sheet of records without a label (an unlabelled image folder or manifest).
NO_LABEL = "(no label)"
_JPEG_QUALITY = 85


@dataclasses.dataclass(frozen=True)
class Thumbnail:
    """One sampled image: its caption (the file name), a `data:image/jpeg` URI and size, or
    (when Pillow could not decode it) the `problem`."""

    caption: str
    split: str
    data_uri: str | None = None
    width: int = 0
    height: int = 0
    problem: str | None = None


@dataclasses.dataclass
class ContactSheet:
    """The sampled images of one label, in shard order."""

    label: str
    thumbnails: list[Thumbnail] = dataclasses.field(default_factory=list)


def _is_high_bit(image: Image.Image) -> bool:
    return image.mode.startswith("I") or image.mode == "F"  # 16/32-bit integer, float


def _as_rgb(image: Image.Image) -> Image.Image:
    """`image` as 8-bit RGB: transparency over white, 16-bit greys scaled down."""
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, "white")
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return flat
    if _is_high_bit(image) and image.mode != "F":
        image = image.convert("I").point(lambda value: value / 256)  # 16-bit PNG: top byte
    return image if image.mode == "RGB" else image.convert("RGB")


def thumbnail_data_uri(encoded: bytes, size: int = THUMBNAIL_PIXELS) -> tuple[str, int, int]:
    """A JPEG thumbnail (at most `size` pixels a side) of an encoded image as a data URI, with
    its width and height; raises what Pillow raises for bytes it cannot decode."""
    with Image.open(io.BytesIO(encoded)) as image:
        if _is_high_bit(image):  # to 8 bits first: not every filter resizes these modes
            image = _as_rgb(image)
        image.thumbnail((size, size))  # JPEG: decoded at a reduced scale (draft mode)
        small = _as_rgb(image)
        buffer = io.BytesIO()
        small.save(buffer, format="JPEG", quality=_JPEG_QUALITY)  # while the source is open
    uri = "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    return uri, small.width, small.height


def _first_text(features: dict[str, tuple[str | None, list]], name: str) -> str | None:
    values = features.get(name, (None, []))[1]
    if values and isinstance(values[0], bytes):
        return values[0].decode("utf-8", errors="replace")
    return None


def _label_of(features: dict[str, tuple[str | None, list]], labels: Sequence[str] | None) -> str:
    text = _first_text(features, "image/class/text")
    if text is not None:
        return text
    index = features.get("image/class/label", (None, []))[1]
    if index and isinstance(index[0], int):
        if labels and 0 <= index[0] < len(labels):
            return labels[index[0]]
        return str(index[0])
    return NO_LABEL


def _thumbnail(features: dict[str, tuple[str | None, list]], split: str, record: int) -> Thumbnail:
    caption = _first_text(features, "image/filename") or f"{split} record {record}"
    encoded = features.get("image/encoded", (None, []))[1]
    if not encoded or not isinstance(encoded[0], bytes):
        return Thumbnail(caption, split, problem="no image/encoded value")
    try:
        uri, width, height = thumbnail_data_uri(encoded[0])
    except Exception as error:  # noqa: BLE001 - Pillow raises many kinds; one picture is not the report
        return Thumbnail(caption, split, problem=f"cannot preview: {type(error).__name__}: {error}")
    return Thumbnail(caption, split, uri, width, height)


class _Sampler:
    """Fills the sheets from decoded records until they are full or the budget is spent."""

    def __init__(self, labels: Sequence[str] | None, per_label: int, max_labels: int):
        self.per_label = per_label
        self.max_labels = max_labels
        # With a known label list, the sheets are its first `max_labels`, in its order;
        # otherwise the first labels met, in shard order.
        self.labels = labels
        self.fixed = bool(labels)
        self.sheets = {label: ContactSheet(label) for label in (labels or [])[:max_labels]}
        self.records = 0
        self.bytes = 0

    def done(self) -> bool:
        if self.records >= MAX_SCAN_RECORDS or self.bytes >= MAX_SCAN_BYTES:
            return True
        if not self.fixed and len(self.sheets) < self.max_labels:
            return False
        return all(len(sheet.thumbnails) >= self.per_label for sheet in self.sheets.values())

    def add(self, payload: bytes, split: str) -> None:
        self.records += 1
        self.bytes += len(payload)
        features = decode_example(payload)
        label = _label_of(features, self.labels)
        sheet = self.sheets.get(label)
        if sheet is None:
            if self.fixed or len(self.sheets) >= self.max_labels:
                return
            sheet = self.sheets[label] = ContactSheet(label)
        if len(sheet.thumbnails) < self.per_label:
            sheet.thumbnails.append(_thumbnail(features, split, self.records))


def contact_sheets(output_dir: str, manifest: Manifest, labels: Sequence[str] | None,
                   per_label: int = PER_LABEL, max_labels: int = MAX_LABELS) -> list[ContactSheet]:
    """The non-empty contact sheets of the image output at `output_dir`; a shard that cannot
    be read ends its part of the scan with a warning."""
    sampler = _Sampler(labels, per_label, max_labels)
    # First the head of every shard (a label's images often sit in shards of their own, so a
    # plain scan would read all of the first labels' shards before meeting the others), then
    # the rest of each shard in order, while sheets are not full and the budget lasts.
    for first, stop in ((0, per_label), (per_label, None)):
        for entry in manifest.shards:
            if sampler.done():
                break
            path = fs.join_path(output_dir, entry.path)
            try:
                with contextlib.closing(read_tfrecord_file(path, manifest.compression)) as payloads:
                    for payload in itertools.islice(payloads, first, stop):
                        sampler.add(payload, str(entry.split))
                        if sampler.done():
                            break
            except (OSError, ValueError) as error:  # a corrupt shard: `verify` is the tool for that
                _LOG.warning("report: stopped reading %s for thumbnails: %s", path, error)
    return [sheet for sheet in sampler.sheets.values() if sheet.thumbnails]
