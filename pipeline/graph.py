"""The conversion pipeline graph.

    PlanWorkUnits (Create) -> Convert<Format> (ParDo) -> WriteShards (one terminal sink)

Work units are planned on the launcher and read inside the converter DoFn; records travel
as batches; dead letters ride in the same elements; the sink is the only terminal step and
writes the manifest. This shape is what Beam 2.77's DaskRunner can run correctly, and it
keeps memory bounded on the local runner (no shuffle of the data in the default sharding).

On the local in-process runner the work units travel as one `WorkUnitGroup`, converted on
forked processes (`in_process_plan`). Those start converting before Beam builds and starts
the pipeline (`converting_ahead`), which takes ~0.2 s on one core while the other would
idle; the converter DoFn then takes over the running conversion.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from transforms.forked_pool import fork_available, started_ahead
from transforms.records import WorkUnit, WorkUnitGroup
from transforms.sink import WriteToShardedTFRecord

__all__ = ["ConversionPlan", "build_pipeline", "converting_ahead", "in_process_plan"]


@dataclasses.dataclass(frozen=True)
class ConversionPlan:
    """Everything a run needs, decided on the launcher before the graph is built.

    Attributes:
      converter_label: the stable step label, e.g. "ConvertCsv".
      work_units: the input, split into independently readable pieces.
      converter: the DoFn turning a WorkUnit into RecordBatches. One that converts a
        `WorkUnitGroup` has `convert_group(group, receive_ahead=...)`, which
        `converting_ahead` calls to start early.
      splits: declared split names (empty shards are written for those without records).
      extra_files: files committed beside the shards ({relative path: bytes}).
      manifest_metadata: extra manifest keys ("options", "fingerprint", "labels", ...).
      summary: human-readable facts for --dry-run and logs.
      input_bytes: total size of the input files, when known (sizes the local runner).
      local_processes: processes the converter may fork to convert the work units at once
        on the local in-process runner (its DoFn then takes a `WorkUnitGroup`); 1: never.
    """

    converter_label: str
    work_units: Sequence[WorkUnit | WorkUnitGroup]
    converter: beam.DoFn
    splits: Sequence[str] = ()
    extra_files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    manifest_metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    summary: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    input_bytes: int = 0
    local_processes: int = 1


def in_process_plan(plan: ConversionPlan) -> ConversionPlan:
    """`plan` for the local in-process runner: its work units as one `WorkUnitGroup`,
    converted on `plan.local_processes` forked processes, when there are several of both."""
    processes = min(plan.local_processes, len(plan.work_units))
    if processes <= 1 or not fork_available():
        return plan
    group = WorkUnitGroup(tuple(plan.work_units), processes, key=uuid.uuid4().hex)
    return dataclasses.replace(plan, work_units=[group])


@contextlib.contextmanager
def converting_ahead(plan: ConversionPlan) -> Iterator[None]:
    """Starts converting `plan`'s work-unit groups now, for its converter to take over when
    the pipeline in the block runs in this process; stops what nobody took at exit."""
    convert_group = getattr(plan.converter, "convert_group", None)
    groups = [unit for unit in plan.work_units if isinstance(unit, WorkUnitGroup) and unit.key]
    with contextlib.ExitStack() as stack:
        if convert_group is not None:
            for group in groups:
                stack.enter_context(
                    started_ahead(group.key, convert_group(group, receive_ahead=True)))
        yield


def build_pipeline(pipeline: beam.Pipeline, plan: ConversionPlan, sink: WriteToShardedTFRecord):
    """Adds the conversion to `pipeline`; returns the PCollection of the manifest path."""
    return (
        pipeline
        | "PlanWorkUnits" >> beam.Create(list(plan.work_units))
        | plan.converter_label >> beam.ParDo(plan.converter)
        | "WriteShards" >> sink
    )
