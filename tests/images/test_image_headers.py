"""Header parsing (transforms/image_headers.py) checked against TensorFlow's decode_image."""

from __future__ import annotations

import functools
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.images import image_samples as samples
from transforms.images.headers import HeaderError, parse_header, sniff_format

NATIVE = [name for name, (_, native) in samples.VARIANTS.items() if native]
REASONS = {"empty_file", "not_an_image", "unsupported_format", "truncated_image", "corrupt_image"}


@functools.cache
def sample(name: str) -> bytes:
    return samples.build(name)


def tf_shape(tf, data: bytes) -> tuple[int, int, int, int]:
    """(height, width, channels, frames) of tf.io.decode_image."""
    shape = tuple(tf.io.decode_image(data).shape)
    return shape[-3], shape[-2], shape[-1], shape[0] if len(shape) == 4 else 1


@pytest.mark.parametrize("name", NATIVE)
def test_header_gives_exactly_what_tensorflow_decodes(tf, name):
    data = sample(name)
    info = parse_header(data)
    assert info.tf_native, info.note
    assert (info.height, info.width, info.channels, info.frames) == tf_shape(tf, data)


# The channel counts that are easy to get wrong, spelled out (and checked against TF above).
@pytest.mark.parametrize("name, channels", [
    ("jpeg_cmyk", 3), ("jpeg_gray", 1), ("png_palette", 3), ("png_palette_transparent", 4),
    ("png_gray_trns", 1), ("png_gray", 1), ("png_la", 2), ("png_rgba", 4), ("png_gray16", 1),
    ("png_rgb16", 3), ("png_rgba16", 4), ("png_bilevel", 1), ("gif", 3), ("gif_animated", 3),
    ("bmp_gray", 1), ("bmp_rgb", 3), ("bmp_rgba", 4), ("webp_lossy", 3), ("webp_lossless", 3),
    ("webp_alpha", 4), ("webp_alpha_lossless", 4), ("webp_animated_alpha", 4),
])
def test_channels_of_tricky_variants(tf, name, channels):
    assert parse_header(sample(name)).channels == channels
    assert tf_shape(tf, sample(name))[2] == channels


def test_gif_size_is_the_largest_frame_not_the_logical_screen(tf):
    data = sample("gif_small_frame")
    assert Image.open(__import__("io").BytesIO(data)).size == (80, 60)  # Pillow: the screen
    info = parse_header(data)
    assert (info.width, info.height) != (80, 60)
    assert (info.height, info.width, info.channels, info.frames) == tf_shape(tf, data)


def test_animated_gif_reports_frames(tf):
    info = parse_header(sample("gif_animated"))
    assert info.frames == 3
    assert info.pixels == 3 * info.width * info.height


