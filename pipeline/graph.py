"""The conversion pipeline graph.

    PlanWorkUnits (Create) [-> CutByteRanges] -> Convert<Format> (convert and write) -> Commit

Work units are planned on the launcher. Each is converted and written by one call of
`transforms.sink.ConvertAndWrite`, which hands the commit a `UnitResult`: no record travels
between steps. Sequences read rows per unit, shuffle them by bucket (`GroupRows`) and convert
and write each bucket. Where the launcher left large text files to be cut by the workers
(distributed runners), `CutByteRanges` first finds their record starts there.

On the local in-process runner the work units travel as one element into
`ConvertOnForkedProcesses`, which runs the same per-unit step on forked processes, in unit
order: the output depends on the work units alone, whatever the processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
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
      work_units: the input, split into independently readable pieces.
      converter: the DoFn turning one WorkUnit into its RecordBatches, in key order; with
        `assemble`, into the keyed rows `assemble` takes after a GroupByKey (sequences).
      assemble: for sequences, the DoFn turning one shuffled bucket into RecordBatches.
      splits: declared split names (empty shards are written for those without records).
      extra_files: files committed beside the shards ({relative path: bytes}).
      manifest_metadata: extra manifest keys ("options", "fingerprint", "labels", ...).
      summary: human-readable facts for --dry-run and logs.
      input_bytes: total size of the input files, when known.
      local_processes: processes the local in-process runner may fork to convert the work
        units at once; 1: never.
      cut_units: a step from the planned work units to the ones the converter reads (the
        workers find the record starts of byte ranges); None: they are read as planned.
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
    """Every work unit (the one element, a tuple) through `step` on `processes` forked
    processes; yields what `step` yields for each unit, in unit order."""

    def __init__(self, step: beam.DoFn, processes: int):
        self._step = step
        self._processes = processes

    def setup(self):
        self._step.setup()  # before the fork: the children inherit it

    def process(self, units: tuple[WorkUnit, ...]):
        results = forked_map(self._step.process, units, self._processes)
        with contextlib.closing(results):  # a failure downstream stops the forked workers
            yield from results


def build_pipeline(pipeline: beam.Pipeline, plan: ConversionPlan, config: SinkConfig,
                   in_process: bool = False, reused: Mapping[int, UnitResult] | None = None):
    """Adds the conversion to `pipeline`; returns the PCollection of the manifest path.
    `in_process`: the pipeline runs on the local in-process runner, which then converts on
    forked processes (`local_processes`). `reused`: {position in the plan: result} of work
    units an interrupted run wrote (`transforms.resume`), committed without converting them."""
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
