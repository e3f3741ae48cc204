"""Image conversion (transforms/images/): planning, ConvertImages, dead letters, security.

Every record is decoded by TensorFlow itself: `tf.io.decode_image(image/encoded)` must give
exactly the stored height, width and channels, and in the default mode the stored bytes
must be the file's bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import struct
import zlib

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from PIL import Image, ImageOps

import pipeline as pipeline_package
from tests.format.reference_codec import encode_example
from tests.images import image_samples as samples
from transforms.format.example_codec import decode_example, encode_example_parts
from transforms.images.config import ImageConfig, RenderOptions
from transforms.images.convert import ConvertImages
from transforms.images.plan import plan_image_folder, plan_image_manifest
from transforms.records import REASONS
from transforms.splits import DEAD_LETTER_SPLIT
from transforms.tabular.spec import parse_spec

NATIVE = [name for name, (_, native) in samples.VARIANTS.items() if native]
CONVERTED = [name for name, (_, native) in samples.VARIANTS.items() if not native]


# --------------------------------------------------------------------------- helpers


def write(path, data: bytes) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    return str(path)


def convert(plan, config: ImageConfig | None = None):
    """Runs ConvertImages.process over every work unit: (batches, records, dead letters)."""
    fn = ConvertImages(config or ImageConfig(), plan.source)
    fn.setup()
    batches = [batch for unit in plan.work_units for batch in fn.process(unit)]
    records = {}
    for batch in batches:
        for payload in batch.records:
            features = {name: values for name, (_, values) in decode_example(payload).items()}
            records[features["image/filename"][0].decode()] = features
    dead = [json.loads(doc) for batch in batches for doc in batch.dead_letters]
    return batches, records, dead


def planned_items(plan) -> list[dict]:
    """Every planned item of `plan`, in plan order (read as the workers read them)."""
    return [item for unit in plan.work_units
            for item in (unit.extra["items"] if "items" in (unit.extra or {})
                         else plan.source.items(unit))]


def rendering(**options) -> ImageConfig:
    """An ImageConfig with these render options and every other setting at its default."""
    return ImageConfig(render=RenderOptions(**options))


def value(features, name):
    return features[name][0]


def decoded_shape(tf, features) -> tuple[int, int, int]:
    """TF's decode_image of image/encoded, as (height, width, channels) of its frames."""
    tensor = tf.io.decode_image(value(features, "image/encoded"))
    return tuple(tensor.shape[-3:])


def stored_shape(features) -> tuple[int, int, int]:
    return (value(features, "image/height"), value(features, "image/width"),
            value(features, "image/channels"))


def reasons(dead) -> dict[str, str]:
    """filename (or source basename) -> reason."""
    return {(doc.get("filename") or os.path.basename(doc["source"])): doc["reason"] for doc in dead}


@pytest.fixture
def variants_tree(tmp_path):
    """ROOT/<format family>/<variant><ext> for every sample variant."""
    root = tmp_path / "photos"
    for name in samples.VARIANTS:
        family = name.split("_", 1)[0]
        write(root / family / f"{name}{samples.extension(name)}", samples.build(name))
    return root


# --------------------------------------------------------------------------- default mode


def test_default_mode_keeps_original_bytes_and_tensorflow_agrees(tf, variants_tree):
    plan = plan_image_folder(str(variants_tree))
    assert plan.labels == ("bmp", "gif", "jpeg", "png", "tiff", "webp")
    batches, records, dead = convert(plan)
    assert dead == [] and len(records) == len(samples.VARIANTS)
    assert sum(b.input_count for b in batches) == len(records)
    for name in NATIVE:
        family = name.split("_", 1)[0]
        features = records[f"{family}/{name}{samples.extension(name)}"]
        with open(variants_tree / family / f"{name}{samples.extension(name)}", "rb") as handle:
            original = handle.read()
        stored = value(features, "image/encoded")
        assert stored == original, name
        assert value(features, "image/key/sha256").decode() == hashlib.sha256(original).hexdigest()
        assert value(features, "image/format").decode() == family
        assert decoded_shape(tf, features) == stored_shape(features), name
        assert value(features, "image/class/text").decode() == family
        assert value(features, "image/class/label") == plan.labels.index(family)


@pytest.mark.parametrize("name", CONVERTED)
def test_formats_tensorflow_cannot_decode_become_lossless_png(tf, tmp_path, name):
    data = samples.build(name)
    write(tmp_path / "root" / "x" / f"{name}{samples.extension(name)}", data)
    _, records, dead = convert(plan_image_folder(str(tmp_path / "root")))
    assert dead == []
    (features,) = records.values()
    stored = value(features, "image/encoded")
    assert value(features, "image/format") == b"png" and stored.startswith(b"\x89PNG")
    assert value(features, "image/key/sha256").decode() == hashlib.sha256(stored).hexdigest()
    assert decoded_shape(tf, features) == stored_shape(features)
    with Image.open(io.BytesIO(data)) as original:
        if original.mode.startswith("I;16"):
            expected = np.asarray(original).astype(np.uint16)
            got = tf.io.decode_png(stored, dtype=tf.uint16).numpy()[..., 0]
        else:
            mode = {"1": "L", "CMYK": "RGB"}.get(original.mode, original.mode)
            if original.mode == "P":
                mode = "RGB"
            expected = np.asarray(original.convert(mode))
            got = tf.io.decode_image(stored, channels=3 if mode == "RGB" else 1).numpy()
            got = got if expected.ndim == 3 else got[..., 0]
    np.testing.assert_array_equal(got, expected)


def test_sixteen_bit_png_keeps_its_bytes_and_decodes_at_16_bits(tf, tmp_path):
    data = samples.build("png_gray16")
    write(tmp_path / "r" / "a" / "x.png", data)
    _, records, _ = convert(plan_image_folder(str(tmp_path / "r")))
    stored = value(records["a/x.png"], "image/encoded")
    assert stored == data
    np.testing.assert_array_equal(tf.io.decode_png(stored, dtype=tf.uint16).numpy()[..., 0],
                                  samples.photo("camera").astype(np.uint16) * 257)