def _pillow_pixels(data: bytes) -> np.ndarray:
    with Image.open(__import__("io").BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def test_palette_bmp_is_not_native_because_tf_returns_palette_indices(tf):
    data = sample("bmp_palette")
    info = parse_header(data)
    assert not info.tf_native and "palette" in info.note
    decoded = tf.io.decode_image(data).numpy()
    assert decoded.shape[-1] == 1  # TF ignores the palette: indices, not colours
    assert not np.array_equal(np.repeat(decoded, 3, axis=-1), _pillow_pixels(data))


def test_bilevel_bmp_is_not_native_because_tf_refuses_it(tf):
    data = sample("bmp_bilevel")
    assert not parse_header(data).tf_native
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(data)


def test_bmp_with_trailing_bytes_is_not_native(tf):
    data = sample("bmp_rgb") + b"\x00\x00"
    info = parse_header(data)
    assert not info.tf_native and "after its pixel data" in info.note
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(data)


def test_top_down_bmp_is_native(tf):
    data = bytearray(sample("bmp_rgb"))
    (height,) = struct.unpack_from("<i", data, 22)
    struct.pack_into("<i", data, 22, -height)
    info = parse_header(bytes(data))
    assert info.tf_native and info.height == height
    assert (info.height, info.width, info.channels, 1) == tf_shape(tf, bytes(data))


def test_animated_webp_without_alpha_is_not_native():
    # TF 2.21 allocates 3 channels for it but copies RGBA frames: a heap overflow that
    # kills the process, so these bytes must never reach TF (not even in this test).
    data = samples.encode(samples.rgb("chelsea"), "WEBP", save_all=True, duration=80,
                          append_images=[samples.rgb("coffee")])
    info = parse_header(data)
    assert info.frames == 2 and not info.tf_native and "animated" in info.note


def test_jpeg_with_data_after_eoi_is_fine(tf):
    data = sample("jpeg_rgb") + b"\x00" * 64 + b"trailing camera data"
    info = parse_header(data)
    assert info.tf_native
    assert (info.height, info.width, info.channels, 1) == tf_shape(tf, data)


def test_jpeg_thumbnail_eoi_inside_exif_is_not_mistaken_for_the_end():
    thumbnail = samples.encode(samples.rgb("coffee", 32), "JPEG")
    exif = Image.Exif()
    exif[0x0112] = 1
    full = samples.encode(samples.rgb("astronaut"), "JPEG", exif=exif.tobytes() + thumbnail)
    cut = full[: len(full) // 2]  # EOI of the thumbnail survives in the APP1 segment
    assert b"\xff\xd9" in cut
    with pytest.raises(HeaderError) as caught:
        parse_header(cut)
    assert caught.value.reason == "truncated_image"


TRUNCATABLE = ["jpeg_rgb", "jpeg_progressive", "jpeg_cmyk", "png_rgb", "png_palette", "png_gray16",
               "gif", "gif_animated", "bmp_rgb", "webp_lossy", "webp_lossless", "webp_alpha",
               "webp_animated_alpha"]


@pytest.mark.parametrize("name", TRUNCATABLE)
@pytest.mark.parametrize("keep", [0.2, 0.5, 0.9, -2])
def test_truncation_is_detected(tf, name, keep):
    data = sample(name)
    cut = data[:keep] if keep < 0 else data[: int(len(data) * keep)]
    with pytest.raises(HeaderError) as caught:
        parse_header(cut)
    assert caught.value.reason == "truncated_image", caught.value.message
    if not name.startswith("gif"):
        # TF refuses these too; a truncated GIF, though, TF decodes silently with fewer
        # frames, which is exactly why the header check must catch it.
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.io.decode_image(cut)


def test_truncated_gif_is_silently_accepted_by_tensorflow(tf):
    data = sample("gif_animated")
    cut = data[: int(len(data) * 0.6)]
    assert tf_shape(tf, cut)[3] < 3  # TF returns fewer frames, no error
    with pytest.raises(HeaderError):
        parse_header(cut)


def test_gif_without_trailer_byte_is_complete(tf):
    data = sample("gif_animated")[:-1]
    info = parse_header(data)
    assert (info.height, info.width, info.channels, info.frames) == tf_shape(tf, data)


def test_png_crc_error_is_corrupt(tf):
    data = bytearray(sample("png_rgb"))
    idat = data.index(b"IDAT")
    data[idat + 40] ^= 0x55
    with pytest.raises(HeaderError) as caught:
        parse_header(bytes(data))
    assert caught.value.reason == "corrupt_image" and "CRC" in caught.value.message
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(bytes(data))


def test_png_without_iend_is_truncated(tf):
    data = sample("png_rgb")[:-12]
    with pytest.raises(HeaderError) as caught:
        parse_header(data)
    assert caught.value.reason == "truncated_image"
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(data)


def test_huge_png_header_is_read_without_decoding():
    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    data = (b"\x89PNG\r\n\x1a\n" + samples.png_chunk(b"IHDR", header)
            + samples.png_chunk(b"IDAT", zlib.compress(b"\x00" * 1000))
            + samples.png_chunk(b"IEND", b""))
    info = parse_header(data)
    assert info.pixels == 10**10 and info.channels == 3


@pytest.mark.parametrize("data, reason", [
    (b"", "empty_file"),
    (b"hello, this is a text file named cat.jpg\n", "not_an_image"),
    (b"<!DOCTYPE html><html><body>404 Not Found</body></html>", "not_an_image"),
    (b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic", "unsupported_format"),
    (b"\xff\x0a\xfa\x7f\x01\x90\x08\x06\x01\x00", "unsupported_format"),
])
def test_not_images_and_unsupported_formats(data, reason):
    with pytest.raises(HeaderError) as caught:
        parse_header(data)
    assert caught.value.reason == reason


def test_tiff_is_recognised_but_not_native(tf):
    data = sample("tiff_rgb")
    assert sniff_format(data) == "tiff"
    with pytest.raises(HeaderError) as caught:
        parse_header(data)
    assert caught.value.reason == "unsupported_format"
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(data)


def test_jpeg_12_bit_is_not_native():
    data = bytearray(sample("jpeg_gray"))
    sof = data.index(b"\xff\xc0")
    data[sof + 4] = 12  # sample precision
    info = parse_header(bytes(data))
    assert not info.tf_native and "12-bit" in info.note


_DAMAGEABLE = ["jpeg_rgb", "jpeg_progressive", "png_rgb", "png_palette_transparent", "gif_animated",
               "bmp_rgb", "webp_lossy", "webp_alpha_lossless"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(_DAMAGEABLE), data=st.data())
def test_damaged_headers_never_crash_the_parser(tf, name, data):
    original = sample(name)
    damaged = bytearray(original)
    limit = min(len(damaged) - 1, 600)  # the header region, where parsing decisions are made
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, limit))
        damaged[position] = data.draw(st.integers(0, 255))
    damaged = bytes(damaged[: data.draw(st.integers(1, len(damaged)))])
    try:
        info = parse_header(damaged)
    except HeaderError as error:
        assert error.reason in REASONS
        return
    assert info.width > 0 and info.height > 0 and info.channels in (1, 2, 3, 4)
    if info.tf_native and info.pixels < 50_000_000:
        try:
            shape = tf_shape(tf, damaged)
        except tf.errors.InvalidArgumentError:
            return  # damaged pixel data a header check does not promise to catch
        assert (info.height, info.width, info.channels, info.frames) == shape


def _scan_start(data: bytes) -> int:
    """Where the first scan's entropy-coded data begins (after the SOS segment)."""
    sos = data.index(b"\xff\xda")
    return sos + 2 + struct.unpack_from(">H", data, sos + 2)[0]


@pytest.mark.parametrize("name", ["jpeg_rgb", "jpeg_progressive", "jpeg_cmyk"])
@pytest.mark.parametrize("keep", [0.01, 0.5, 0.99])
def test_jpeg_cut_inside_a_scan_and_followed_by_another_jpeg_is_corrupt(tf, name, keep):
    # The file ends with an EOI, but the first image's scan runs into the SOI of the
    # appended one, which libjpeg refuses ("two SOI markers").
    data = sample(name)
    start = _scan_start(data)
    spliced = data[: start + int((len(data) - start) * keep)] + sample("jpeg_gray")
    with pytest.raises(HeaderError) as caught:
        parse_header(spliced)
    assert caught.value.reason == "corrupt_image", caught.value.message
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(spliced)


@pytest.mark.parametrize("name", ["jpeg_rgb", "jpeg_progressive"])
def test_jpeg_followed_by_another_jpeg_is_the_first_image(tf, name):
    # Bytes after the first EOI are ignored (multi-picture files store more images there).
    data = sample(name) + sample("jpeg_gray")
    info = parse_header(data)
    assert info.tf_native
    assert (info.height, info.width, info.channels, 1) == tf_shape(tf, data)


def test_jpeg_cut_inside_a_scan_and_closed_by_eoi_passes_as_tensorflow_decodes_it(tf):
    # Not a promise of the header check (see the module docstring): TF fills in the rest.
    data = sample("jpeg_rgb")
    start = _scan_start(data)
    closed = data[: (start + len(data)) // 2] + b"\xff\xd9"
    info = parse_header(closed)
    assert (info.height, info.width, info.channels, 1) == tf_shape(tf, closed)


_GIF_SCREEN = b"GIF89a" + struct.pack("<HHBBB", 10, 10, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"


@pytest.mark.parametrize("blocks", [b"", b"\x21\xf9\x04\x00\x00\x00\x00\x00"],
                         ids=["trailer_only", "extension_then_trailer"])
def test_gif_without_an_image_is_corrupt_never_zero_by_zero(tf, blocks):
    data = _GIF_SCREEN + blocks + b";"
    with pytest.raises(HeaderError) as caught:
        parse_header(data)
    assert caught.value.reason == "corrupt_image"
    with pytest.raises(tf.errors.InvalidArgumentError, match="No Image Descriptor"):
        tf.io.decode_image(data)


# --------------------------------------------------------------------------- PNG chunk order

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """(type, body) of every chunk of a PNG."""
    chunks, pos = [], len(_PNG_SIGNATURE)
    while pos < len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        chunks.append((kind, data[pos + 8 : pos + 8 + length]))
        pos += 12 + length
    return chunks


def _png_file(chunks) -> bytes:
    return _PNG_SIGNATURE + b"".join(samples.png_chunk(kind, body) for kind, body in chunks)


def _critical_chunks(base: str) -> list[tuple[bytes, bytes]]:
    return [c for c in _png_chunks(sample(base)) if c[0] in (b"IHDR", b"PLTE", b"IDAT", b"IEND")]


def _inserted(chunks, before: bytes, *new) -> list[tuple[bytes, bytes]]:
    """`chunks` with `new` inserted before the first chunk of type `before`."""
    at = [kind for kind, _ in chunks].index(before)
    return chunks[:at] + list(new) + chunks[at:]


def _png_with(base: str, kind: bytes, body: bytes, before: bytes) -> bytes:
    """`base`'s critical chunks with (kind, body) inserted before its first `before` chunk."""
    return _png_file(_inserted(_critical_chunks(base), before, (kind, body)))


def _palette_png(colors: int, trns: list[bytes], depth: int | None = None) -> bytes:
    """A palette photo of `colors` entries with these tRNS chunks between PLTE and IDAT
    (stored at `depth` bits per index when given: indices are then cut to fit)."""
    image = samples.rgb("coffee", 24).convert("P", palette=Image.Palette.ADAPTIVE, colors=colors)
    chunks = {k: b for k, b in _png_chunks(samples.encode(image, "PNG"))}
    width, height = image.size
    if depth is None:
        ihdr, idat = chunks[b"IHDR"], chunks[b"IDAT"]
    else:
        indices = np.asarray(image) & ((1 << depth) - 1)
        rows = [np.packbits(np.unpackbits(row[:, None], axis=1)[:, 8 - depth:]).tobytes()
                for row in indices]
        ihdr = struct.pack(">IIBBBBB", width, height, depth, 3, 0, 0, 0)
        idat = zlib.compress(b"".join(b"\x00" + row for row in rows))
    return _png_file([(b"IHDR", ihdr), (b"PLTE", chunks[b"PLTE"]),
                      *((b"tRNS", body) for body in trns), (b"IDAT", idat), (b"IEND", b"")])


def _palette_png_trns(where: bytes, body: bytes = b"\x00") -> bytes:
    return _png_with("png_palette", b"tRNS", body, where)


# name -> (bytes, the channels TF decodes them to: also asserted against TF itself)
_TRNS_CASES = {
    "palette_trns_after_plte": (lambda: _palette_png(4, [b"\x00"]), 4),
    "palette_trns_as_long_as_the_palette": (lambda: _palette_png(4, [bytes(4)]), 4),
    "palette_trns_longer_than_the_palette": (lambda: _palette_png(4, [bytes(5)]), 3),
    "palette_trns_empty": (lambda: _palette_png(4, [b""]), 3),
    "palette_invalid_trns_then_valid_one": (lambda: _palette_png(4, [b"", b"\x00"]), 4),
    "palette_trns_longer_than_the_bit_depth_indexes": (
        lambda: _palette_png(4, [bytes(3)], depth=1), 3),
    "palette_trns_within_the_bit_depth": (lambda: _palette_png(4, [bytes(2)], depth=1), 4),
    "palette_trns_before_plte": (lambda: _palette_png_trns(b"PLTE"), 3),
    "palette_trns_after_idat": (lambda: _palette_png_trns(b"IEND"), 3),
    "gray_trns_empty": (lambda: _png_with("png_gray", b"tRNS", b"", b"IDAT"), 1),
    "gray_trns_wrong_length": (lambda: _png_with("png_gray", b"tRNS", bytes(3), b"IDAT"), 1),
    "gray_trns": (lambda: _png_with("png_gray", b"tRNS", bytes(2), b"IDAT"), 1),
    "rgb_trns_wrong_length": (lambda: _png_with("png_rgb", b"tRNS", bytes(5), b"IDAT"), 3),
    "rgb_trns": (lambda: _png_with("png_rgb", b"tRNS", bytes(6), b"IDAT"), 3),
    "rgba_trns": (lambda: _png_with("png_rgba", b"tRNS", bytes(6), b"IDAT"), 4),
}


@pytest.mark.parametrize("name", _TRNS_CASES)
def test_png_trns_adds_a_channel_exactly_when_tensorflow_applies_it(tf, name):
    build, channels = _TRNS_CASES[name]
    data = build()
    info = parse_header(data)
    assert (info.height, info.width, info.channels, info.frames) == tf_shape(tf, data)
    assert info.channels == channels


def _palette_plte_after_idat() -> bytes:
    chunks = _critical_chunks("png_palette")
    plte = next(c for c in chunks if c[0] == b"PLTE")
    return _png_file(_inserted([c for c in chunks if c[0] != b"PLTE"], b"IEND", plte))


def _plte(base: str, *places: bytes, body: bytes = bytes(6)) -> bytes:
    """`base` with a PLTE chunk inserted before the first chunk of each type in `places`."""
    chunks = _critical_chunks(base)
    for before in places:
        chunks = _inserted(chunks, before, (b"PLTE", body))
    return _png_file(chunks)


def _palette_with_plte(body: bytes) -> bytes:
    chunks = _critical_chunks("png_palette")
    return _png_file([(kind, body if kind == b"PLTE" else old) for kind, old in chunks])


# Chunk orders and chunk types libpng (so TF) refuses; every one used to pass.
_PNG_REFUSED = {
    "unknown_critical_chunk": lambda: _png_with("png_rgb", b"ABCD", b"hello", b"IDAT"),
    "unknown_critical_chunk_after_idat": lambda: _png_with("png_rgb", b"ABCD", b"hello", b"IEND"),
    "chunk_type_not_letters": lambda: _png_with("png_rgb", b"ab1d", b"hello", b"IDAT"),
    "palette_plte_after_idat": _palette_plte_after_idat,
    "palette_two_plte": lambda: _plte("png_palette", b"IDAT"),
    "rgb_two_plte": lambda: _plte("png_rgb", b"IDAT", b"IDAT"),
    "rgb_plte_before_and_after_idat": lambda: _plte("png_rgb", b"IDAT", b"IEND"),
    "gray_two_plte": lambda: _plte("png_gray", b"IDAT", b"IDAT"),
    "palette_plte_not_whole_entries": lambda: _palette_with_plte(bytes(3 * 16 + 1)),
    "palette_plte_empty": lambda: _palette_with_plte(b""),
    "palette_plte_over_256_entries": lambda: _palette_with_plte(bytes(3 * 257)),
    "rgb_plte_empty": lambda: _plte("png_rgb", b"IDAT", body=b""),
}
# Their neighbours libpng accepts (ignoring the misplaced chunk): these must still pass.
_PNG_ACCEPTED = {
    "rgb_plte_after_idat": lambda: _plte("png_rgb", b"IEND"),
    "rgb_two_plte_after_idat": lambda: _plte("png_rgb", b"IEND", b"IEND"),
    "rgb_plte_not_whole_entries": lambda: _plte("png_rgb", b"IDAT", body=bytes(4)),
    "gray_plte": lambda: _plte("png_gray", b"IDAT"),
    "gray_empty_plte": lambda: _plte("png_gray", b"IDAT", body=b""),
    "palette_plte_more_entries_than_the_bit_depth_indexes": lambda: _palette_png(4, [], depth=1),
    "unknown_ancillary_chunk": lambda: _png_with("png_rgb", b"abCD", b"hello", b"IDAT"),
    "unknown_critical_chunk_after_iend": lambda: sample("png_rgb") + samples.png_chunk(b"ABCD", b"x"),
}


@pytest.mark.parametrize("name", _PNG_REFUSED)
def test_png_chunks_tensorflow_refuses_are_corrupt(tf, name):
    data = _PNG_REFUSED[name]()
    with pytest.raises(HeaderError) as caught:
        parse_header(data)
    assert caught.value.reason == "corrupt_image", caught.value.message
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(data)


@pytest.mark.parametrize("name", _PNG_ACCEPTED)
def test_png_chunks_tensorflow_ignores_pass(tf, name):
    data = _PNG_ACCEPTED[name]()
    info = parse_header(data)
    assert (info.height, info.width, info.channels, info.frames) == tf_shape(tf, data)
