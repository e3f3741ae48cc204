"""`FramedRecords`: framed TFRecord bytes of a batch that read back as their payloads."""

from __future__ import annotations

import pickle

import pytest

from transforms.format.tfrecord_format import FramedRecords, frame_records


def test_framed_records_read_as_their_payloads():
    payloads = [b"", b"a", "é".encode() * 50, bytes(range(256)) * 3]
    framed = FramedRecords.frame(payloads)
    assert framed.data == frame_records(payloads)
    assert list(framed) == payloads and framed == payloads and len(framed) == 4
    assert framed[2] == payloads[2] and framed[-1] == payloads[-1]
    assert framed[1:3] == payloads[1:3]
    assert framed[1:3].data == frame_records(payloads[1:3])
    assert framed[::2] == payloads[::2]
    assert list(framed.framed_sizes()) == [len(p) + 16 for p in payloads]
    assert pickle.loads(pickle.dumps(framed)) == framed
    with pytest.raises(IndexError):
        framed[4]
    with pytest.raises(ValueError):
        FramedRecords(framed.data, framed.ends[:-1])  # ends must cover the data
