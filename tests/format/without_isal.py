"""Format code run in a child Python where ISA-L is not installed (its import blocked), as on
a machine without the `isal` package: there the stdlib's zlib compresses and inflates."""

from __future__ import annotations

import io
import pathlib
import pickle
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


class ChildWithoutIsal:
    """One child Python without ISA-L that runs `name(*args)`, a function of this module, per
    call and sends back its result; started once, for the calls of a whole test module."""

    CODE = ("import pickle, sys, traceback\nsys.modules['isal'] = None\n"
            "from tests.format import without_isal\n"
            "while True:\n"
            "    try:\n"
            "        name, args = pickle.load(sys.stdin.buffer)\n"
            "    except EOFError:\n"
            "        break\n"
            "    try:\n"
            "        reply = (True, getattr(without_isal, name)(*args))\n"
            "    except BaseException:\n"
            "        reply = (False, traceback.format_exc())\n"
            "    pickle.dump(reply, sys.stdout.buffer)\n"
            "    sys.stdout.buffer.flush()\n")

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-c", self.CODE], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, cwd=REPO)

    def __call__(self, name: str, *args):
        pickle.dump((name, args), self.process.stdin)
        self.process.stdin.flush()
        succeeded, result = pickle.load(self.process.stdout)
        assert succeeded, result
        return result

    def close(self) -> None:
        self.process.stdin.close()
        assert self.process.wait(timeout=120) == 0
        self.process.stdout.close()


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