def test_extensions_are_case_insensitive(tmp_path):
    root = tmp_path / "r"
    write(root / "cat" / "A.JPG", samples.build("jpeg_rgb"))
    write(root / "cat" / "b.Jpeg", samples.build("jpeg_gray"))
    write(root / "cat" / "c.PNG", samples.build("png_rgb"))
    write(root / "cat" / "d.TiFF", samples.build("tiff_rgb"))
    _, records, dead = convert(plan_image_folder(str(root)))
    assert dead == [] and sorted(records) == ["cat/A.JPG", "cat/b.Jpeg", "cat/c.PNG", "cat/d.TiFF"]


def test_content_decides_the_format_not_the_extension(tf, tmp_path):
    write(tmp_path / "r" / "a" / "really_a_png.jpg", samples.build("png_rgba"))
    _, records, _ = convert(plan_image_folder(str(tmp_path / "r")))
    features = records["a/really_a_png.jpg"]
    assert value(features, "image/format") == b"png"
    assert decoded_shape(tf, features) == stored_shape(features) == (85, 128, 4)


# --------------------------------------------------------------------------- transforms


@pytest.mark.parametrize("mode", ["fit", "fill", "stretch"])
def test_resize_224_encode_jpeg_every_record_is_224x224x3(tf, variants_tree, mode):
    plan = plan_image_folder(str(variants_tree))
    _, records, dead = convert(plan, rendering(resize=(224, 224), resize_mode=mode, encode="jpeg"))
    assert dead == [] and len(records) == len(samples.VARIANTS)
    for filename, features in records.items():
        assert value(features, "image/format") == b"jpeg", filename
        tensor = tf.io.decode_image(value(features, "image/encoded"))
        assert tuple(tensor.shape) == (224, 224, 3), filename
        assert stored_shape(features) == (224, 224, 3)


def _decoded(tf, features):
    return tf.io.decode_image(value(features, "image/encoded")).numpy()


def test_resize_modes_keep_or_ignore_the_aspect_ratio(tf, tmp_path):
    wide = samples.rgb("coffee")  # 128 x 85, landscape
    write(tmp_path / "r" / "a" / "wide.png", samples.encode(wide, "PNG"))
    plan = plan_image_folder(str(tmp_path / "r"))
    fit = _decoded(tf, convert(plan, rendering(resize=(64, 64), resize_mode="fit"))[1]["a/wide.png"])
    fill = _decoded(tf, convert(plan, rendering(resize=(64, 64), resize_mode="fill"))[1]["a/wide.png"])
    stretch = _decoded(tf, convert(plan, rendering(resize=(64, 64), resize_mode="stretch"))[1][
        "a/wide.png"])
    assert fit.shape == fill.shape == stretch.shape == (64, 64, 3)
    # fit letterboxes: 128x85 -> 64x42 centred, black bands of 11 rows above and below
    assert fit[:10].max() == 0 and fit[-10:].max() == 0 and fit[20:40].mean() > 40
    # fill covers and crops the sides: no black band
    assert fill[:10].mean() > 40 and fill[-10:].mean() > 40
    # stretch squeezes the whole picture: its left column is the photo's left column
    expected = np.asarray(wide.resize((64, 64), Image.Resampling.LANCZOS))
    assert np.abs(stretch.astype(int) - expected.astype(int)).max() <= 1


def test_max_side_shrinks_only_large_images(tf, tmp_path):
    write(tmp_path / "r" / "a" / "big.jpg", samples.encode(samples.rgb("coffee", 400), "JPEG"))
    small = samples.encode(samples.rgb("coffee", 40), "JPEG")
    write(tmp_path / "r" / "a" / "small.jpg", small)
    _, records, _ = convert(plan_image_folder(str(tmp_path / "r")), rendering(max_side=100))
    big = records["a/big.jpg"]
    assert stored_shape(big) == (67, 100, 3) == decoded_shape(tf, big)
    assert value(records["a/small.jpg"], "image/encoded") == small  # untouched, not re-encoded


def test_exif_orientation_is_kept_by_default_and_applied_on_request(tf, tmp_path):
    data = samples.exif_rotated_jpeg(6)
    write(tmp_path / "r" / "a" / "rotated.jpg", data)
    plan = plan_image_folder(str(tmp_path / "r"))
    kept = convert(plan)[1]["a/rotated.jpg"]
    assert value(kept, "image/encoded") == data
    assert stored_shape(kept) == (85, 128, 3) == decoded_shape(tf, kept)  # TF ignores EXIF
    applied = convert(plan, rendering(apply_exif_orientation=True))[1]["a/rotated.jpg"]
    assert value(applied, "image/format") == b"jpeg"
    assert stored_shape(applied) == (128, 85, 3) == decoded_shape(tf, applied)
    with Image.open(io.BytesIO(data)) as original:
        upright = np.asarray(ImageOps.exif_transpose(original)).astype(int)
    assert np.abs(_decoded(tf, applied).astype(int) - upright).mean() < 4  # JPEG re-encode


def test_exif_orientation_one_is_not_re_encoded(tmp_path):
    data = samples.exif_rotated_jpeg(1)
    write(tmp_path / "r" / "a" / "upright.jpg", data)
    records = convert(plan_image_folder(str(tmp_path / "r")), rendering(apply_exif_orientation=True))[1]
    assert value(records["a/upright.jpg"], "image/encoded") == data


