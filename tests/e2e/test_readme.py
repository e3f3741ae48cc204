"""The README's set-up commands and Python examples, run exactly as written.

The README is what a newcomer copies from, so its commands and examples must keep working as
the code changes. Each test runs them in a temporary folder laid out like the repository root
(the sample data at `pipeline/sample_data/`, `.venv` pointing at the running interpreter's
environment), so the README's relative paths hold and nothing is written into the checkout:

* the quick-start command minus its venv and `pip install` set-up (that is this environment),
  i.e. the `convert` of the sample data and the `verify` of its output;
* every ```python block, after the quick start (the TensorFlow example reads the quick start's
  `out/sample`), in README order in that folder, each block in a namespace of its own, as if
  pasted alone (so a name a block forgot to import fails it). They run in this process, not a
  fresh interpreter: what they claim is that the code works as written, which a namespace of
  its own checks; their imports (TensorFlow, TFDS, Beam: ~6 s of CPU in a new interpreter) are
  usually here already. The quick start is about commands and their processes (the console
  script, exit statuses), so it keeps its own.

The test command itself is what `.ci/run` runs; the README must show it verbatim.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# The two set-up commands of the README's quick start (kept verbatim: users and CI copy them).
SETUP = "python3 -m venv .venv && .venv/bin/pip install -q -e . && "
# PyTorch's CPU build first (see .ci/run), then the test extra.
TORCH = "torch==2.13.0"
TEST_COMMAND = (
    f"python3 -m venv .venv && .venv/bin/pip install -q '{TORCH}' && "
    ".venv/bin/pip install -q -e '.[test]' && .venv/bin/python -m pytest -q -n 2 --dist loadfile"
)
EXAMPLE_TIMEOUT_SECONDS = 300

pytestmark = pytest.mark.slow


def code_blocks(markdown: str, language: str) -> list[str]:
    """The bodies of the fenced code blocks tagged `language`, in document order."""
    pattern = re.compile(rf"^```{re.escape(language)}\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
    return pattern.findall(markdown)


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _quick_start_command() -> str:
    [command] = [block.strip() for block in code_blocks(_readme(), "bash")
                 if block.strip().startswith(SETUP)]
    return command


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # The repository first on the path: the working folder has a `pipeline/` folder too
    # (the sample data), which must not shadow the package.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=EXAMPLE_TIMEOUT_SECONDS)


@pytest.fixture(scope="module")
def repo_like_folder(tmp_path_factory) -> Path:
    """A folder laid out like the repository root, in which the quick start has run."""
    root = tmp_path_factory.mktemp("readme")
    shutil.copytree(REPO / "pipeline" / "sample_data", root / "pipeline" / "sample_data")
    if not (Path(sys.prefix) / "bin" / "tfrecord-pipeline").exists():
        pytest.fail(f"no tfrecord-pipeline console script in {sys.prefix}: "
                    "install the project (pip install -e '.[test]')")
    (root / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    result = _run(["bash", "-c", _quick_start_command().removeprefix(SETUP)], root)
    assert result.returncode == 0, f"quick start failed:\n{result.stdout}\n{result.stderr}"
    assert (root / "out" / "sample" / "manifest.json").is_file()
    assert '"status": "ok"' in result.stdout  # verify's summary line
    return root


def test_readme_shows_both_setup_commands_verbatim():
    bash_blocks = [block.strip() for block in code_blocks(_readme(), "bash")]
    assert TEST_COMMAND in bash_blocks
    assert _quick_start_command().startswith(SETUP)
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    steps = [f"pip install --quiet '{TORCH}'", "pip install --quiet -e '.[test]'",
             "-m pytest -q -n 2 --dist loadfile"]
    assert sorted(steps, key=ci.find) == steps and all(step in ci for step in steps)


def test_readme_names_no_machine_paths():
    assert not re.search(r"(?<![\w.])/(work|root|home)/", _readme())


def test_quick_start_runs_as_written(repo_like_folder):
    assert sorted(path.name for path in (repo_like_folder / "out" / "sample").glob("*.tfrecord.gz")) == [
        "test-00000-of-00001.tfrecord.gz",
        "train-00000-of-00001.tfrecord.gz",
        "validation-00000-of-00001.tfrecord.gz",
    ]


PYTHON_BLOCKS = code_blocks(_readme(), "python")


def test_readme_has_python_examples():
    assert len(PYTHON_BLOCKS) >= 2  # reading in TensorFlow, and the Python API


@pytest.fixture(scope="module")
def python_examples(repo_like_folder) -> list[list]:
    """Each README python block's [output, traceback or None], run as described above."""
    results = []
    with pytest.MonkeyPatch.context() as patch:  # module-scoped: no `monkeypatch` fixture
        patch.chdir(repo_like_folder)
        for index, block in enumerate(PYTHON_BLOCKS):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    code = compile(block, f"<README python block {index + 1}>", "exec")
                    exec(code, {"__name__": "__main__"})  # a namespace of its own
                    error = None
                except (Exception, SystemExit):
                    error = traceback.format_exc()
            results.append([out.getvalue(), error])
    return results


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_example_runs_as_written(python_examples, index):
    output, error = python_examples[index]
    assert error is None, (
        f"README python block {index + 1} failed:\n{PYTHON_BLOCKS[index]}\n"
        f"--- output\n{output}\n--- traceback\n{error}")
