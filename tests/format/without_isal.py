"""Format code run in a child Python where ISA-L is not installed (its import blocked), as on
a machine without the `isal` package: there the stdlib's zlib compresses and inflates
(`tests.helpers.ModuleServer` runs these functions there)."""

from __future__ import annotations

import io


def compress(data: bytes, compression, level):
    """(backend, level, compressed bytes) of `open_compressor`."""
    from transforms.format.compression import open_compressor

    raw = io.BytesIO()
    with open_compressor(raw, compression, level) as compressor:
        compressor.write(data)
        chosen = (compressor.backend, compressor.level)
    return (*chosen, raw.getvalue())


def write_records(path: str, framed: bytes, payloads: list[bytes], compression, level):
    """Writes `framed` (the vectorised path), then `payloads` one by one; the backend."""
    from transforms.format.tfrecord_format import TFRecordWriter
    from transforms.format.tfrecord_reader import iter_records

    with open(path, "wb") as raw, TFRecordWriter(raw, compression, level) as writer:
        writer.write_framed(framed, len(list(iter_records(io.BytesIO(framed)))))
        for payload in payloads:
            writer.write(payload)
        return writer._out.backend


def read_records(path: str, compression) -> list[bytes]:
    from transforms.format.tfrecord_reader import iter_records

    with open(path, "rb") as f:
        return [record.payload for record in iter_records(f, compression)]
