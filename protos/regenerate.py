"""Regenerate the checked-in Python code of protos/*.proto with the pinned protoc.

    python -m protos.regenerate            # rewrite protos/*_pb2.py and *_pb2.pyi in place
    python -m protos.regenerate --check    # exit 1, printing a diff, if they are stale

The generated code records the protoc release that produced it and refuses to load
under an older protobuf runtime, so it is produced only by one pinned compiler: the
protoc bundled in grpcio-tools PINNED_GRPCIO_TOOLS. Other versions are refused rather
than silently producing a different file. `tests/format/test_protos.py` runs `--check`.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["GENERATED_FILES", "PINNED_GRPCIO_TOOLS", "PINNED_PROTOC", "PROTO_FILES", "check", "generate",
           "main"]

#: grpcio-tools release whose bundled protoc generated the checked-in code.
PINNED_GRPCIO_TOOLS = "1.81.1"
#: The protoc version bundled in that release (as printed by `protoc --version`).
PINNED_PROTOC = "33.5"

#: Repository root; passed as the only include path so that generated modules
#: import each other as `from protos import feature_pb2`.
REPO_ROOT = Path(__file__).resolve().parent.parent

#: Proto sources, relative to REPO_ROOT (their import paths).
PROTO_FILES = ("protos/feature.proto", "protos/example.proto")

#: Generated files, relative to REPO_ROOT.
GENERATED_FILES = tuple(f"{proto[: -len('.proto')]}_pb2{suffix}"
                        for proto in PROTO_FILES for suffix in (".py", ".pyi"))


class PinError(RuntimeError):
    """The installed protoc is not the pinned one."""


def _protoc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpc_tools.protoc", *args], capture_output=True, text=True,
                          check=False)


def check_pinned_protoc() -> None:
    """Raise PinError unless grpcio-tools == PINNED_GRPCIO_TOOLS bundling protoc PINNED_PROTOC."""
    hint = f"install it with: pip install grpcio-tools=={PINNED_GRPCIO_TOOLS}"
    try:
        installed = importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        raise PinError(f"grpcio-tools is not installed; protos are generated with grpcio-tools "
                       f"{PINNED_GRPCIO_TOOLS} (protoc {PINNED_PROTOC}); {hint}") from None
    if installed != PINNED_GRPCIO_TOOLS:
        raise PinError(f"grpcio-tools {installed} is installed, but protos are generated only with the "
                       f"pinned grpcio-tools {PINNED_GRPCIO_TOOLS} (protoc {PINNED_PROTOC}); {hint}")
    result = _protoc("--version")
    version = result.stdout.strip()
    if result.returncode != 0 or version != f"libprotoc {PINNED_PROTOC}":
        raise PinError(f"grpcio-tools {installed} reports protoc {version or result.stderr.strip()!r}, "
                       f"expected 'libprotoc {PINNED_PROTOC}'")


def generate(out_dir: Path) -> list[Path]:
    """Generate GENERATED_FILES under `out_dir` (which mirrors REPO_ROOT); returns their paths."""
    check_pinned_protoc()
    result = _protoc(f"--proto_path={REPO_ROOT}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
                     *PROTO_FILES)
    if result.returncode != 0:
        raise RuntimeError(f"protoc failed (exit {result.returncode}):\n{result.stderr}")
    return [out_dir / name for name in GENERATED_FILES]


def check() -> list[str]:
    """Regenerate into a temporary directory; returns a unified diff (empty when up to date)."""
    diff: list[str] = []
    with tempfile.TemporaryDirectory(prefix="protos-regenerate-") as tmp:
        (Path(tmp) / "protos").mkdir()
        generate(Path(tmp))
        for name in GENERATED_FILES:
            fresh = (Path(tmp) / name).read_text().splitlines(keepends=True)
            checked_in = REPO_ROOT / name
            old = checked_in.read_text().splitlines(keepends=True) if checked_in.exists() else []
            diff.extend(difflib.unified_diff(old, fresh, fromfile=f"{name} (checked in)",
                                             tofile=f"{name} (fresh)"))
    return diff


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m protos.regenerate", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 with a diff if the checked-in generated code is stale")
    args = parser.parse_args(argv)
    try:
        if args.check:
            diff = check()
            if diff:
                sys.stdout.writelines(diff)
                print("\nprotos: checked-in generated code is stale; run `python -m protos.regenerate`",
                      file=sys.stderr)
                return 1
            print(f"protos: generated code is up to date (protoc {PINNED_PROTOC})")
            return 0
        for path in generate(REPO_ROOT):
            print(f"wrote {path.relative_to(REPO_ROOT)}")
        return 0
    except PinError as e:
        print(f"protos.regenerate: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
