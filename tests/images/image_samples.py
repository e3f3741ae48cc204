"""Real photographs (scikit-image's sample data) encoded in every variant the image tests need.

Each builder returns the encoded bytes of one variant. Photos are shrunk to ~128 px so a
test decoding dozens of them in TensorFlow stays fast; they remain real photographs
(textures, gradients, skin, fur), not synthetic patterns.
"""

from __future__ import annotations

import functools
import io
import struct
import zlib

import numpy as np
import skimage.data
from PIL import Image


@functools.cache
def photo(name: str, side: int = 128) -> np.ndarray:
    """A scikit-image sample photo shrunk so its longer side is `side` (uint8 array)."""
    image = Image.fromarray(getattr(skimage.data, name)())
    image.thumbnail((side, side), Image.Resampling.LANCZOS)
    return np.asarray(image)


def rgb(name: str = "astronaut", side: int = 128) -> Image.Image:
    return Image.fromarray(photo(name, side))


def gray(side: int = 128) -> Image.Image:
    return Image.fromarray(photo("camera", side))


def rgba(name: str = "coffee", side: int = 128) -> Image.Image:
    """A photo with a real (non-constant) alpha channel: a horizontal fade."""
    array = photo(name, side)
    alpha = np.linspace(30, 255, array.shape[1]).astype(np.uint8)[None, :].repeat(array.shape[0], 0)
    return Image.fromarray(np.dstack([array, alpha]), "RGBA")


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_raw(array: np.ndarray, color_type: int, depth: int) -> bytes:
    """A PNG written by hand (Pillow cannot write 16-bit RGB/RGBA): filter 0 rows."""
    height, width = array.shape[:2]
    dtype = ">u2" if depth == 16 else "u1"
    rows = array.astype(dtype).reshape(height, -1).view(np.uint8).reshape(height, -1)
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)
    header = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header)
            + png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def exif_rotated_jpeg(orientation: int = 6) -> bytes:
    """A (landscape) coffee photo JPEG whose EXIF says 'rotate 90° clockwise to display'."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(rgb("coffee"), "JPEG", quality=92, exif=exif)


def gif_with_small_frame() -> bytes:
    """A GIF whose only frame (40x24) is smaller than its logical screen (80x60)."""
    frame = Image.fromarray(photo("chelsea", 40)).convert("P")
    single = encode(frame, "GIF")
    return single[:6] + struct.pack("<HH", 80, 60) + single[10:]


def cmyk_jpeg() -> bytes:
    return encode(rgb("chelsea").convert("CMYK"), "JPEG", quality=90)


#: name -> (builder, TF-native: stored as-is in default mode)
VARIANTS = {
    "jpeg_rgb": (lambda: encode(rgb("astronaut"), "JPEG", quality=90), True),
    "jpeg_gray": (lambda: encode(gray(), "JPEG", quality=90), True),
    "jpeg_progressive": (lambda: encode(rgb("coffee"), "JPEG", quality=85, progressive=True), True),
    "jpeg_cmyk": (cmyk_jpeg, True),
    "jpeg_exif_rotated": (exif_rotated_jpeg, True),
    "jpeg_444": (lambda: encode(rgb("rocket"), "JPEG", quality=95, subsampling=0), True),
    "png_rgb": (lambda: encode(rgb("chelsea"), "PNG"), True),
    "png_rgba": (lambda: encode(rgba(), "PNG"), True),
    "png_gray": (lambda: encode(gray(), "PNG"), True),
    "png_gray16": (lambda: encode(Image.fromarray(photo("camera").astype(np.uint16) * 257), "PNG"), True),
    "png_rgb16": (lambda: png_raw(photo("astronaut").astype(np.uint16) * 257, 2, 16), True),
    "png_rgba16": (lambda: png_raw(np.asarray(rgba()).astype(np.uint16) * 257, 6, 16), True),
    "png_la": (lambda: encode(rgba().convert("LA"), "PNG"), True),
    "png_palette": (lambda: encode(rgb("coffee").convert("P"), "PNG"), True),
    "png_palette_transparent": (
        lambda: encode(rgb("coffee").convert("P"), "PNG", transparency=0), True),
    "png_gray_trns": (lambda: encode(gray(), "PNG", transparency=0), True),
    "png_bilevel": (lambda: encode(gray().convert("1"), "PNG"), True),
    "gif": (lambda: encode(rgb("chelsea").convert("P"), "GIF"), True),
    "gif_animated": (lambda: encode(rgb("chelsea"), "GIF", save_all=True, duration=80,
                                    append_images=[rgb("coffee"), rgb("astronaut")]), True),
    "gif_small_frame": (gif_with_small_frame, True),
    "bmp_rgb": (lambda: encode(rgb("rocket"), "BMP"), True),
    "bmp_gray": (lambda: encode(gray(), "BMP"), True),
    "bmp_rgba": (lambda: encode(rgba(), "BMP"), True),
    "webp_lossy": (lambda: encode(rgb("coffee"), "WEBP", quality=80), True),
    "webp_lossless": (lambda: encode(rgb("chelsea"), "WEBP", lossless=True), True),
    "webp_alpha": (lambda: encode(rgba(), "WEBP", quality=80), True),
    "webp_alpha_lossless": (lambda: encode(rgba(), "WEBP", lossless=True), True),
    "webp_animated_alpha": (lambda: encode(rgba(), "WEBP", save_all=True, duration=80,
                                           append_images=[rgba("chelsea")]), True),
    # Not decodable (or not faithfully) by TensorFlow: converted to PNG by default.
    "tiff_rgb": (lambda: encode(rgb("astronaut"), "TIFF"), False),
    "tiff_lzw": (lambda: encode(rgb("coffee"), "TIFF", compression="tiff_lzw"), False),
    "tiff_gray16": (lambda: encode(Image.fromarray(photo("camera").astype(np.uint16) * 251), "TIFF"), False),
    "tiff_cmyk": (lambda: encode(rgb("chelsea").convert("CMYK"), "TIFF"), False),
    "bmp_palette": (lambda: encode(rgb("coffee").convert("P"), "BMP"), False),
    "bmp_bilevel": (lambda: encode(gray().convert("1"), "BMP"), False),
}

EXTENSIONS = {"jpeg": ".jpg", "png": ".png", "gif": ".gif", "bmp": ".bmp", "webp": ".webp",
              "tiff": ".tiff"}


def extension(name: str) -> str:
    return EXTENSIONS[name.split("_", 1)[0]]


def build(name: str) -> bytes:
    return VARIANTS[name][0]()
