"""Helpers shared by tests in several folders."""

from __future__ import annotations


def in_memory_args() -> list[str]:
    """Beam flags for fast in-process test runs of the CLI."""
    return ["--direct_running_mode=in_memory", "--direct_num_workers=1", "--quiet"]


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def batch_tuples(batches) -> list[tuple]:
    """RecordBatches as comparable tuples: key, split, records, dead letters, input count."""
    return [(b.key, b.split, list(b.records), list(b.dead_letters), b.input_count) for b in batches]


class ModuleServer:
    """One child Python, kept open for a whole test module, that runs `name(*args)` of
    `module` per call and sends back its result (pickled): for code that must run without
    something this process has imported, at one interpreter start per module rather than
    per call. `prelude` runs before the module's import (e.g. blocking an import)."""

    CODE = ("import importlib, pickle, sys, traceback\n{prelude}\n"
            "module = importlib.import_module({module!r})\n"
            "while True:\n"
            "    try:\n"
            "        name, args = pickle.load(sys.stdin.buffer)\n"
            "    except EOFError:\n"
            "        break\n"
            "    try:\n"
            "        reply = (True, getattr(module, name)(*args))\n"
            "    except BaseException:\n"
            "        reply = (False, traceback.format_exc())\n"
            "    pickle.dump(reply, sys.stdout.buffer)\n"
            "    sys.stdout.buffer.flush()\n")

    def __init__(self, module: str, prelude: str = ""):
        import pathlib
        import subprocess
        import sys

        code = self.CODE.format(prelude=prelude, module=module)
        self.process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, cwd=pathlib.Path(__file__).parents[1])

    def __call__(self, name: str, *args):
        import pickle

        pickle.dump((name, args), self.process.stdin)
        self.process.stdin.flush()
        try:
            succeeded, result = pickle.load(self.process.stdout)
        except EOFError:
            raise AssertionError(f"the child serving {name} died (its stderr is above)") from None
        assert succeeded, result
        return result

    def close(self) -> None:
        self.process.stdin.close()
        assert self.process.wait(timeout=120) == 0
        self.process.stdout.close()