def test_convert_mode(tf, tmp_path):
    write(tmp_path / "r" / "a" / "color.jpg", samples.build("jpeg_rgb"))
    write(tmp_path / "r" / "a" / "gray.png", samples.build("png_gray"))
    write(tmp_path / "r" / "a" / "gray16.png", samples.build("png_gray16"))
    plan = plan_image_folder(str(tmp_path / "r"))
    to_gray = convert(plan, rendering(convert_mode="L"))[1]
    assert decoded_shape(tf, to_gray["a/color.jpg"]) == stored_shape(to_gray["a/color.jpg"])
    assert value(to_gray["a/color.jpg"], "image/channels") == 1
    assert value(to_gray["a/color.jpg"], "image/format") == b"jpeg"
    assert value(to_gray["a/gray.png"], "image/encoded") == samples.build("png_gray")  # already L
    # 16-bit to 8-bit scales (>> 8) instead of clipping every value above 255 to white
    gray16 = _decoded(tf, to_gray["a/gray16.png"])[..., 0]
    np.testing.assert_array_equal(gray16, samples.photo("camera"))
    to_rgb = convert(plan, rendering(convert_mode="RGB"))[1]
    assert stored_shape(to_rgb["a/gray.png"]) == (128, 128, 3) == decoded_shape(tf, to_rgb["a/gray.png"])
    assert value(to_rgb["a/color.jpg"], "image/encoded") == samples.build("jpeg_rgb")


def test_encode_png_is_lossless(tf, tmp_path):
    write(tmp_path / "r" / "a" / "x.webp", samples.build("webp_alpha_lossless"))
    features = convert(plan_image_folder(str(tmp_path / "r")), rendering(encode="png"))[1]["a/x.webp"]
    assert value(features, "image/format") == b"png"
    np.testing.assert_array_equal(_decoded(tf, features), np.asarray(samples.rgba()))


def test_resize_uses_jpeg_draft_mode(tf, tmp_path, monkeypatch):
    from PIL import JpegImagePlugin

    calls = []
    original = JpegImagePlugin.JpegImageFile.draft

    def spy(self, mode, size):
        result = original(self, mode, size)
        calls.append((self.size, size))
        return result

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    write(tmp_path / "r" / "a" / "big.jpg",
          samples.encode(samples.rgb("astronaut", 512), "JPEG", quality=95))
    plan = plan_image_folder(str(tmp_path / "r"))
    features = convert(plan, rendering(resize=(64, 64), encode="jpeg"))[1]["a/big.jpg"]
    # A bit more than the target is requested (80 px, a reducing gap), so the 512 px JPEG
    # is decoded at 1/4 scale (128 px) straight from the DCT, then resampled to 64.
    assert calls and calls[0][1] == (80, 80) and calls[0][0] == (128, 128)
    assert decoded_shape(tf, features) == (64, 64, 3)
    # Same pixels as a full decode + LANCZOS, within rounding (PNG output: no JPEG noise).
    lossless = convert(plan, rendering(resize=(64, 64), encode="png"))[1]["a/big.jpg"]
    reference = np.asarray(samples.rgb("astronaut", 512).resize((64, 64), Image.Resampling.LANCZOS))
    assert np.abs(_decoded(tf, lossless).astype(int) - reference.astype(int)).mean() < 2


# --------------------------------------------------------------------------- bad images


