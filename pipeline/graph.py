"""The conversion pipeline graph.

    PlanWorkUnits (Create) [-> CutByteRanges] -> Convert<Format> (ParDo) -> WriteShards

Work units are planned on the launcher and read inside the converter DoFn; records travel
as batches; dead letters ride in the same elements; the sink is the only terminal step and
writes the manifest. Where the launcher left large text files to be cut by the workers
(Dataflow and other distributed runners; a Dask cluster cuts them before the run, see
`pipeline.planning.cut_before_run`), `CutByteRanges` first finds their record starts there.

This shape is what Beam 2.77's DaskRunner can run correctly, and it
keeps memory bounded on the local runner (no shuffle of the data in the default sharding).

On the local in-process runner the work units travel as one `WorkUnitGroup`, converted on
forked processes (`in_process_plan`); where the converter can, each child also writes what it
converts to temporary shards, and the sink only passes the file names on to the commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import apache_beam as beam

from transforms.forked_pool import fork_available
from transforms.records import WorkUnit, WorkUnitGroup
from transforms.sink import WriteToShardedTFRecord

if TYPE_CHECKING:  # the tabular planner builds it, only for text inputs
    from transforms.tabular.range_cuts import CutRangesInWorkers

__all__ = ["ConversionPlan", "build_pipeline", "in_process_plan"]


@dataclasses.dataclass(frozen=True)
class ConversionPlan:
    """Everything a run needs, decided on the launcher before the graph is built.

    Attributes:
      converter_label: the stable step label, e.g. "ConvertCsv".
      work_units: the input, split into independently readable pieces.
      converter: the DoFn turning a WorkUnit into RecordBatches, or a PTransform from
        work units to RecordBatches (the sequence conversion, which shuffles rows by group).
      splits: declared split names (empty shards are written for those without records).
      extra_files: files committed beside the shards ({relative path: bytes}).
      manifest_metadata: extra manifest keys ("options", "fingerprint", "labels", ...).
      summary: human-readable facts for --dry-run and logs.
      input_bytes: total size of the input files, when known (sizes the local runner).
      local_processes: processes the converter may fork to convert the work units at once
        on the local in-process runner (its DoFn then takes a `WorkUnitGroup`); 1: never.
      children_write: the converter's forked children can write their batches to temporary
        shards themselves (`WorkUnitGroup.writer`).
      cut_units: a step from the planned work units to the ones the converter reads (the
        workers find the record starts of byte ranges); None: they are read as planned.
    """

    converter_label: str
    work_units: Sequence[WorkUnit | WorkUnitGroup]
    converter: beam.DoFn | beam.PTransform
    splits: Sequence[str] = ()
    extra_files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    manifest_metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    summary: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    input_bytes: int = 0
    local_processes: int = 1
    children_write: bool = False
    cut_units: CutRangesInWorkers | None = None


def in_process_plan(plan: ConversionPlan, sink: WriteToShardedTFRecord | None = None) -> ConversionPlan:
    """`plan` for the local in-process runner: its work units as one `WorkUnitGroup`,
    converted on `plan.local_processes` forked processes, when there are several of both.

    With `sink`, children that can (`plan.children_write`) write their own temporary shards
    when the sink rolls shards (not with `num_shards`, which deals records after a shuffle):
    the parent then never receives the converted bytes, a serial path it would otherwise be.
    """
    processes = min(plan.local_processes, len(plan.work_units))
    if processes <= 1 or not fork_available() or plan.cut_units is not None:
        return plan
    writes = sink is not None and plan.children_write and not sink.config.sharding.num_shards
    group = WorkUnitGroup(tuple(plan.work_units), processes, sink.config if writes else None)
    return dataclasses.replace(plan, work_units=[group])


def build_pipeline(pipeline: beam.Pipeline, plan: ConversionPlan, sink: WriteToShardedTFRecord):
    """Adds the conversion to `pipeline`; returns the PCollection of the manifest path."""
    units = pipeline | "PlanWorkUnits" >> beam.Create(list(plan.work_units))
    if plan.cut_units is not None:
        units = units | "CutByteRanges" >> plan.cut_units
    return (
        units
        | plan.converter_label >> (plan.converter if isinstance(plan.converter, beam.PTransform)
                                   else beam.ParDo(plan.converter))
        | "WriteShards" >> sink
    )
