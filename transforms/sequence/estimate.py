"""The `--dry-run` estimate of a sequence conversion: sequences, their size and shards.

The first `sample_rows` rows are read and grouped as the conversion would, in memory, in one
bucket. When the sample covers the whole input the counts are exact; otherwise the sequences
are extrapolated from the sample's rows per sequence, which undercounts groups spread over
the input (their rows outside the sample look like more rows of sampled groups): the
estimate says `exact: false` then. Beam-free.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from contextlib import closing
from typing import Any

from transforms.format.tfrecord_format import framed_size
from transforms.records import RecordBatch, WorkUnit
from transforms.sequence.buckets import assemble_bucket
from transforms.sequence.rows import READ_COUNTS, read_sequence_rows, sequence_assigner
from transforms.tabular.spec import ConversionSpec

__all__ = ["SequenceEstimate", "estimate_sequences"]


@dataclasses.dataclass(frozen=True)
class SequenceEstimate:
    """What --dry-run reports for a `sequence:` spec."""

    sampled_rows: int  # input rows read for the estimate
    rows: int  # input rows in total (the tabular estimate's count or extrapolation)
    sampled_sequences: int  # sequences (records) the sampled rows make
    rows_per_sequence: float  # mean rows written per sampled sequence
    sequences: int  # estimated records (SequenceExamples) in total
    exact: bool  # the whole input was sampled, so the counts are exact
    dead_letter_rate: float  # fraction of sampled rows dead-lettered
    bytes_per_sequence: float  # mean framed size of a sampled sequence, uncompressed
    output_bytes: int  # of all shards, after compression at the ratio measured on the sample
    shards: dict[str, int]  # estimated shard count per split

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "num_shards": sum(self.shards.values())}


def estimate_sequences(units: Sequence[WorkUnit], spec: ConversionSpec, fmt: str,
                       sample_rows: int, total_rows: int, total_exact: bool, *,
                       max_shard_bytes: int, num_shards: int | None = None,
                       compression_ratio: float = 1.0) -> SequenceEstimate:
    """Groups the first `sample_rows` rows into sequences and extrapolates to `total_rows`
    (the tabular estimate's row count; `total_exact` when it is exact)."""
    assigner = sequence_assigner(spec)
    batch_rows = max(1, min(sample_rows, 65536))
    fragments: list = []
    sampled = dead = 0
    complete = True
    for unit in units:
        if sampled >= sample_rows:
            complete = False
            break
        chunk = None
        # Closed when the sample is taken: the reader is then done with the file.
        with closing(read_sequence_rows(unit, spec, fmt, batch_rows, assigner)) as rows:
            for key, value in rows:
                if key.startswith(READ_COUNTS):
                    if value.key != chunk and sampled >= sample_rows:  # whole chunks only
                        complete = False
                        break
                    chunk = value.key  # one batch per split of the chunk
                    sampled += value.input_count
                    dead += len(value.dead_letters)
                else:
                    fragments.append(value)
    per_split: dict[str, int] = defaultdict(int)
    sequences = rows_written = size = 0
    batch: RecordBatch
    for batch in assemble_bucket(0, fragments, spec, assigner.names):
        sequences += len(batch.records)
        rows_written += batch.rows_written
        dead += len(batch.dead_letters)
        sizes = sum(framed_size(len(record)) for record in batch.records)
        per_split[batch.split] += sizes
        size += sizes
    exact = complete and total_exact
    rows = sampled if exact else max(total_rows, sampled)
    rate = dead / sampled if sampled else 0.0
    rows_per_sequence = rows_written / sequences if sequences else 0.0
    estimated = sequences if exact else (
        int(round(rows * (1 - rate) / rows_per_sequence)) if rows_per_sequence else 0)
    bytes_per_sequence = size / sequences if sequences else 0.0
    output_bytes = int(round(estimated * bytes_per_sequence * compression_ratio))
    shares = {name: per_split[name] / size if size else 1 / len(assigner.names) for name in assigner.names}
    shards = {name: num_shards or max(1, math.ceil(output_bytes * share / max_shard_bytes))
              for name, share in shares.items()}
    return SequenceEstimate(sampled_rows=sampled, rows=rows, sampled_sequences=sequences,
                            rows_per_sequence=rows_per_sequence, sequences=estimated, exact=exact,
                            dead_letter_rate=rate, bytes_per_sequence=bytes_per_sequence,
                            output_bytes=output_bytes, shards=shards)
