"""Image header parsing without decoding pixels: size, channels and structural integrity.

`parse_header(data)` walks the container structure of the five formats TensorFlow's
`tf.io.decode_image` reads (JPEG, PNG, GIF, BMP, WebP), never decompressing pixel data
(microseconds per image), and reports what TensorFlow produces for those exact bytes:
height, width, frames and channels, as TF's decoders give them (verified against TF 2.21
in the tests): JPEG 1 or 3 (CMYK/YCCK -> 3); PNG 1, 2, 3 or 4 (palette -> 3, or 4 with a
tRNS chunk libpng accepts; a tRNS on gray or RGB adds none); GIF 3, sized as its largest
frame; BMP 1, 3 or 4 by bit depth (8-bit: the palette ignored); WebP 4 with alpha, else 3.
`ImageInfo.tf_native` is False when TF cannot decode the bytes or would decode them
wrongly although the format is one of the five (a palette or RLE BMP, a 12-bit or
lossless JPEG, an animated WebP without alpha, which crashes TF 2.21's decoder, ...):
those must be converted before storing.

What a header check promises: the file is one of the five formats, its structure is
complete and correctly sized up to the end of the image, and height/width/channels are
what TF yields. Structure means: JPEG, every marker segment and every scan up to the
first EOI (scans searched for markers, not decoded); PNG, every chunk through IEND, the
CRC of every critical chunk (which covers the compressed pixels) and what else libpng
refuses in the chunk list (misplaced chunks libpng ignores pass); GIF, every block
through the last frame, at least one image; BMP, the exact pixel array size TF requires;
WebP, the RIFF size, every chunk, canvas size = bitstream size.

What it does not promise: that the compressed pixel stream itself decodes. A JPEG or
WebP whose entropy-coded data is damaged but complete passes; so does a PNG whose zlib
stream is cut short or continues in an IDAT after another chunk (libpng refuses both), a
JPEG cut inside a scan and closed by an EOI (TF decodes it too, filling in the rest), and
a JPEG cut inside a marker segment before its first scan whose segment length jumps over
the SOI that follows. Full validation (a real decode) catches those. Beam- and Pillow-free.
"""

from __future__ import annotations

import dataclasses
import re
import struct
import zlib

from transforms.records import DeadLetterError

