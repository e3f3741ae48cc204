"""Pillow-based image work: full-decode validation, conversion, EXIF orientation, resize.

Only images that must change go through here. Every function checks the pixel count from
the header before anything is decoded, and maps Pillow's many exception types onto the
dead-letter reason codes through `ImageError`. Beam-free.
"""

from __future__ import annotations

import contextlib
import io
import math
import zlib

import numpy as np
from PIL import Image, ImageOps, ImageSequence, UnidentifiedImageError

from transforms.images.config import RenderOptions
from transforms.images.headers import HeaderError, ImageInfo, parse_header, png_idat_run, sniff_format
from transforms.records import DeadLetterError

__all__ = ["ImageError", "decode_fully", "exif_orientation", "needs_render", "render"]

#: Orientation values (EXIF tag 0x0112) that swap width and height.
_SWAPPING_ORIENTATIONS = (5, 6, 7, 8)
_ORIENTATION_TAG = 0x0112
_PNG_MODES = ("1", "L", "LA", "P", "RGB", "RGBA", "I;16")
_TO_RGB = ("CMYK", "YCbCr", "LAB", "HSV", "RGBX")
_WITH_ALPHA = {"PA": "RGBA", "La": "LA", "RGBa": "RGBA"}
_RESAMPLE = Image.Resampling.LANCZOS
_DRAFT_GAP = 1.25
# Bytes fed to and taken from zlib per step when checking a PNG's stream: bounds the
# memory, and the copies of zlib's unconsumed input, whatever the compression ratio.
_INFLATE_STEP = 1 << 16


class ImageError(DeadLetterError):
    """An image could not be validated or converted; `reason` is a dead-letter code."""


