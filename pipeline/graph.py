"""The conversion pipeline graph.

    PlanWorkUnits (Create) [-> CutByteRanges] -> Convert<Format> (convert and write) -> Commit

Each work unit is converted and written by one `transforms.sink.ConvertAndWrite` call, which
hands the commit a `UnitResult`: no record travels between steps. Sequences read rows per unit,
shuffle them by bucket (`GroupRows`) and convert and write each bucket. `CutByteRanges` finds
the record starts of large text files the launcher left to the workers (distributed runners).
On the local in-process runner the units go as one element to `ConvertOnForkedProcesses`,
which runs the same step on forked processes, in unit order.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import apache_beam as beam

from transforms.forked_pool import fork_available, forked_map
from transforms.records import WorkUnit
from transforms.shard_writers import SinkConfig
from transforms.sink import Commit, ConvertAndWrite
from transforms.unit_result import UnitResult

if TYPE_CHECKING:  # the tabular planner builds it, only for text inputs
    from transforms.tabular.range_cuts import CutRangesInWorkers

__all__ = ["ConversionPlan", "ConvertOnForkedProcesses", "build_pipeline", "local_processes"]


@dataclasses.dataclass(frozen=True)
class ConversionPlan:
    """Everything a run needs, decided on the launcher before the graph is built.

    Attributes:
      converter_label: the stable step label, e.g. "ConvertCsv".
      converter: the DoFn turning one WorkUnit into its RecordBatches, in key order; with
        `assemble` (sequences), into the keyed rows `assemble` takes after a GroupByKey and
        turns, per bucket, into RecordBatches.
      splits, extra_files, manifest_metadata: as `transforms.sink.WriteToShardedTFRecord`.
      summary: human-readable facts for --dry-run and logs.
      input_bytes: total size of the input files, when known.
      local_processes: processes the local in-process runner may fork; 1: never.
      cut_units: the step that finds the record starts of byte ranges on the workers; None:
        units are read as planned.
    """

    converter_label: str
    work_units: Sequence[WorkUnit]
    converter: beam.DoFn
    assemble: beam.DoFn | None = None
    splits: Sequence[str] = ()
    extra_files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    manifest_metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    summary: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    input_bytes: int = 0
    local_processes: int = 1
    cut_units: CutRangesInWorkers | None = None


def local_processes(plan: ConversionPlan) -> int:
    """How many forked processes the local in-process runner converts `plan` on (1: none)."""
    if not fork_available() or plan.cut_units is not None:
        return 1
    return max(1, min(plan.local_processes, len(plan.work_units)))


class ConvertOnForkedProcesses(beam.DoFn):
    """Every work unit (the one element, a tuple) through `step` on forked processes; yields
    what `step` yields for each unit, in unit order."""

    def __init__(self, step: beam.DoFn, processes: int):
        self._step = step
        self._processes = processes

    def setup(self):
        self._step.setup()  # before the fork: the children inherit it

    def process(self, units: tuple[WorkUnit, ...]) -> Iterator[UnitResult]:  # see `commit.Finalize`
        results = forked_map(self._step.process, units, self._processes)
        with contextlib.closing(results):  # a failure downstream stops the forked workers
            yield from results


def build_pipeline(pipeline: beam.Pipeline, plan: ConversionPlan, config: SinkConfig,
                   in_process: bool = False, reused: Mapping[int, UnitResult] | None = None):
    """Adds the conversion to `pipeline`; returns the PCollection of the manifest path.
    `in_process`: on the local in-process runner, which converts on forked processes.
    `reused`: {position in the plan: result} of work units an interrupted run wrote
    (`transforms.resume`), committed without converting them."""
    reused = reused or {}
    todo = [unit for position, unit in enumerate(plan.work_units) if position not in reused]
    plan = dataclasses.replace(plan, work_units=todo)
    step = (plan.converter if plan.assemble is not None
            else ConvertAndWrite(plan.converter, config, record_units=plan.cut_units is None))
    processes = local_processes(plan) if in_process else 1
    if processes > 1:
        converted = (pipeline
                     | "PlanWorkUnits" >> beam.Create([tuple(plan.work_units)])
                     | plan.converter_label >> beam.ParDo(ConvertOnForkedProcesses(step, processes)))
    else:
        units = pipeline | "PlanWorkUnits" >> beam.Create(list(plan.work_units))
        if plan.cut_units is not None:
            units = units | "CutByteRanges" >> plan.cut_units
        converted = units | plan.converter_label >> beam.ParDo(step)
    if plan.assemble is not None:
        converted = (converted
                     | "GroupRows" >> beam.GroupByKey()
                     | "AssembleSequences" >> beam.ParDo(ConvertAndWrite(plan.assemble, config)))
    if reused:
        reused_results = pipeline | "ReusedWorkUnits" >> beam.Create(list(reused.values()))
        converted = (converted, reused_results) | "WithReusedWorkUnits" >> beam.Flatten()
    return converted | "Commit" >> Commit(config)