__all__ = ["HeaderError", "ImageInfo", "parse_header", "png_idat_run", "sniff_format"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Leading bytes of each format, tried in this order (one regular expression: the first
# alternative that matches names the format).
_SIGNATURES = re.compile(b"|".join(b"(?P<%s>%s)" % (name, pattern) for name, pattern in (
    (b"jpeg", rb"\xff\xd8\xff"),
    (b"png", re.escape(_PNG_SIGNATURE)),
    (b"gif", rb"GIF8[79]a"),
    (b"bmp", rb"BM.{16}"),
    (b"webp", rb"RIFF.{4}WEBP"),
    (b"tiff", rb"II\*\x00|MM\x00\*|II\+\x00|MM\x00\+"),
    (b"jpeg2000", rb"\x00\x00\x00\x0cjP  \r\n\x87\n|\xff\x4f\xff\x51"),
    (b"jxl", rb"\xff\x0a|\x00\x00\x00\x0cJXL \r\n\x87\n"),
    (b"avif", rb".{4}ftyp(?:avif|avis)"),
    (b"heif", rb".{4}ftyp(?:heic|heix|hevc|hevx|heim|heis|mif1|msf1)"),
    (b"psd", rb"8BPS"),
    (b"ico", rb"\x00\x00[\x01\x02]\x00.{3}"),
    (b"qoi", rb"qoif"),
    (b"dds", rb"DDS "),
    (b"openexr", rb"\x76\x2f\x31\x01"),
    (b"pnm", rb"P[1-7][ \t\r\n]"),
)), re.DOTALL)
# A JPEG marker inside entropy-coded data: 0xFF followed by anything except a stuffed
# zero, a restart marker (D0-D7) or another fill byte.
_JPEG_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
# SOFn markers; C4 (DHT), C8 (JPG) and CC (DAC) share the range but are not frames.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Baseline, extended sequential and progressive Huffman: what TF's libjpeg decodes.
_JPEG_TF_SOF = frozenset({0xC0, 0xC1, 0xC2})
# libpng refuses a chunk type of other bytes than ASCII letters.
_PNG_CHUNK_TYPE = re.compile(rb"[A-Za-z]{4}")
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
# tf.io.decode_png refuses larger images ("PNG size too large for int").
_PNG_TF_MAX_SIDE = 1 << 27
_PNG_TF_MAX_PIXELS = 1 << 29
_BMP_TF_MAX_PIXELS = (2**31 - 1) // 8
_BMP_MASKS = (0x00FF0000, 0x0000FF00, 0x000000FF)  # the only bit fields TF decodes right


class HeaderError(DeadLetterError):
    """The bytes are not a usable image; `reason` is a dead-letter reason code."""


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    """What TensorFlow's `decode_image` yields for the parsed bytes."""

    format: str  # "jpeg", "png", "gif", "bmp" or "webp"
    width: int
    height: int
    channels: int  # the last dimension of the decoded tensor
    frames: int = 1  # GIF and WebP decode to 4-D tensors in TF; 1 for stills
    tf_native: bool = True  # False when TF cannot decode these bytes faithfully
    note: str = ""  # why not `tf_native`

    @property
    def pixels(self) -> int:
        """Decoded pixel count over all frames (what a decoder must allocate, per channel)."""
        return self.width * self.height * self.frames


def sniff_format(data: bytes) -> str | None:
    """Names the image format from the leading bytes, or None when unrecognised: also
    formats TF cannot read (tiff, heif, ...), so that callers can tell an unsupported image
    from a file that is not an image at all."""
    match = _SIGNATURES.match(bytes(data[:32]))
    return match.lastgroup if match else None


def parse_header(data: bytes) -> ImageInfo:
    """Parses a JPEG, PNG, GIF, BMP or WebP file's structure; raises HeaderError with reason
    empty_file, not_an_image, unsupported_format, truncated_image or corrupt_image."""
    if not data:
        raise HeaderError("empty_file", "the file is empty")
    kind = sniff_format(data)
    parser = _PARSERS.get(kind)
    if parser is None:
        if kind is None:
            raise HeaderError("not_an_image", "no known image signature in the leading bytes")
        raise HeaderError("unsupported_format", f"{kind} is not a format TensorFlow decodes")
    try:
        return parser(memoryview(data) if not isinstance(data, memoryview) else data)
    except (struct.error, IndexError) as error:
        # Defensive: the parsers bound-check before reading, so this means a short file.
        raise HeaderError("truncated_image", f"{kind} header ends early: {error}") from None


def _jpeg(data) -> ImageInfo:
    n = len(data)
    pos = 2
    frame = None
    scans = 0
    while True:
        if pos < n and data[pos] != 0xFF:
            # Extraneous bytes before a marker: libjpeg skips them with a warning.
            match = _JPEG_MARKER.search(data, pos)
            pos = match.start() if match else n
        while pos < n and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= n:
            raise HeaderError("truncated_image", "JPEG ends before its EOI marker")
        marker = data[pos]
        pos += 1
        if marker == 0xD9:  # EOI; trailing bytes after it are ignored by decoders
            break
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # standalone markers
            continue
        if marker in (0x00, 0xD8):
            raise HeaderError("corrupt_image", f"JPEG: unexpected marker 0x{marker:02X} at byte {pos - 1}")
        if pos + 2 > n:
            raise HeaderError("truncated_image", "JPEG ends inside a marker segment")
        length = (data[pos] << 8) | data[pos + 1]
        if length < 2:
            raise HeaderError("corrupt_image", f"JPEG: invalid segment length at byte {pos}")
        end = pos + length
        if end > n:
            raise HeaderError("truncated_image", f"JPEG ends inside marker 0x{marker:02X}'s segment")
        if marker in _JPEG_SOF:
            if frame is not None:
                raise HeaderError("corrupt_image", "JPEG has two frame (SOF) markers")
            if length < 8:
                raise HeaderError("corrupt_image", "JPEG frame header too short")
            precision, height, width, components = struct.unpack_from(">BHHB", data, pos + 2)
            if length != 8 + 3 * components or components == 0:
                raise HeaderError("corrupt_image", "JPEG frame header length does not match its components")
            frame = (marker, precision, height, width, components)
        pos = end
        if marker == 0xDA:  # SOS: skip the entropy-coded data up to the next marker
            if frame is None:
                raise HeaderError("corrupt_image", "JPEG scan (SOS) before the frame header (SOF)")
            scans += 1
            # Every scan is walked, also in a file ending with EOI: that EOI may close a
            # second JPEG appended to a truncated one, whose SOI or SOF shows up here as a
            # marker libjpeg refuses. The search runs at memory speed (no decoding).
            match = _JPEG_MARKER.search(data, pos)
            if match is None:
                raise HeaderError("truncated_image", "JPEG ends inside scan data (no EOI marker)")
            pos = match.start()
    if frame is None or scans == 0:
        raise HeaderError("corrupt_image", "JPEG has no frame header or no scan")
    marker, precision, height, width, components = frame
    if width == 0:
        raise HeaderError("corrupt_image", "JPEG width is 0")
    note = ""
    if marker not in _JPEG_TF_SOF:
        note = f"JPEG coding process SOF{marker - 0xC0} (lossless, arithmetic or hierarchical)"
    elif precision != 8:
        note = f"{precision}-bit JPEG samples"
    elif height == 0:
        note = "JPEG height defined by a DNL marker"
    elif components not in (1, 3, 4):
        note = f"JPEG with {components} components"
    channels = 1 if components == 1 else 3
    return ImageInfo("jpeg", width, height, channels, 1, not note, note)


def _png(data) -> ImageInfo:
    header = None
    has_idat = palette_alpha = False
    entries = None  # palette entries libpng keeps: None until a PLTE precedes IDAT
    for pos, ctype, body in _png_chunks(data):
        length = len(body)
        if header is None:
            if ctype != b"IHDR" or length != 13:
                raise HeaderError("corrupt_image", "PNG does not start with an IHDR chunk")
            header = struct.unpack_from(">IIBBBBB", body)
        elif ctype == b"PLTE":
            # libpng: a PLTE after one that preceded IDAT is fatal; a first one after IDAT
            # it ignores (a palette image has failed at its IDAT by then).
            if entries is not None:
                raise HeaderError("corrupt_image", "PNG has two PLTE chunks")
            if not has_idat:
                entries = _png_palette_entries(header, length)
        elif ctype == b"tRNS":
            # TF adds an alpha channel when libpng accepts a palette tRNS: one after PLTE,
            # before IDAT, with 1 to `entries` values (the first such; others ignored).
            palette_alpha = palette_alpha or (not has_idat and 0 < length <= (entries or 0))
        elif ctype == b"IDAT":
            if header[3] == 3 and entries is None:
                raise HeaderError("corrupt_image", "palette PNG has no PLTE chunk before its IDAT")
            has_idat = True
        elif ctype == b"IHDR":
            raise HeaderError("corrupt_image", "PNG has two IHDR chunks")
        elif ctype != b"IEND" and not ctype[0] & 0x20:  # critical: libpng cannot skip it
            raise HeaderError("corrupt_image",
                              f"PNG has an unknown critical chunk '{_chunk_name(ctype)}' at byte {pos}")
        elif not _PNG_CHUNK_TYPE.fullmatch(ctype):  # libpng: "invalid chunk type"
            raise HeaderError("corrupt_image", f"PNG chunk type {bytes(ctype)!r} at byte {pos} "
                                               f"is not four letters")
    width, height, depth, color, compression, filter_, interlace = header
    if width == 0 or height == 0 or width > 0x7FFFFFFF or height > 0x7FFFFFFF:
        raise HeaderError("corrupt_image", f"PNG has an invalid size {width}x{height}")
    if depth not in _PNG_DEPTHS.get(color, ()) or compression or filter_ or interlace > 1:
        raise HeaderError("corrupt_image", f"PNG has an invalid IHDR (depth {depth}, color type {color})")
    if not has_idat:
        raise HeaderError("corrupt_image", "PNG has no IDAT chunk")
    channels = {0: 1, 2: 3, 3: 4 if palette_alpha else 3, 4: 2, 6: 4}[color]
    note = ""
    if width >= _PNG_TF_MAX_SIDE or height >= _PNG_TF_MAX_SIDE or width * height >= _PNG_TF_MAX_PIXELS:
        note = "PNG larger than tf.io.decode_png accepts"
    return ImageInfo("png", width, height, channels, 1, not note, note)


def _png_chunks(data):
    """Yields (position, type, body) of each chunk of a PNG through IEND, each checked
    complete and, if critical, against its CRC (which covers the compressed pixels)."""
    n = len(data)
    pos = 8
    while True:
        if pos + 12 > n:
            raise HeaderError("truncated_image", "PNG ends before its IEND chunk")
        length, ctype = struct.unpack_from(">I4s", data, pos)
        if length > 0x7FFFFFFF:
            raise HeaderError("corrupt_image", f"PNG chunk length too large at byte {pos}")
        end = pos + 12 + length
        if end > n:
            raise HeaderError("truncated_image", f"PNG ends inside a {_chunk_name(ctype)} chunk")
        if not ctype[0] & 0x20:
            (crc,) = struct.unpack_from(">I", data, end - 4)
            if zlib.crc32(data[pos + 4 : end - 4]) != crc:
                raise HeaderError("corrupt_image",
                                  f"PNG {_chunk_name(ctype)} chunk fails its CRC at byte {pos}")
        yield pos, ctype, data[pos + 8 : end - 4]
        if ctype == b"IEND":
            return
        pos = end


def png_idat_run(data: bytes) -> list:
    """The bodies of a PNG's first run of consecutive IDAT chunks: libpng reads the
    compressed pixels from these only ("Not enough image data" if the stream goes on).
    Raises HeaderError for a PNG whose chunks are incomplete."""
    run = []
    for _, ctype, body in _png_chunks(memoryview(data)):
        if ctype == b"IDAT":
            run.append(body)
        elif run:
            break
    return run


def _png_palette_entries(header, length: int) -> int:
    """The palette entries libpng keeps of a PLTE chunk before IDAT (0 unless a palette
    image). libpng ignores a PLTE in a gray image and one of a length not a multiple of 3
    (or over 256 entries) in an RGB image; it refuses an empty one, and one of a length
    it would ignore in a palette image; it drops the entries the bit depth cannot index.
    """
    depth, color = header[2], header[3]
    if color in (0, 4):
        return 0
    if length == 0 or (color == 3 and (length % 3 or length > 3 * 256)):
        raise HeaderError("corrupt_image", f"PNG has an invalid {length}-byte PLTE chunk")
    return min(length // 3, 1 << depth) if color == 3 else 0


def _chunk_name(ctype) -> str:
    """A chunk type (or RIFF FourCC) as text: printable ASCII as is, other bytes escaped
    (`\\xa9`), so garbage never reaches a message as raw characters."""
    return "".join(chr(byte) if 0x20 < byte < 0x7F and byte != 0x5C else f"\\x{byte:02x}"
                   for byte in bytes(ctype))


def _skip_sub_blocks(data, pos: int, n: int) -> int:
    while True:
        if pos >= n:
            raise HeaderError("truncated_image", "GIF ends inside a data block")
        size = data[pos]
        pos += 1 + size
        if size == 0:
            return pos


def _gif(data) -> ImageInfo:
    n = len(data)
    if n < 13:
        raise HeaderError("truncated_image", "GIF ends inside its screen descriptor")
    flags = data[10]
    pos = 13
    has_global = bool(flags & 0x80)
    if has_global:
        pos += 3 << ((flags & 7) + 1)
    frames = max_w = max_h = 0
    while True:
        if pos >= n:
            if frames:  # complete frames but no trailer byte: decoders accept this
                break
            raise HeaderError("truncated_image", "GIF ends before its first image")
        block = data[pos]
        if block == 0x3B:  # trailer
            break
        if block == 0x21:  # extension: label byte, then sub-blocks
            pos = _skip_sub_blocks(data, pos + 2, n)
        elif block == 0x2C:  # image descriptor
            if pos + 11 > n:
                raise HeaderError("truncated_image", "GIF ends inside an image descriptor")
            _, _, width, height, local = struct.unpack_from("<HHHHB", data, pos + 1)
            pos += 10
            if local & 0x80:
                pos += 3 << ((local & 7) + 1)
            elif not has_global:
                raise HeaderError("corrupt_image", f"GIF frame {frames} has no color table")
            if pos >= n:
                raise HeaderError("truncated_image", "GIF ends inside an image")
            code_size = data[pos]
            if not 1 <= code_size <= 11:
                raise HeaderError("corrupt_image", f"GIF frame {frames} has an invalid LZW code size")
            pos = _skip_sub_blocks(data, pos + 1, n)
            if width == 0 or height == 0:
                raise HeaderError("corrupt_image", f"GIF frame {frames} has a zero size")
            frames += 1
            max_w, max_h = max(max_w, width), max(max_h, height)
        elif frames:
            break  # garbage after complete frames: giflib stops there, TF keeps the frames
        else:
            raise HeaderError("corrupt_image", f"GIF: unknown block 0x{block:02X} at byte {pos}")
    if not frames:  # a trailer before any image: giflib fails ("No Image Descriptor detected")
        raise HeaderError("corrupt_image", "GIF has no image")
    # TF allocates max(frame width) x max(frame height), not the logical screen size.
    return ImageInfo("gif", max_w, max_h, 3, frames)


def _bmp(data) -> ImageInfo:
    n = len(data)
    if n < 18:
        raise HeaderError("truncated_image", "BMP ends inside its file header")
    offset, dib = struct.unpack_from("<II", data, 10)
    if dib == 12:  # OS/2 BITMAPCOREHEADER: TF reads the fields at the wrong offsets
        if n < 26:
            raise HeaderError("truncated_image", "BMP ends inside its info header")
        width, height, _, bpp = struct.unpack_from("<HHHH", data, 18)
        if width == 0 or height == 0:
            raise HeaderError("corrupt_image", "BMP has a zero size")
        return ImageInfo("bmp", width, height, 3, 1, False, "OS/2 BMP header")
    if dib < 40:
        raise HeaderError("corrupt_image", f"BMP info header size {dib} is invalid")
    if n < 14 + 40:
        raise HeaderError("truncated_image", "BMP ends inside its info header")
    width, height, planes, bpp, compression = struct.unpack_from("<iiHHI", data, 18)
    (colors_used,) = struct.unpack_from("<I", data, 46)
    if width <= 0 or height == 0 or height == -(2**31) or planes != 1:
        raise HeaderError("corrupt_image", f"BMP has an invalid size {width}x{height}")
    if bpp not in (1, 2, 4, 8, 16, 24, 32, 64) or compression > 13:
        raise HeaderError("corrupt_image", f"BMP has invalid bits per pixel {bpp} or compression")
    rows = abs(height)
    row_size = (bpp * width + 31) // 32 * 4
    needed = offset + row_size * rows
    uncompressed = compression == 0 or (compression == 3 and bpp in (16, 32))
    if uncompressed and n < needed:
        raise HeaderError("truncated_image", f"BMP pixel data is {needed - n} bytes short")
    if offset < 14 + dib or offset > n:
        raise HeaderError("corrupt_image", f"BMP pixel data offset {offset} is invalid")
    note = ""
    if not uncompressed:
        note = f"compressed BMP (method {compression})"
    elif bpp not in (8, 24, 32):
        note = f"{bpp}-bit BMP"
    elif compression == 3 and (n < 14 + 40 + 12 or struct.unpack_from("<III", data, 54) != _BMP_MASKS):
        # With a 40-byte header the masks follow it; larger headers embed them at 54.
        note = "BMP with non-standard bit fields"
    elif bpp == 8 and not _bmp_gray_palette(data, dib, compression, colors_used, offset):
        note = "8-bit BMP with a color palette (TF would return palette indices)"
    elif n != needed:
        note = f"BMP has {n - needed} bytes after its pixel data"
    elif width * rows >= _BMP_TF_MAX_PIXELS:
        note = "BMP larger than tf.io.decode_bmp accepts"
    channels = {8: 1, 24: 3, 32: 4}.get(bpp, 3)
    return ImageInfo("bmp", width, rows, channels, 1, not note, note)


def _bmp_gray_palette(data, dib: int, compression: int, colors_used: int, offset: int) -> bool:
    start = 14 + dib + (12 if compression == 3 and dib == 40 else 0)
    count = colors_used or 256
    if count > 256 or start + 4 * count > offset:
        return False
    table = bytes(data[start : start + 4 * count])
    return all(table[4 * i : 4 * i + 3] == bytes((i, i, i)) for i in range(count))


def _webp(data) -> ImageInfo:
    n = len(data)
    (riff_size,) = struct.unpack_from("<I", data, 4)
    end = 8 + riff_size
    if riff_size < 4 + 8:
        raise HeaderError("corrupt_image", "WebP RIFF size is too small")
    if end > n:
        raise HeaderError("truncated_image", f"WebP is {end - n} bytes shorter than its RIFF size")
    pos = 12
    vp8x = bitstream = None
    has_alph = False
    frames = 0
    while pos + 8 <= end:
        fourcc = bytes(data[pos : pos + 4])
        (size,) = struct.unpack_from("<I", data, pos + 4)
        body = pos + 8
        if body + size > end:
            raise HeaderError("truncated_image", f"WebP ends inside its {_chunk_name(fourcc)} chunk")
        if pos == 12 and fourcc not in (b"VP8 ", b"VP8L", b"VP8X"):
            raise HeaderError("corrupt_image", "WebP does not start with a VP8, VP8L or VP8X chunk")
        if fourcc == b"VP8X":
            if size < 10:
                raise HeaderError("corrupt_image", "WebP VP8X chunk too short")
            flags = data[body]
            width = 1 + int.from_bytes(data[body + 4 : body + 7], "little")
            height = 1 + int.from_bytes(data[body + 7 : body + 10], "little")
            vp8x = (flags, width, height)
        elif fourcc == b"ALPH":
            has_alph = True
        elif fourcc == b"ANMF":
            frames += 1
        elif fourcc in (b"VP8 ", b"VP8L") and bitstream is None:
            bitstream = _webp_bitstream(fourcc, data, body, size)
            if vp8x is None:
                break
        pos = body + size + (size & 1)
    if vp8x is not None and vp8x[0] & 0x02:  # animation
        flags, width, height = vp8x
        if frames == 0:
            raise HeaderError("corrupt_image", "animated WebP has no frames")
        if flags & 0x10:
            return ImageInfo("webp", width, height, 4, frames)
        # TF 2.21 sizes the output for 3 channels but copies RGBA: heap corruption.
        return ImageInfo("webp", width, height, 3, frames, False, "animated WebP without alpha")
    if bitstream is None:
        raise HeaderError("corrupt_image", "WebP has no image data")
    width, height, alpha = bitstream
    if vp8x is not None:
        flags, canvas_width, canvas_height = vp8x
        if (width, height) != (canvas_width, canvas_height):
            raise HeaderError("corrupt_image", "WebP canvas and bitstream sizes differ")
        # libwebp: the VP8X alpha flag, overridden by a lossless bitstream's own bit,
        # or'ed with the presence of an ALPH chunk.
        alpha = (alpha if alpha is not None else bool(flags & 0x10)) or has_alph
    return ImageInfo("webp", width, height, 4 if alpha else 3)


def _webp_bitstream(fourcc: bytes, data, body: int, size: int):
    """(width, height, alpha or None) of a VP8 or VP8L bitstream's header."""
    if fourcc == b"VP8 ":
        if size < 10:
            raise HeaderError("corrupt_image", "WebP VP8 header too short")
        if data[body] & 1 or bytes(data[body + 3 : body + 6]) != b"\x9d\x01\x2a":
            raise HeaderError("corrupt_image", "WebP VP8 bitstream is not a key frame")
        width, height = struct.unpack_from("<HH", data, body + 6)
        width, height = width & 0x3FFF, height & 0x3FFF
        if not width or not height:
            raise HeaderError("corrupt_image", "WebP VP8 size is zero")
        return width, height, None
    if size < 5 or data[body] != 0x2F:
        raise HeaderError("corrupt_image", "WebP VP8L signature missing")
    (bits,) = struct.unpack_from("<I", data, body + 1)
    if bits >> 29:
        raise HeaderError("corrupt_image", "WebP VP8L version is not 0")
    return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1, bool((bits >> 28) & 1)


_PARSERS = {"jpeg": _jpeg, "png": _png, "gif": _gif, "bmp": _bmp, "webp": _webp}
