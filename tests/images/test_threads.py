"""`ConvertImages` on several threads: exactly the batches of one thread (same keys, bytes,
dead letters and counts), an unreadable image a dead letter in its place."""

from __future__ import annotations

import json
import os

from tests.helpers import batch_tuples
from tests.images import image_samples as samples
from transforms.images.config import ImageConfig
from transforms.images.convert import ConvertImages
from transforms.images.plan import plan_image_folder


def test_threaded_image_conversion_gives_the_same_batches(tmp_path):
    jpeg = samples.encode(samples.rgb(), "JPEG", quality=85)
    png = samples.encode(samples.gray(), "PNG")
    for i in range(24):
        label = "cat" if i % 2 else "dog"
        os.makedirs(tmp_path / label, exist_ok=True)
        data = jpeg if i % 3 else png
        if i == 7:
            data = b"\xff\xd8 not really a jpeg"
        (tmp_path / label / f"{i:03d}.jpg").write_bytes(data)
    plan = plan_image_folder(str(tmp_path), images_per_unit=10)

    def run(threads):
        fn = ConvertImages(ImageConfig(threads=threads), plan.source)
        fn.setup()
        return [b for unit in plan.work_units for b in fn.process(unit)]

    serial, threaded = run(1), run(4)
    assert batch_tuples(threaded) == batch_tuples(serial)
    letters = [json.loads(d) for b in threaded for d in b.dead_letters]
    assert [d["filename"] for d in letters] == ["cat/007.jpg"]
    assert sum(len(b.records) for b in threaded) == 23
