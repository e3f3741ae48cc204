"""The package layout rules of issue 17, checked on the source tree with `ast`.

Data flows one way: `pipeline` -> `transforms` -> `transforms.format` -> `protos`. So:

* no module under `transforms/` or `protos/` imports `pipeline`;
* no module under `transforms/format/` imports `apache_beam` or a `transforms` module outside
  `transforms/format/`;
* no module under `transforms/reading/` (the Beam-free readers) imports `apache_beam` or a
  `transforms` module outside `transforms/reading/` and `transforms/format/` (those would
  bring Beam in with them);
* no import circle among the project's modules (imports inside functions count too: they run
  later, but a circle is a circle for whoever reads or splits the code);
* a package `__init__.py` holds only its docstring;
* every non-generated module under `pipeline/` or `transforms/` has a docstring and at most
  `MAX_MODULE_LINES` lines.

Each failure names the files (and import lines) that break the rule. The checks are plain
functions of a source root, so the tests at the end prove each one fails on a small
synthetic tree.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("pipeline", "transforms", "protos")
MAX_MODULE_LINES = 600
# protoc writes this into every module it generates (protos/*_pb2.py).
GENERATED_MARKER = "DO NOT EDIT"


@dataclasses.dataclass(frozen=True)
class Import:
    """One import statement's edge from `source` to `target`, both dotted module names."""

    source: str
    target: str
    line: int

    def where(self, modules: Mapping[str, Path], root: Path) -> str:
        return f"{_relative(modules[self.source], root)}:{self.line} imports {self.target}"


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def project_modules(root: Path, packages: Iterable[str] = PROJECT_PACKAGES) -> dict[str, Path]:
    """Dotted module name -> source file, for every `.py` file of `packages` under `root`
    (a package is named by its `__init__.py`)."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_package(name: str, modules: Mapping[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _resolve_from(module: str, node: ast.ImportFrom, modules: Mapping[str, Path]) -> str:
    """The absolute module named by `from [dots]X import ...` written in `module`."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if _is_package(module, modules) else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _deepest_module(name: str, modules: Mapping[str, Path]) -> str | None:
    """`name`, or its longest prefix that is a project module (`import a.b` of a module
    `a.b` that defines `c`, read as `a.b.c`); None outside the project."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imports_of(module: str, modules: Mapping[str, Path]) -> list[Import]:
    """Every import anywhere in `module` (module level, functions, classes, conditionals),
    as edges to the modules it names; external modules keep their own dotted name."""
    tree = ast.parse(modules[module].read_text(encoding="utf-8"), filename=str(modules[module]))
    edges = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                edges.append(Import(module, _deepest_module(alias.name, modules) or alias.name,
                                    node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(module, node, modules)
            for alias in node.names:
                # `from pkg import module` imports the module; `from module import name` the module.
                target = (_deepest_module(f"{base}.{alias.name}", modules)
                          or _deepest_module(base, modules) or base)
                edges.append(Import(module, target, node.lineno))
    return edges


def import_graph(modules: Mapping[str, Path]) -> dict[str, list[Import]]:
    """Each project module -> its imports of other project modules."""
    return {name: [edge for edge in imports_of(name, modules) if edge.target in modules]
            for name in modules}


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def import_circles(graph: Mapping[str, list[Import]]) -> list[list[str]]:
    """The strongly connected components of `graph` that form a circle (two or more modules,
    or one importing itself), each sorted; Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted({e.target for e in graph[start]})))]
        index[start] = lowlink[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = lowlink[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted({e.target for e in graph[successor]}))))
                    break
                if successor in on_stack:
                    lowlink[node] = min(lowlink[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowlink[parent] = min(lowlink[parent], lowlink[node])
                if lowlink[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    self_import = any(e.target == node for e in graph[node])
                    if len(component) > 1 or self_import:
                        circles.append(sorted(component))
    return sorted(circles)


# ------------------------------------------------------------------------- the rules
# Each returns one line per problem, naming the file (and line); [] when the rule holds.


def direction_problems(root: Path) -> list[str]:
    """Imports against the flow pipeline -> transforms -> transforms.format -> protos."""
    modules = project_modules(root)
    problems = []
    for module in modules:
        for edge in imports_of(module, modules):
            below_pipeline = _inside(module, "transforms") or _inside(module, "protos")
            if below_pipeline and _inside(edge.target, "pipeline"):
                problems.append(f"{edge.where(modules, root)}: transforms/ and protos/ must not import "
                                f"pipeline")
            if _inside(module, "transforms.format"):
                if _inside(edge.target, "apache_beam"):
                    problems.append(f"{edge.where(modules, root)}: transforms/format/ must not import Beam")
                elif _inside(edge.target, "transforms") and not _inside(edge.target, "transforms.format"):
                    problems.append(f"{edge.where(modules, root)}: transforms/format/ may import only "
                                    f"transforms.format and protos")
            if _inside(module, "transforms.reading"):
                if _inside(edge.target, "apache_beam"):
                    problems.append(f"{edge.where(modules, root)}: transforms/reading/ must not import Beam")
                elif _inside(edge.target, "transforms") and not any(
                        _inside(edge.target, allowed) for allowed in ("transforms.reading",
                                                                      "transforms.format")):
                    problems.append(f"{edge.where(modules, root)}: transforms/reading/ may import only "
                                    f"transforms.reading, transforms.format and protos")
    return problems


def circle_problems(root: Path) -> list[str]:
    """One line per import circle, naming its files and the imports that close it."""
    modules = project_modules(root)
    graph = import_graph(modules)
    problems = []
    for circle in import_circles(graph):
        members = set(circle)
        edges = [edge.where(modules, root) for name in circle for edge in graph[name]
                 if edge.target in members]
        files = ", ".join(_relative(modules[name], root) for name in circle)
        problems.append(f"import circle among {files}: " + "; ".join(edges))
    return problems


def init_problems(root: Path) -> list[str]:
    """Package `__init__.py` files holding anything besides their docstring."""
    problems = []
    for path in project_modules(root).values():
        if path.name != "__init__.py":
            continue
        body = ast.parse(path.read_text(encoding="utf-8")).body
        has_docstring = bool(body) and isinstance(body[0], ast.Expr) and isinstance(
            body[0].value, ast.Constant) and isinstance(body[0].value.value, str)
        if not has_docstring:
            problems.append(f"{_relative(path, root)}: a package __init__.py needs a docstring")
        extra = body[1:] if has_docstring else body
        if extra:
            lines = ", ".join(str(statement.lineno) for statement in extra)
            problems.append(f"{_relative(path, root)}: holds more than its docstring (lines {lines})")
    return problems


def _is_generated(text: str) -> bool:
    return any(GENERATED_MARKER in line for line in text.splitlines()[:5])


def module_problems(root: Path, max_lines: int = MAX_MODULE_LINES) -> list[str]:
    """Non-generated modules of pipeline/ and transforms/ without a docstring or too long."""
    problems = []
    for path in project_modules(root, ("pipeline", "transforms")).values():
        text = path.read_text(encoding="utf-8")
        if _is_generated(text):
            continue
        lines = len(text.splitlines())
        if lines > max_lines:
            problems.append(f"{_relative(path, root)}: {lines} lines (at most {max_lines})")
        if not ast.get_docstring(ast.parse(text)):
            problems.append(f"{_relative(path, root)}: no module docstring stating its job")
    return problems


# ------------------------------------------------------------------- the real tree


def _report(problems: list[str]) -> str:
    return "\n" + "\n".join(problems)


def test_the_project_has_modules_to_check():
    modules = project_modules(REPO)
    assert {"pipeline.cli", "transforms.sink", "transforms.format.tfrecord_format"} <= set(modules)


def test_imports_flow_one_way():
    problems = direction_problems(REPO)
    assert not problems, _report(problems)


def test_no_import_circles():
    problems = circle_problems(REPO)
    assert not problems, _report(problems)


def test_package_inits_hold_only_a_docstring():
    problems = init_problems(REPO)
    assert not problems, _report(problems)


def test_modules_have_a_docstring_and_at_most_600_lines():
    problems = module_problems(REPO)
    assert not problems, _report(problems)


# ------------------------------------------------- the checks fail where they should


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


DOC = '"""Doc."""\n'
PACKAGES = {
    "pipeline/__init__.py": DOC, "transforms/__init__.py": DOC,
    "transforms/format/__init__.py": DOC, "protos/__init__.py": DOC,
}


def test_a_circle_through_a_function_level_relative_import_is_found(tmp_path):
    root = _tree(tmp_path, PACKAGES | {
        "transforms/a.py": DOC + "from transforms import b\n",
        "transforms/b.py": DOC + "def later():\n    from . import c\n",
        "transforms/c.py": DOC + "from .a import something\n",
        "transforms/d.py": DOC + "import transforms.a\n",  # into the circle, not part of it
    })
    graph = import_graph(project_modules(root))
    assert import_circles(graph) == [["transforms.a", "transforms.b", "transforms.c"]]
    [problem] = circle_problems(root)
    for named in ("transforms/a.py:2", "transforms/b.py:3", "transforms/c.py:2"):
        assert named in problem
    assert "transforms/d.py" not in problem


def test_a_module_importing_itself_and_two_separate_circles_are_found(tmp_path):
    root = _tree(tmp_path, PACKAGES | {
        "pipeline/solo.py": DOC + "import pipeline.solo\n",
        "pipeline/x.py": DOC + "from pipeline.y import thing\n",
        "pipeline/y.py": DOC + "from . import x\n",
        "transforms/format/p.py": DOC + "from ..format import q\n",
        "transforms/format/q.py": DOC + "import transforms.format.p as p\n",
    })
    assert import_circles(import_graph(project_modules(root))) == [
        ["pipeline.solo"], ["pipeline.x", "pipeline.y"], ["transforms.format.p", "transforms.format.q"],
    ]


def test_no_circle_in_a_one_way_tree(tmp_path):
    root = _tree(tmp_path, PACKAGES | {
        "pipeline/cli.py": DOC + "from transforms import sink\nimport apache_beam\n",
        "transforms/sink.py": DOC + "from .format import codec\nimport apache_beam as beam\n",
        "transforms/format/codec.py": DOC + "from protos import example_pb2\n",
        "protos/example_pb2.py": "# DO NOT EDIT\nimport google.protobuf\n",
    })
    assert circle_problems(root) == []
    assert direction_problems(root) == []


def test_imports_against_the_flow_are_named(tmp_path):
    root = _tree(tmp_path, PACKAGES | {
        "pipeline/options.py": DOC,
        "transforms/sink.py": DOC + "def f():\n    from pipeline.options import X\n",
        "protos/extra.py": DOC + "import pipeline\n",
        "transforms/records.py": DOC,
        "transforms/format/codec.py": DOC + "import apache_beam.io\nfrom .. import records\n",
        "transforms/format/ok.py": DOC + "from . import codec\nfrom protos import extra\n",
        "transforms/reading/__init__.py": DOC,
        "transforms/reading/beam.py": DOC + "def f():\n    import apache_beam\n",
        "transforms/reading/sink.py": DOC + "from transforms import records\n",
        "transforms/reading/ok.py": DOC + "from . import sink\nfrom ..format import ok\nimport numpy\n",
    })
    problems = direction_problems(root)
    assert len(problems) == 6, problems
    assert any("transforms/reading/beam.py:3 imports apache_beam: transforms/reading/ must not "
               "import Beam" in p for p in problems)
    assert any("transforms/reading/sink.py:2 imports transforms.records" in p for p in problems)
    assert any("transforms/sink.py:3 imports pipeline.options" in p for p in problems)
    assert any("protos/extra.py:2 imports pipeline" in p for p in problems)
    assert any("transforms/format/codec.py:2 imports apache_beam.io" in p for p in problems)
    assert any("transforms/format/codec.py:3 imports transforms.records" in p for p in problems)


def test_package_inits_with_more_than_a_docstring_are_named(tmp_path):
    root = _tree(tmp_path, PACKAGES | {
        "transforms/images/__init__.py": DOC + "from .convert import ConvertImages\n",
        "transforms/images/convert.py": DOC,
        "pipeline/__init__.py": "import os\n",
        "transforms/tabular/__init__.py": "",
    })
    assert sorted(init_problems(root)) == [
        "pipeline/__init__.py: a package __init__.py needs a docstring",
        "pipeline/__init__.py: holds more than its docstring (lines 1)",
        "transforms/images/__init__.py: holds more than its docstring (lines 2)",
        "transforms/tabular/__init__.py: a package __init__.py needs a docstring",
    ]


def test_long_or_undocumented_modules_are_named_but_generated_code_is_not(tmp_path):
    root = _tree(tmp_path, PACKAGES | {
        "transforms/long.py": DOC + "x = 1\n" * 600,
        "transforms/just_right.py": DOC + "x = 1\n" * 599,
        "pipeline/bare.py": "x = 1\n",
        "transforms/generated_pb2.py": "# Generated by the protocol buffer compiler.  DO NOT EDIT!\n"
                                       + "x = 1\n" * 700,
        "protos/huge.py": DOC + "x = 1\n" * 700,  # protos/ holds generated code: not checked
    })
    assert sorted(module_problems(root)) == [
        "pipeline/bare.py: no module docstring stating its job",
        "transforms/long.py: 601 lines (at most 600)",
    ]
