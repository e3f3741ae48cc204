"""Resuming an interrupted run: completion records of written work units, and finding them again.

A run writes into `DIR/.tmp-<run id>/`, where it first records what it is (`run.json`: run id
and the fingerprint of its inputs, options and spec). Each work unit, once its files are
closed and synced, gets a completion record (`units/<unit identity>.unit`): its `UnitResult`.
A later run of the same fingerprint takes the same temporary folder, keeps every unit whose
record reads back and whose files are all there at their recorded sizes, converts only the
others, and commits them all: the bytes an uninterrupted run writes, as the output follows
from the work units alone.

Records are pickled (statistics partials hold numpy arrays and sketches, which must come
back bit for bit) and read back with an unpickler that builds only this tool's result types,
numpy arrays and plain values, so a record cannot run code. A committed output keeps its
totals the same way (`STATE_NAME`, see `transforms.commit`), for appends. Units converted
after a shuffle (sequences) have no records: such runs start over. Beam-free apart from the
filesystem.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms import fs
from transforms.output_files import interrupted_runs
from transforms.records import WorkUnit
from transforms.unit_result import UnitResult

__all__ = ["RUN_RECORD", "STATE_NAME", "UNITS_DIR", "completed_units", "dump_result", "load_result",
           "planned_units", "read_run_record", "record_unit", "unit_identity", "write_run_record"]

#: In a run's temporary folder: what the run is (run id, fingerprint).
RUN_RECORD = "run.json"
#: In a run's temporary folder: one completion record per written work unit.
UNITS_DIR = "units"
_RECORD_SUFFIX = ".unit"
#: In a committed output: its totals as one mergeable result (counts, presence, statistics
#: partials, dead-letter examples), which an append merges its own units' results into.
STATE_NAME = "stats.partial"
_RECORD_VERSION = 1

# What a completion record may build when read back: our result types, numpy's arrays and
# scalars, and the builtins pickle uses for plain values.
_ALLOWED_MODULES = ("transforms.", "numpy")
_ALLOWED_BUILTINS = {"set", "frozenset", "slice", "complex", "bytearray", "range"}


def unit_identity(unit: WorkUnit) -> str:
    """A digest of everything that defines a work unit (path, range, items, ...)."""
    text = json.dumps(dataclasses.asdict(unit), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_run_record(temp_dir: str, run_id: str, fingerprint: str,
                     describes: Mapping[str, Any] | None = None,
                     units: Sequence[WorkUnit] | None = None) -> None:
    """Says, before any unit is written, which run the temporary folder belongs to;
    `describes`: what the fingerprint covers, so a later run can say what differs; `units`:
    the planned work units, so a resuming run need not cut its files again."""
    record = {"run_id": run_id, "fingerprint": fingerprint, "version": _RECORD_VERSION,
              "describes": dict(describes or {})}
    if units is not None:
        record["units"] = [dataclasses.asdict(unit) for unit in units]
    fs.write_bytes_atomically(fs.join_path(temp_dir, RUN_RECORD),
                              json.dumps(record, sort_keys=True).encode("utf-8"))


def read_run_record(temp_dir: str) -> Mapping[str, Any] | None:
    """The run record of a temporary folder; None when it has none or it does not read."""
    path = fs.join_path(temp_dir, RUN_RECORD)
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            record = json.loads(handle.read())
    except Exception:  # noqa: BLE001 - missing or damaged: nothing to resume from
        return None
    return record if isinstance(record, dict) and record.get("version") == _RECORD_VERSION else None


def planned_units(output_dir: str, fingerprint: str) -> list[WorkUnit] | None:
    """The work units an interrupted run of `fingerprint` in `output_dir` planned, or None."""
    for folder in interrupted_runs(output_dir):
        record = read_run_record(folder)
        if record and record.get("fingerprint") == fingerprint and isinstance(record.get("units"), list):
            try:
                return [WorkUnit(**{**unit, "paths": tuple(unit["paths"])}) for unit in record["units"]]
            except (TypeError, KeyError):
                return None
    return None


def record_unit(temp_dir: str, unit: WorkUnit, result: UnitResult) -> None:
    """Writes the completion record of `unit`, whose files `result` describes (closed)."""
    identity = unit_identity(unit)
    data = pickle.dumps((_RECORD_VERSION, identity, result), protocol=pickle.HIGHEST_PROTOCOL)
    fs.write_bytes_atomically(fs.join_path(temp_dir, UNITS_DIR, identity + _RECORD_SUFFIX), data)


def dump_result(result: UnitResult) -> bytes:
    """`result` pickled without pickle's memo: equal results give equal bytes, whichever
    objects they happen to share (a committed output's `STATE_NAME`)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True  # no memo: the results hold no cycles
    pickler.dump((_RECORD_VERSION, "", result))
    return buffer.getvalue()


def load_result(data: bytes, identity: str = "") -> UnitResult | None:
    """A result `dump_result` (or, for `identity`, `record_unit`) wrote; None when `data` is
    not one: damaged or foreign, a unit then converts again."""
    try:
        version, recorded, result = _ResultUnpickler(io.BytesIO(data)).load()
    except Exception:  # noqa: BLE001 - damaged or foreign
        return None
    ok = version == _RECORD_VERSION and recorded == identity and isinstance(result, UnitResult)
    return result if ok else None


class _ResultUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if module.startswith(_ALLOWED_MODULES) or (module == "builtins" and name in _ALLOWED_BUILTINS):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a completion record may not hold {module}.{name}")


def _read_record(path: str, identity: str) -> UnitResult | None:
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            return load_result(handle.read(), identity)
    except Exception:  # noqa: BLE001 - unreadable: the unit converts again
        return None


def _files_intact(result: UnitResult, sizes: Mapping[str, int]) -> bool:
    paths = [(file.temp_path, file.bytes) for file in result.files]
    paths += [(file.index.temp_path, file.index.bytes) for file in result.files if file.index]
    return all(sizes.get(path) == size for path, size in paths)


def completed_units(temp_dir: str, units: Sequence[WorkUnit]) -> dict[int, UnitResult]:
    """{position in `units`: its recorded result} for every unit of `units` whose completion
    record reads back and whose files are all in `temp_dir` at their recorded sizes."""
    identities = {unit_identity(unit): position for position, unit in enumerate(units)}
    records = _listing(fs.join_path(temp_dir, UNITS_DIR))
    if not records:
        return {}
    sizes = _listing(temp_dir)
    found = {}
    for path in records:
        identity = path.rsplit("/", 1)[-1][: -len(_RECORD_SUFFIX)]
        if not path.endswith(_RECORD_SUFFIX) or identity not in identities:
            continue
        result = _read_record(path, identity)
        if result is not None and _files_intact(result, sizes):
            found[identities[identity]] = result
    return found


def _listing(folder: str) -> dict[str, int]:
    """{path: size} of every file under `folder` (recursively)."""
    pattern = fs.literal(folder.rstrip("/")) + "/**"
    try:
        matched = fs.match([pattern])[0].metadata_list
    except Exception:  # noqa: BLE001 - no such folder
        return {}
    return {metadata.path: metadata.size_in_bytes for metadata in matched}