def exif_orientation(data: bytes) -> int:
    """The EXIF orientation (1-8) of an image, 1 when absent or unreadable; reads only
    the header (a broken image is reported by whatever decodes it next)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return _orientation(image)
    except Exception:  # noqa: BLE001 - see above
        return 1


def _orientation(image: Image.Image) -> int:
    try:
        value = image.getexif().get(_ORIENTATION_TAG, 1)
    except Exception:  # noqa: BLE001 - a broken EXIF block means no orientation
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def needs_render(info: ImageInfo | None, options: RenderOptions, orientation: int = 1) -> bool:
    """Whether the stored bytes must differ from the original ones (`info` is None for formats
    TensorFlow cannot decode). Images that already satisfy every option keep their original
    bytes, so no generation loss is added by, say, `--encode jpeg` on a JPEG that needs no resize."""
    return bool(
        info is None or not info.tf_native
        or (options.encode is not None and options.encode != info.format)
        or (options.apply_exif_orientation and orientation != 1)
        or (options.convert_mode is not None and info.channels != (3 if options.convert_mode == "RGB" else 1))
        or (options.resize is not None and (info.width, info.height) != tuple(options.resize))
        or (options.max_side is not None and max(info.width, info.height) > options.max_side))


def decode_fully(data: bytes, max_pixels: int) -> None:
    """Decodes every frame of an image with Pillow (full validation), and a PNG's zlib stream
    to its end as libpng reads it. Raises ImageError (reason truncated_image, corrupt_image,
    decompression_bomb, not_an_image or unsupported_format)."""
    with _guard(data), Image.open(io.BytesIO(data)) as image:
        _check_pixels(image, max_pixels)
        for frame in ImageSequence.Iterator(image):
            frame.load()
        if image.format == "PNG":
            _check_png_stream(data)


def _check_png_stream(data: bytes) -> None:
    """Refuses a PNG whose zlib stream does not end within its first run of IDAT chunks:
    libpng (so TF) reads that stream to its end, from consecutive IDATs only; Pillow stops
    once it has the rows, so it decodes a stream missing its checksum, or whose last bytes
    sit in an IDAT after another chunk, which TF refuses ("Not enough image data")."""
    inflater = zlib.decompressobj()
    for body in png_idat_run(data):
        for start in range(0, len(body), _INFLATE_STEP):
            pending = body[start : start + _INFLATE_STEP]
            while pending and not inflater.eof:
                inflater.decompress(pending, _INFLATE_STEP)
                pending = inflater.unconsumed_tail
        if inflater.eof:
            return
    raise ImageError("corrupt_image", "PNG pixel data (zlib stream) does not end within its "
                                      "first run of IDAT chunks")


def render(data: bytes, options: RenderOptions, source_format: str | None,
           max_pixels: int) -> tuple[bytes, ImageInfo]:
    """Decodes the first frame, applies the options and encodes the result; returns the bytes
    to store and what TensorFlow decodes them to.

    The output format is `options.encode`, else JPEG for a JPEG source whose pixels
    changed, else PNG (lossless). JPEG output is RGB unless `convert_mode` is "L" (alpha
    is dropped); PNG output keeps the source's mode when PNG can store it. Animated
    sources keep their first frame, as `tf.io.decode_image(expand_animations=False)`.
    Re-encoded images carry no EXIF block. Raises ImageError as `decode_fully`.
    """
    with _guard(data), Image.open(io.BytesIO(data)) as image:
        _check_pixels(image, max_pixels)
        orientation = _orientation(image) if options.apply_exif_orientation else 1
        icc_profile = image.info.get("icc_profile")
        geometry = options.resize is not None or options.max_side is not None
        if geometry and image.format == "JPEG":
            _draft(image, options, orientation)
        image.load()
        picture = ImageOps.exif_transpose(image) if orientation != 1 else image
        target = options.encode or ("jpeg" if source_format == "jpeg" else "png")
        if options.convert_mode is not None:
            picture = _convert(picture, options.convert_mode)
        if geometry:
            picture = _resize(_resizable(picture), options)
        out = io.BytesIO()
        if target == "jpeg":
            # Gray stays gray only when asked for (convert_mode "L"); otherwise JPEG output is
            # uniformly RGB, so every record of a run has 3 channels.
            if picture.mode == "F":
                raise ImageError("unsupported_format", "floating-point images cannot be stored losslessly")
            picture = _convert(picture, options.convert_mode or "RGB")
            picture.save(out, "JPEG", quality=options.quality, icc_profile=icc_profile)
        else:
            picture = _png_mode(picture)
            picture.save(out, "PNG", icc_profile=icc_profile if picture.mode != "1" else None)
    encoded = out.getvalue()
    try:
        info = parse_header(encoded)
    except HeaderError as error:  # our own encoder produced something unreadable: a bug
        raise RuntimeError(f"re-encoded image does not parse: {error}") from error
    return encoded, info


@contextlib.contextmanager
def _guard(data: bytes):
    """Maps Pillow's exceptions onto `ImageError` (see `_classify`). Pillow's
    DecompressionBombWarning is left a warning: our own pixel check runs before any decode,
    and Pillow raises DecompressionBombError itself beyond twice its limit (turning the
    warning into an error would need `warnings.catch_warnings`, which is not thread-safe,
    and Beam runs DoFns in threads)."""
    try:
        yield
    except ImageError:
        raise
    except BaseException as error:
        raise _classify(error, data) from error


def _classify(error: BaseException, data: bytes) -> ImageError:
    text = str(error) or type(error).__name__
    if isinstance(error, (Image.DecompressionBombError, Image.DecompressionBombWarning)):
        return ImageError("decompression_bomb", text)
    if isinstance(error, UnidentifiedImageError):
        kind = sniff_format(data)
        if kind is None:
            return ImageError("not_an_image", "the bytes are not an image Pillow recognises")
        return ImageError("unsupported_format", f"{kind} images cannot be decoded here")
    if isinstance(error, EOFError) or "truncated" in text.lower():
        return ImageError("truncated_image", text)
    if isinstance(error, MemoryError):
        return ImageError("decompression_bomb", f"out of memory decoding the image: {text}")
    # OSError, SyntaxError, ValueError, struct.error, zlib.error, IndexError... from
    # Pillow's plugins all mean the same thing here: the bytes do not decode.
    return ImageError("corrupt_image", f"{type(error).__name__}: {text}")


def _check_pixels(image: Image.Image, max_pixels: int) -> None:
    width, height = image.size
    if width * height > max_pixels:
        raise ImageError("decompression_bomb",
                         f"{width}x{height} = {width * height} pixels exceeds the limit of {max_pixels}")


def _oriented(size: tuple[int, int], orientation: int) -> tuple[int, int]:
    return (size[1], size[0]) if orientation in _SWAPPING_ORIENTATIONS else size


def _scaled_size(size: tuple[int, int], options: RenderOptions) -> tuple[int, int]:
    """The size the picture is resampled to before any crop or pad."""
    width, height = size
    if options.resize is not None:
        target_w, target_h = options.resize
        if options.resize_mode == "stretch":
            return target_w, target_h
        pick = max if options.resize_mode == "fill" else min
        scale = pick(target_w / width, target_h / height)
    else:
        scale = min(1.0, options.max_side / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def _draft(image: Image.Image, options: RenderOptions, orientation: int) -> None:
    # JPEG draft mode decodes at 1/2, 1/4 or 1/8 scale straight from the DCT, never below
    # the requested size. Asking for a bit more than the final size (like the
    # reducing_gap of Pillow's thumbnail(), but small enough that 640x480 -> 224 still
    # qualifies) keeps a real resampling filter for the last step.
    oriented = _oriented(image.size, orientation)
    needed = _oriented(_scaled_size(oriented, options), orientation)
    wanted = (math.ceil(needed[0] * _DRAFT_GAP), math.ceil(needed[1] * _DRAFT_GAP))
    if wanted[0] * 2 <= image.size[0] and wanted[1] * 2 <= image.size[1]:
        image.draft(None, wanted)


def _resizable(image: Image.Image) -> Image.Image:
    """A mode Pillow resamples meaningfully (palettes and bilevel images are not)."""
    if image.mode == "P":
        return image.convert("RGBA" if "transparency" in image.info else "RGB")
    return image.convert("L") if image.mode == "1" else _plain(image)


def _plain(image: Image.Image) -> Image.Image:
    """Premultiplied-alpha, other colour spaces and 16-bit variants as plain modes (which
    Pillow resamples and PNG stores)."""
    mode = image.mode
    if mode in _WITH_ALPHA:
        return image.convert(_WITH_ALPHA[mode])
    if mode in _TO_RGB:
        return image.convert("RGB")
    return image.convert("I;16") if mode.startswith("I;16") and mode != "I;16" else image


def _resize(image: Image.Image, options: RenderOptions) -> Image.Image:
    if options.resize is None:
        size = _scaled_size(image.size, options)
        return image if size == image.size else image.resize(size, _RESAMPLE)
    size = tuple(options.resize)
    if image.size == size:
        return image
    if options.resize_mode == "stretch":
        return image.resize(size, _RESAMPLE)
    if options.resize_mode == "fill":
        return ImageOps.fit(image, size, _RESAMPLE)
    # fit: scale into the box and pad with black (transparent for alpha modes).
    return ImageOps.pad(image, size, _RESAMPLE)


def _to_8bit(image: Image.Image) -> Image.Image:
    """16/32-bit gray to 8-bit by scaling, not clipping (Pillow's convert clips)."""
    array = np.clip(np.asarray(image).astype(np.int64), 0, 65535) >> 8
    return Image.fromarray(array.astype(np.uint8), "L")


def _convert(image: Image.Image, mode: str) -> Image.Image:
    if image.mode.startswith("I"):
        image = _to_8bit(image)
    if image.mode == mode:
        return image
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    return image.convert(mode)


def _png_mode(image: Image.Image) -> Image.Image:
    mode = image.mode
    if mode == "I":
        array = np.asarray(image)
        if array.size and (array.min() < 0 or array.max() > 65535):
            raise ImageError("unsupported_format", "32-bit integer pixels outside 0..65535")
        return Image.fromarray(array.astype(np.uint16), "I;16")
    image = _plain(image)
    if image.mode not in _PNG_MODES:
        raise ImageError("unsupported_format", f"pixel mode {mode} cannot be stored as PNG")
    return image