def _bad_tree(root, outside):
    good = {
        "cat/good.jpg": samples.build("jpeg_rgb"),
        "cat/good_cmyk.jpg": samples.build("jpeg_cmyk"),
        "dog/good.png": samples.build("png_rgba"),
        "dog/good.webp": samples.build("webp_lossy"),
        "dog/good.tif": samples.build("tiff_rgb"),
    }
    jpeg, png = samples.build("jpeg_progressive"), samples.build("png_palette")
    bomb_header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    bad = {
        "cat/empty.jpg": (b"", "empty_file"),
        "cat/truncated.jpg": (jpeg[: len(jpeg) // 2], "truncated_image"),
        "cat/no_eoi.jpg": (jpeg[:-2], "truncated_image"),
        "dog/truncated.png": (png[: len(png) * 2 // 3], "truncated_image"),
        "dog/text.jpg": (b"I am a text file wearing a .jpg extension\n", "not_an_image"),
        "dog/iphone.jpg": (b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64,
                           "unsupported_format"),
        "dog/bad_crc.png": (png[:60] + bytes([png[60] ^ 0xFF]) + png[61:], "corrupt_image"),
        "cat/bomb.png": (b"\x89PNG\r\n\x1a\n" + samples.png_chunk(b"IHDR", bomb_header)
                         + samples.png_chunk(b"IDAT", zlib.compress(b"\x00" * 1000))
                         + samples.png_chunk(b"IEND", b""), "decompression_bomb"),
        "cat/huge.jpg": (samples.build("jpeg_rgb") + b"\x00" * 300_000, "image_too_large"),
        "cat/notes.txt": (b"labelling notes", "not_an_image_extension"),
        "cat/.DS_Store": (b"\x00\x00\x00\x01Bud1", "hidden_file"),
        ".git/config": (b"[core]", "hidden_file"),
        "dog/.hidden.jpg": (samples.build("jpeg_rgb"), "hidden_file"),
        "stray.jpg": (samples.build("jpeg_rgb"), "no_label"),
    }
    for relative, data in good.items():
        write(root / relative, data)
    for relative, (data, _) in bad.items():
        write(root / relative, data)
    write(outside / "secret.jpg", samples.build("jpeg_gray"))
    os.symlink(outside / "secret.jpg", root / "cat" / "escape.jpg")
    os.symlink(root / "cat" / "good.jpg", root / "dog" / "alias.jpg")  # inside: fine
    os.symlink(root / "nowhere.jpg", root / "dog" / "dangling.jpg")
    expected = {relative: reason for relative, (_, reason) in bad.items()}
    expected["cat/escape.jpg"] = "outside_allowed_roots"
    expected["dog/dangling.jpg"] = "missing_file"
    return good, expected


def test_tree_mixing_good_and_every_kind_of_bad_file(tf, tmp_path, monkeypatch):
    root, outside = tmp_path / "root", tmp_path / "outside"
    good, expected = _bad_tree(root, outside)
    opened = []
    real_open = LocalFileSystem.open

    def tracking_open(self, path, *args, **kwargs):
        opened.append(path)
        return real_open(self, path, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "open", tracking_open)
    plan = plan_image_folder(str(root))
    assert plan.labels == ("cat", "dog")
    batches, records, dead = convert(plan, ImageConfig(max_image_bytes=200_000))

    assert sorted(records) == sorted([*good, "dog/alias.jpg"])
    assert reasons(dead) == expected
    assert all(doc["reason"] in REASONS for doc in dead)
    total = sum(batch.input_count for batch in batches)
    assert total == plan.input_count == len(records) + len(dead)
    for features in records.values():
        assert decoded_shape(tf, features) == stored_shape(features)
    by_name = {doc["filename"]: doc for doc in dead}
    assert by_name["cat/truncated.jpg"]["source"] == str(root / "cat" / "truncated.jpg")
    assert by_name["cat/truncated.jpg"]["label"] == "cat" and by_name["cat/truncated.jpg"]["split"] == "data"
    # Files over --max-image-bytes are never opened, nor paths lexically outside the roots.
    assert str(root / "cat" / "huge.jpg") not in opened
    assert by_name["cat/escape.jpg"]["message"].endswith(f"outside the allowed roots ['{root}']")
    assert str(outside / "secret.jpg") in by_name["cat/escape.jpg"]["message"]


def test_full_validation_decodes_what_the_header_check_cannot(tf, tmp_path):
    # A PNG whose every chunk is well formed (valid CRCs) but whose compressed pixel data
    # is garbage: only a decode notices. TensorFlow cannot decode it either.
    header = struct.pack(">IIBBBBB", 64, 48, 8, 2, 0, 0, 0)
    garbage = (b"\x89PNG\r\n\x1a\n" + samples.png_chunk(b"IHDR", header)
               + samples.png_chunk(b"IDAT", b"\x78\x9c" + bytes(range(200)))
               + samples.png_chunk(b"IEND", b""))
    write(tmp_path / "r" / "a" / "garbage.png", garbage)
    write(tmp_path / "r" / "a" / "fine.png", samples.build("png_rgb"))
    plan = plan_image_folder(str(tmp_path / "r"))
    _, records, dead = convert(plan, ImageConfig(validate="header"))
    assert sorted(records) == ["a/fine.png", "a/garbage.png"] and dead == []
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(garbage)
    _, records, dead = convert(plan, ImageConfig(validate="full"))
    assert sorted(records) == ["a/fine.png"]
    assert reasons(dead) == {"a/garbage.png": "corrupt_image"}


def _before_iend(name: str, kind: bytes, body: bytes) -> bytes:
    data = samples.build(name)
    return data[:-12] + samples.png_chunk(kind, body) + data[-12:]


@pytest.mark.parametrize("validate", ["header", "full"])
def test_structures_tensorflow_refuses_are_dead_letters_in_both_modes(tf, tmp_path, validate):
    jpeg = samples.build("jpeg_progressive")
    bad = {
        "a/no_image.gif": b"GIF89a" + struct.pack("<HHBBB", 10, 10, 0x80, 0, 0)
                          + b"\x00\x00\x00\xff\xff\xff;",
        "a/unknown_critical_chunk.png": _before_iend("png_rgb", b"ABCD", b"hello"),
        "a/second_plte_after_idat.png": _before_iend("png_palette", b"PLTE", bytes(6)),
        "a/truncated_then_another.jpg": jpeg[: len(jpeg) // 2] + samples.build("jpeg_gray"),
    }
    # A tRNS after IDAT libpng ignores: stored, with the 3 channels TF decodes.
    ignored_trns = _before_iend("png_palette", b"tRNS", b"\x00")
    for relative, data in bad.items():
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.io.decode_image(data)
        write(tmp_path / "r" / relative, data)
    write(tmp_path / "r" / "a" / "ignored_trns.png", ignored_trns)
    plan = plan_image_folder(str(tmp_path / "r"))
    _, records, dead = convert(plan, ImageConfig(validate=validate))
    assert reasons(dead) == {relative: "corrupt_image" for relative in bad}
    assert sorted(records) == ["a/ignored_trns.png"]
    features = records["a/ignored_trns.png"]
    assert stored_shape(features) == decoded_shape(tf, features)
    assert value(features, "image/channels") == 3


def _png_stream_split(tail: int, keep_tail: bool) -> bytes:
    """png_rgb with the last `tail` bytes of its zlib stream (the checksum) moved into an
    IDAT after a tEXt chunk, or dropped."""
    data = samples.build("png_rgb")
    assert data.count(b"IDAT") == 1
    idat = data.index(b"IDAT") - 4
    (length,) = struct.unpack_from(">I", data, idat)
    stream = data[idat + 8 : idat + 8 + length]
    later = samples.png_chunk(b"tEXt", b"k\x00v") + samples.png_chunk(b"IDAT", stream[-tail:])
    return (data[:idat] + samples.png_chunk(b"IDAT", stream[:-tail])
            + (later if keep_tail else b"") + data[idat + 12 + length :])


@pytest.mark.parametrize("tail, keep_tail", [(4, True), (2, True), (4, False)],
                         ids=["checksum_after_text", "half_checksum_after_text", "no_checksum"])
def test_full_validation_reads_a_png_stream_as_libpng_does(tf, tmp_path, tail, keep_tail):
    # Pillow stops once it has the rows; libpng reads the stream to its end, from the
    # first run of consecutive IDATs only: TF refuses these. Telling needs inflating, so
    # the header check lets them pass (see transforms.images.headers).
    broken = _png_stream_split(tail, keep_tail)
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(broken)
    # An IDAT after another chunk holding nothing the stream needs: libpng ignores it.
    original = samples.build("png_rgb")
    extra = original[:-12] + samples.png_chunk(b"tEXt", b"k\x00v") + samples.png_chunk(
        b"IDAT", zlib.compress(b"more")) + original[-12:]
    assert tf.io.decode_image(extra).shape == tf.io.decode_image(original).shape
    write(tmp_path / "r" / "a" / "broken.png", broken)
    write(tmp_path / "r" / "a" / "extra_idat.png", extra)
    plan = plan_image_folder(str(tmp_path / "r"))
    assert convert(plan, ImageConfig(validate="header"))[2] == []
    _, records, dead = convert(plan, ImageConfig(validate="full"))
    assert sorted(records) == ["a/extra_idat.png"]
    assert reasons(dead) == {"a/broken.png": "corrupt_image"}


def test_full_validation_decodes_every_frame(tmp_path):
    animated = bytearray(samples.build("gif_animated"))
    # Damage the LZW data of the last frame without changing any block length.
    last = animated.rindex(b"\x2c")
    for offset in range(last + 14, last + 60):
        animated[offset] = 0xFF
    write(tmp_path / "r" / "a" / "anim.gif", bytes(animated))
    plan = plan_image_folder(str(tmp_path / "r"))
    assert convert(plan, ImageConfig(validate="header"))[2] == []
    dead = convert(plan, ImageConfig(validate="full"))[2]
    assert reasons(dead) == {"a/anim.gif": "corrupt_image"}


def test_decompression_bombs(tmp_path):
    root = tmp_path / "r"
    write(root / "a" / "photo.png", samples.build("png_rgb"))          # 128 x 85 = 10880
    write(root / "a" / "photo.tif", samples.build("tiff_rgb"))         # 128 x 128, via Pillow
    write(root / "a" / "anim.gif", samples.build("gif_animated"))      # 3 x 128 x 85
    write(root / "a" / "small.gif", samples.build("gif"))              # 128 x 85
    _, records, dead = convert(plan_image_folder(str(root)), ImageConfig(max_pixels=12_000))
    assert sorted(records) == ["a/photo.png", "a/small.gif"]
    assert reasons(dead) == {"a/photo.tif": "decompression_bomb", "a/anim.gif": "decompression_bomb"}


def test_pillow_decompression_bomb_error_is_a_dead_letter(tmp_path, monkeypatch):
    write(tmp_path / "r" / "a" / "photo.tif", samples.build("tiff_rgb"))
    plan = plan_image_folder(str(tmp_path / "r"))
    fn = ConvertImages(ImageConfig(), plan.source)
    fn.setup()
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow's own guard trips first
    (batch,) = fn.process(plan.work_units[0])
    assert [json.loads(doc)["reason"] for doc in batch.dead_letters] == ["decompression_bomb"]


def test_unreadable_file_is_a_dead_letter(tmp_path, monkeypatch):
    write(tmp_path / "r" / "a" / "locked.jpg", samples.build("jpeg_rgb"))
    write(tmp_path / "r" / "a" / "fine.jpg", samples.build("jpeg_rgb"))
    real_open = LocalFileSystem.open

    def denied(self, path, *args, **kwargs):  # tests run as root: chmod cannot lock a file
        if path.endswith("locked.jpg"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(self, path, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "open", denied)
    _, records, dead = convert(plan_image_folder(str(tmp_path / "r")))
    assert sorted(records) == ["a/fine.jpg"]
    assert reasons(dead) == {"a/locked.jpg": "unreadable_uri"}
    assert "Permission denied" in dead[0]["message"]


def test_animated_webp_without_alpha_is_refused_not_truncated_to_one_frame(tf, tmp_path):
    animated = samples.encode(samples.rgb("chelsea"), "WEBP", save_all=True, duration=80,
                              append_images=[samples.rgb("coffee")])
    write(tmp_path / "r" / "a" / "anim.webp", animated)
    plan = plan_image_folder(str(tmp_path / "r"))
    assert reasons(convert(plan)[2]) == {"a/anim.webp": "unsupported_format"}
    # Asking for a re-encode keeps the first frame, as decode_image(expand_animations=False).
    features = convert(plan, rendering(encode="png"))[1]["a/anim.webp"]
    assert decoded_shape(tf, features) == stored_shape(features) == (85, 128, 3)


def test_multi_page_tiff_is_refused_by_default(tmp_path):
    pages = samples.encode(samples.rgb("coffee"), "TIFF", save_all=True,
                           append_images=[samples.rgb("chelsea")])
    write(tmp_path / "r" / "a" / "pages.tif", pages)
    plan = plan_image_folder(str(tmp_path / "r"))
    assert reasons(convert(plan)[2]) == {"a/pages.tif": "unsupported_format"}
    assert list(convert(plan, rendering(encode="png"))[1]) == ["a/pages.tif"]


# --------------------------------------------------------------------------- planning


def test_split_folders(tf, tmp_path):
    root = tmp_path / "r"
    write(root / "train" / "cat" / "a.jpg", samples.build("jpeg_rgb"))
    write(root / "train" / "dog" / "b.png", samples.build("png_rgb"))
    write(root / "validation" / "cat" / "c.jpg", samples.build("jpeg_gray"))
    write(root / "test" / "bird" / "d.webp", samples.build("webp_lossy"))
    write(root / "test" / "e.jpg", samples.build("jpeg_rgb"))  # no label folder
    plan = plan_image_folder(str(root))
    assert plan.labels == ("bird", "cat", "dog")
    assert plan.splits == ("train", "validation", "test")
    batches, records, dead = convert(plan)
    by_split = {}
    for batch in batches:
        by_split.setdefault(batch.split, [0, 0, 0])
        by_split[batch.split][0] += len(batch.records)
        by_split[batch.split][1] += len(batch.dead_letters)
        by_split[batch.split][2] += batch.input_count
    assert by_split == {"train": [2, 0, 2], "validation": [1, 0, 1], "test": [1, 1, 2]}
    assert value(records["validation/cat/c.jpg"], "image/class/label") == 1
    assert reasons(dead) == {"test/e.jpg": "no_label"}


def test_split_folders_mixed_with_label_folders_are_refused(tmp_path):
    write(tmp_path / "r" / "train" / "cat" / "a.jpg", samples.build("jpeg_rgb"))
    write(tmp_path / "r" / "dog" / "b.jpg", samples.build("jpeg_rgb"))
    with pytest.raises(ValueError, match="mixes split folders"):
        plan_image_folder(str(tmp_path / "r"))


def test_labels_come_only_from_folders_with_images_and_work_units_group_images(tmp_path):
    root = tmp_path / "r"
    for i in range(150):
        write(root / ("cat" if i % 2 else "dog") / f"{i:03d}.jpg", b"x")
    write(root / "docs" / "readme.md", b"# not a label")
    plan = plan_image_folder(str(root), images_per_unit=64)
    assert plan.labels == ("cat", "dog")
    # Slices of each folder's listing (cat, docs, dog), never across folders.
    assert [len(list(plan.source.items(unit))) for unit in plan.work_units] == [64, 11, 1, 64, 11]
    assert [unit.index for unit in plan.work_units] == [0, 1, 2, 3, 4]
    assert next(plan.source.items(plan.work_units[0]))["uri"] == str(root / "cat" / "001.jpg")
    assert plan.labels_txt == b"cat\ndog\n"
    assert plan.extra_files()["labels.txt"] == b"cat\ndog\n"


def test_missing_root_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        plan_image_folder(str(tmp_path / "absent"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError):
        plan_image_folder(str(tmp_path / "empty"))


def test_work_units_and_converter_pickle(tmp_path):
    write(tmp_path / "r" / "a" / "x.jpg", samples.build("jpeg_rgb"))
    plan = plan_image_folder(str(tmp_path / "r"))
    fn = pickle.loads(pickle.dumps(ConvertImages(rendering(resize=(8, 8)), plan.source)))
    unit = pickle.loads(pickle.dumps(plan.work_units[0]))
    (batch,) = fn.process(unit)
    assert len(batch.records) == 1


def test_sample_data_converts_in_a_beam_pipeline(tf):
    root = os.path.join(os.path.dirname(pipeline_package.__file__), "sample_data", "images")
    plan = plan_image_folder(root)
    assert plan.labels == ("cat", "coffee", "person") and plan.input_count == 6

    def check(batches):
        records = [r for b in batches for r in b.records]
        assert len(records) == 6 and not any(b.dead_letters for b in batches)
        assert sum(b.input_count for b in batches) == 6
        for payload in records:
            features = {n: v for n, (_, v) in decode_example(payload).items()}
            assert decoded_shape(tf, features) == stored_shape(features)

    with beam.Pipeline(runner=FnApiRunner()) as pipeline:  # no Prism download attempt
        batches = (pipeline | beam.Create(list(plan.work_units))
                   | beam.ParDo(ConvertImages(ImageConfig(), plan.source)))
        assert_that(batches, check)


def test_feature_spec_parses_every_record_in_tensorflow(tf, tmp_path):
    write(tmp_path / "r" / "a" / "x.jpg", samples.build("jpeg_rgb"))
    write(tmp_path / "r" / "b" / "y.png", samples.build("png_la"))
    plan = plan_image_folder(str(tmp_path / "r"))
    batches, _, _ = convert(plan)
    payloads = [r for b in batches for r in b.records]
    spec = json.loads(plan.extra_files()["feature_spec.json"])["features"]
    parse_spec_ = {name: tf.io.FixedLenFeature([], tf.as_dtype(entry["dtype"]))
                   for name, entry in spec.items()}
    parsed = tf.io.parse_example(payloads, parse_spec_)
    assert parsed["image/class/text"].numpy().tolist() == [b"a", b"b"]
    assert parsed["image/channels"].numpy().tolist() == [3, 2]


# --------------------------------------------------------------------------- manifests


MANIFEST_SPEC = """
features:
  - name: caption
    type: string
  - name: score
    type: float
  - name: photographer_id
    column: photographer
    type: int64
    required: true
"""


def _manifest_tree(tmp_path):
    base = tmp_path / "data"
    write(base / "images" / "cat.jpg", samples.build("jpeg_rgb"))
    write(base / "images" / "dog.png", samples.build("png_gray"))
    write(base / "images" / "sub" / "bird.webp", samples.build("webp_alpha"))
    write(base / "images" / "fish.gif", samples.build("gif"))
    write(tmp_path / "outside" / "secret.jpg", samples.build("jpeg_gray"))
    os.symlink(tmp_path / "outside" / "secret.jpg", base / "images" / "innocent.jpg")
    (base / "images" / "folder.jpg").mkdir()
    return base


def test_csv_manifest(tf, tmp_path):
    base = _manifest_tree(tmp_path)
    cat = str(base / "images" / "cat.jpg")
    rows = [
        ["image", "label", "caption", "score", "photographer"],
        ["images/cat.jpg", "cat", "a cat, on a mat", "0.5", "7"],           # relative
        [cat, "cat", '""', "1.5", "8"],                                      # absolute inside
        ["./images/sub/../dog.png", "dog", "", "", "9"],                     # .. staying inside
        ["images/sub/bird.webp", "bird", "tweet", "2", "10"],
        ["images/fish.gif", "horse", "x", "1", "11"],                        # unknown_label
        ["images/missing.jpg", "cat", "x", "1", "12"],                       # missing_file
        ["../outside/secret.jpg", "cat", "x", "1", "13"],                    # .. escape
        ["/etc/hostname", "cat", "x", "1", "14"],                            # absolute outside
        ["images/innocent.jpg", "cat", "x", "1", "15"],                      # symlink escape
        ["gs://someone-elses-bucket/x.jpg", "cat", "x", "1", "16"],          # other bucket
        ["images/folder.jpg", "cat", "x", "1", "17"],                        # a directory
        ["images/cat.jpg", "", "x", "1", "18"],                              # missing_label
        ["images/cat.jpg", "dog", "x", "abc", "19"],                         # invalid_float
        ["images/cat.jpg", "dog", "x", "1", ""],                             # missing_required
        ["", "dog", "x", "1", "20"],                                         # missing_image_path
    ]
    text = "\n".join(",".join(f'"{c}"' if "," in c else c for c in row) for row in rows) + "\n"
    write(base / "manifest.csv", text.encode())
    plan = plan_image_manifest(str(base / "manifest.csv"), "image", label_column="label",
                               spec=parse_spec(MANIFEST_SPEC), labels=["bird", "cat", "dog", "fish"])
    assert plan.allowed_roots == (str(base),)
    assert plan.labels == ("bird", "cat", "dog", "fish") and plan.input_count == 15
    batches, records, dead = convert(plan)
    assert sum(b.input_count for b in batches) == 15 == len(records) + len(dead)
    assert set(records) == {"images/cat.jpg", cat, "./images/sub/../dog.png", "images/sub/bird.webp"}
    first = records["images/cat.jpg"]
    assert value(first, "caption") == b"a cat, on a mat" and value(first, "photographer_id") == 7
    assert first["score"] == pytest.approx([0.5])
    assert value(first, "image/class/label") == 1 and value(first, "image/class/text") == b"cat"
    assert records[cat]["caption"] == [b""]                      # quoted "" is the empty string
    assert "caption" not in records["./images/sub/../dog.png"]   # empty cell is missing
    for features in records.values():
        assert decoded_shape(tf, features) == stored_shape(features)
    by_row = {doc["row"]: doc for doc in dead}
    assert {row: doc["reason"] for row, doc in by_row.items()} == {
        5: "unknown_label", 6: "missing_file", 7: "outside_allowed_roots",
        8: "outside_allowed_roots", 9: "outside_allowed_roots", 10: "outside_allowed_roots",
        11: "unreadable_uri", 12: "missing_label", 13: "invalid_float", 14: "missing_required",
        15: "missing_image_path",
    }
    assert by_row[13]["column"] == "score" and by_row[5]["column"] == "label"
    assert by_row[7]["source"] == str(tmp_path / "outside" / "secret.jpg")
    assert by_row[9]["message"].startswith(str(base / "images" / "innocent.jpg"))
    assert by_row[5]["raw"] == "images/fish.gif,horse,x,1,11"


def test_manifest_default_labels_extra_columns_and_allowed_roots(tf, tmp_path):
    base = _manifest_tree(tmp_path)
    lines = [
        {"path": "images/cat.jpg", "label": 10, "split": "train", "weight": 1, "tags": ["a", "b"]},
        {"path": "images/dog.png", "label": 2, "split": "test", "weight": 2.5, "tags": []},
        {"path": str(tmp_path / "outside" / "secret.jpg"), "label": 2, "split": "train"},
        {"path": "images/fish.gif", "label": 2, "split": "../evil"},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\n{not json\n[1, 2]\n"
    write(base / "m.jsonl", text.encode())
    plan = plan_image_manifest(str(base / "m.jsonl"), "path", label_column="label", split_column="split")
    assert plan.labels == ("2", "10")  # integer labels sort numerically
    # Rejected rows (bad split, bad JSON) name no output split: no empty "data" shard for them.
    assert plan.splits == ("train", "test")
    assert set(plan.extra_features) == {"weight", "tags"}
    batches, records, dead = convert(plan)
    assert value(records["images/cat.jpg"], "image/class/label") == 1
    assert records["images/cat.jpg"]["tags"] == [b"a", b"b"]
    assert records["images/dog.png"]["weight"] == pytest.approx([2.5])
    assert sorted(doc["reason"] for doc in dead) == [
        "invalid_json", "invalid_json", "invalid_split", "outside_allowed_roots"]
    # ... and are counted under no split, not a "data" split the output does not have.
    assert {b.split for b in batches} == {"train", "test", DEAD_LETTER_SPLIT}
    assert {doc["split"] for doc in dead if doc["reason"] != "outside_allowed_roots"} == {None}
    # Explicit allowed roots admit the outside folder (and only what they name).
    wider = plan_image_manifest(str(base / "m.jsonl"), "path", label_column="label",
                                split_column="split",
                                allowed_roots=[str(base), str(tmp_path / "outside")])
    assert "outside_allowed_roots" not in [d["reason"] for d in convert(wider)[2]]


def test_manifest_spec_splits_are_stable(tmp_path):
    base = _manifest_tree(tmp_path)
    text = "image,photographer\n" + "".join(f"images/cat.jpg,{i}\n" for i in range(40))
    write(base / "m.csv", text.encode())
    spec = parse_spec("features:\n  - {name: photographer, type: int64}\n"
                      "splits: {train: 50, test: 50}\nsplit_key: [photographer]\n")
    plan = plan_image_manifest(str(base / "m.csv"), "image", spec=spec)
    again = plan_image_manifest(str(base / "m.csv"), "image", spec=spec)
    splits = [item["split"] for item in planned_items(plan)]
    assert splits == [item["split"] for item in planned_items(again)]
    assert set(splits) == {"train", "test"} and plan.splits == ("train", "test")


def test_manifest_missing_column_is_an_error(tmp_path):
    write(tmp_path / "m.csv", b"file,label\na.jpg,cat\n")
    with pytest.raises(ValueError, match="no column 'image'"):
        plan_image_manifest(str(tmp_path / "m.csv"), "image")


def test_manifest_with_invalid_encoding_dead_letters_the_row(tmp_path):
    base = _manifest_tree(tmp_path)
    write(base / "m.csv", b"image,caption\nimages/cat.jpg,caf\xe9\nimages/dog.png,ok\n")
    _, records, dead = convert(plan_image_manifest(str(base / "m.csv"), "image"))
    assert list(records) == ["images/dog.png"]
    assert [doc["reason"] for doc in dead] == ["invalid_encoding"]


def test_config_validation():
    with pytest.raises(ValueError):
        ImageConfig(validate="deep")
    with pytest.raises(ValueError):
        ImageConfig(render={"resize": (3, 4)})
    with pytest.raises(ValueError):
        RenderOptions(resize=(224, 224), max_side=100)
    with pytest.raises(ValueError):
        RenderOptions(resize_mode="crop")
    with pytest.raises(ValueError):
        RenderOptions(quality=0)
    assert RenderOptions(resize=[3, 4]).resize == (3, 4)


# --------------------------------------------------------------------------- gs://


def _upload(uri: str, data: bytes) -> None:
    with FileSystems.create(uri, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        handle.write(data)


def test_gcs_folder_and_manifest_work_like_local(tf, tmp_path, gcs_emulator):
    root = tmp_path / "r"
    files = {"cat/a.jpg": samples.build("jpeg_rgb"), "cat/b.tif": samples.build("tiff_rgb"),
             "dog/c.png": samples.build("png_rgba"), "dog/bad.jpg": b"not an image",
             "dog/.hidden.png": samples.build("png_rgb")}
    for relative, data in files.items():
        write(root / relative, data)
        _upload(f"{gcs_emulator}/images/{relative}", data)
    local = convert(plan_image_folder(str(root)))
    remote_plan = plan_image_folder(f"{gcs_emulator}/images")
    assert remote_plan.allowed_roots == (f"{gcs_emulator}/images/",)
    remote = convert(remote_plan)
    assert [b.records for b in remote[0]] == [b.records for b in local[0]]  # byte-identical
    assert reasons(remote[2]) == reasons(local[2]) == {"dog/bad.jpg": "not_an_image",
                                                       "dog/.hidden.png": "hidden_file"}
    manifest = ("image,label\nimages/cat/a.jpg,cat\nimages/dog/missing.png,dog\n"
                "gs://another-bucket/x.jpg,dog\n")
    _upload(f"{gcs_emulator}/m.csv", manifest.encode())
    plan = plan_image_manifest(f"{gcs_emulator}/m.csv", "image", label_column="label")
    assert plan.allowed_roots == (f"{gcs_emulator}/",)
    _, records, dead = convert(plan)
    assert list(records) == ["images/cat/a.jpg"]
    assert value(records["images/cat/a.jpg"], "image/encoded") == files["cat/a.jpg"]
    assert sorted(doc["reason"] for doc in dead) == ["missing_file", "outside_allowed_roots"]


# --------------------------------------------------------------------------- record encoding

def test_record_encoder_matches_the_reference_on_image_records(tmp_path):
    write(tmp_path / "r" / "a" / "x.jpg", samples.build("jpeg_rgb"))
    _, records, _ = convert(plan_image_folder(str(tmp_path / "r")))
    (features,) = records.values()
    kinds = {"image/height": "int64", "image/width": "int64", "image/channels": "int64",
             "image/class/label": "int64"}
    typed = {name: (kinds.get(name, "bytes"), values) for name, values in features.items()}
    assert b"".join(encode_example_parts(typed)) == encode_example(typed)


def test_large_units_leave_in_several_chunks(tmp_path):
    for i in range(5):
        write(tmp_path / "r" / "a" / f"{i}.png", samples.build("png_rgb"))
    write(tmp_path / "r" / "a" / "bad.jpg", b"x")
    config = ImageConfig(chunk_bytes=2 * len(samples.build("png_rgb")))
    batches, records, dead = convert(plan_image_folder(str(tmp_path / "r")), config)
    assert [b.key for b in batches] == ["00000000:00000000", "00000000:00000001", "00000000:00000002"]
    assert [len(b.records) for b in batches] == [2, 2, 1]
    assert sum(b.input_count for b in batches) == 6 == len(records) + len(dead)


def test_float_tiff_is_unsupported_and_unknown_schemes_are_unreadable(tmp_path):
    base = tmp_path / "data"
    floats = Image.fromarray(samples.photo("camera").astype(np.float32) / 255.0, "F")
    write(base / "depth.tif", samples.encode(floats, "TIFF"))
    write(base / "m.csv", b"image\ndepth.tif\nfoo://bucket/x.jpg\n")
    plan = plan_image_manifest(str(base / "m.csv"), "image",
                               allowed_roots=[str(base), "foo://bucket/"])
    _, records, dead = convert(plan)
    assert records == {}
    assert reasons(dead) == {"depth.tif": "unsupported_format", "foo://bucket/x.jpg": "unreadable_uri"}


def test_broken_exif_block_means_no_orientation(tf, tmp_path):
    jpeg = samples.build("jpeg_rgb")
    garbage_exif = b"Exif\x00\x00MM\x00\x2a\x00\x00\x00\x08\xff\xff" + b"\x13" * 40
    app1 = b"\xff\xe1" + struct.pack(">H", len(garbage_exif) + 2) + garbage_exif
    data = jpeg[:2] + app1 + jpeg[2:]
    write(tmp_path / "r" / "a" / "odd_exif.jpg", data)
    features = convert(plan_image_folder(str(tmp_path / "r")),
                       rendering(apply_exif_orientation=True))[1]["a/odd_exif.jpg"]
    assert value(features, "image/encoded") == data
    assert decoded_shape(tf, features) == stored_shape(features)
