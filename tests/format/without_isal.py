"""Format code run in a child Python where ISA-L is not installed (its import blocked), as on
a machine without the `isal` package: there the stdlib's zlib compresses and inflates."""

from __future__ import annotations

import io
import pathlib
import pickle
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def run_without_isal(name: str, *args):
    """`name(*args)`, a function of this module, in a child without ISA-L; its result."""
    code = ("import pickle, sys\nsys.modules['isal'] = None\n"
            "from tests.format import without_isal\n"
            "name, args = pickle.loads(sys.stdin.buffer.read())\n"
            "sys.stdout.buffer.write(pickle.dumps(getattr(without_isal, name)(*args)))\n")
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((name, args)),
                          capture_output=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return pickle.loads(done.stdout)


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
