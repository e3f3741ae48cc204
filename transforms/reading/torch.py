"""`torch_dataset`: one split as a `torch.utils.data.IterableDataset` of `read_examples`
records that shares itself out: each distributed rank reads a disjoint part of the split,
and each DataLoader worker of a rank a disjoint part of that part (`get_worker_info()` when
iterated), so every record is read once per epoch across ranks and workers, with no sampler.
PyTorch is imported only when called; the dataset class is built then, on the `torch` found."""

from __future__ import annotations

import functools
from typing import Any

from transforms.reading.examples import ExampleReader, read_examples

__all__ = ["collate_examples", "torch_dataset"]

# One dataset class per torch module (the real one, or a test's stand-in), keyed by the
# module itself: kept alive, so a key is never reused.
_CLASSES: dict[Any, type] = {}


def _torch():
    try:
        import torch.utils.data
    except ImportError:
        raise ImportError("reading an output as a PyTorch dataset needs PyTorch: "
                          "pip install 'tfrecord-pipeline[torch]'") from None
    return torch


def _dataset_class() -> type:
    torch = _torch()
    key = torch.utils.data
    if key not in _CLASSES:

        class ExampleIterableDataset(torch.utils.data.IterableDataset):
            """The records of one rank's part of a split (see `transforms.reading.torch`)."""

            def __init__(self, reader: ExampleReader, arguments: dict[str, Any]):
                super().__init__()
                self.reader = reader  # this rank's part
                self._arguments = arguments

            def __len__(self) -> int:
                return len(self.reader)  # the rank's records, all its workers together

            def __iter__(self):
                info = torch.utils.data.get_worker_info()  # None in the main process
                return iter(self.reader.part((0, 1) if info is None else (info.id, info.num_workers)))

            def __reduce__(self):  # a class built at run time pickles as its factory call
                return functools.partial(torch_dataset, **self._arguments), ()

            def __repr__(self) -> str:
                return f"torch_dataset({self.reader!r})"

        _CLASSES[key] = ExampleIterableDataset
    return _CLASSES[key]


def torch_dataset(output_dir: str, split: str, *, rank: int = 0, world_size: int = 1,
                  fill_defaults: bool = False, as_numpy: bool = True):
    """A `torch.utils.data.IterableDataset` of the records of `split` (dicts of numpy
    arrays, see `read_examples`) in the committed output at `output_dir`.

    `rank`, `world_size`: this process's among the distributed ones
    (`torch.distributed.get_rank()`, `get_world_size()`); it reads part `rank` of
    `world_size` (balanced to one record, see `parts`), shared out among its DataLoader
    workers; `len()` counts that part. Batch with `collate_fn=collate_examples`:
    `default_collate` cannot batch strings, varlen features or absent ones.
    """
    arguments = dict(output_dir=output_dir, split=split, rank=rank, world_size=world_size,
                     fill_defaults=fill_defaults, as_numpy=as_numpy)
    reader = read_examples(output_dir, split, shard=(rank, world_size),
                           fill_defaults=fill_defaults, as_numpy=as_numpy)
    return _dataset_class()(reader, arguments)


def collate_examples(records: list[dict[str, Any]]) -> dict[str, Any]:
    """A DataLoader `collate_fn` for `torch_dataset` records (dicts of numpy arrays).

    Per feature, by its shape in the spec, never by the batch's values: dense numeric
    scalars (0-d arrays, `<name>/present` too) stack into one `[batch]` tensor; numeric
    varlen features (1-D arrays) become `{"values": 1-D tensor, "lengths": int64 tensor}`
    (as `tf.RaggedTensor` row lengths; absent: length 0), even when every length is equal;
    strings/bytes stay a list with one entry per record (None where absent).
    """
    import numpy as np

    torch = _torch()
    names = sorted({name for record in records for name in record})
    out: dict[str, Any] = {}
    for name in names:
        values = [record.get(name) for record in records]
        arrays = [np.asarray(value) for value in values if value is not None]
        if not all(a.dtype.kind in "biuf" for a in arrays):
            out[name] = values
        elif len(arrays) == len(values) and all(a.ndim == 0 for a in arrays):
            out[name] = torch.as_tensor(np.stack(arrays))
        else:
            rows = [np.empty(0, arrays[0].dtype) if value is None else np.asarray(value).reshape(-1)
                    for value in values]
            out[name] = {"values": torch.as_tensor(np.concatenate(rows)),
                         "lengths": torch.as_tensor(np.array([len(row) for row in rows], np.int64))}
    return out
