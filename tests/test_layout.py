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
  `MAX_MODULE_LINES` lines;
* the contributor map in `pipeline/__init__.py` lists every package folder and module, each
  with its job, and nothing else; no docstring or comment of product code names a module,
  file or folder of ours that does not exist;
* the public package `tfrecord_pipeline` (`pipeline/api/`) is imported by none of our modules,
  and `pyproject.toml` installs exactly the tree's packages plus it.

Each failure names the files (and import lines) that break the rule. The checks are plain
functions of a source root, so the tests at the end prove each one fails on a small
synthetic tree.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
from collections.abc import Iterable, Mapping
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("pipeline", "transforms", "protos")
MAX_MODULE_LINES = 600
# protoc writes this into every module it generates (protos/*_pb2.py).
GENERATED_MARKER = "DO NOT EDIT"
# The public API: installed as `tfrecord_pipeline` from this folder; its __init__ holds the API.
PUBLIC_PACKAGE, PUBLIC_FOLDER = "tfrecord_pipeline", "pipeline/api"
MAP_MODULE = "pipeline/__init__.py"


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
            if _inside(edge.target, PUBLIC_PACKAGE) or _inside(edge.target, PUBLIC_FOLDER.replace("/", ".")):
                problems.append(f"{edge.where(modules, root)}: nothing of ours imports the public API")
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
        if path.name != "__init__.py" or _relative(path.parent, root) == PUBLIC_FOLDER:
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


def _product_files(root: Path) -> dict[str, Path]:
    """Relative path -> file, for every non-generated module of the project."""
    return {_relative(path, root): path for path in project_modules(root).values()
            if not _is_generated(path.read_text(encoding="utf-8"))}


def _first_line_of_docstring(path: Path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return (docstring.splitlines() or ["(no docstring)"])[0].rstrip(".")


_MAP_FOLDER = re.compile(r"^  ((?:[a-z_]+/)+)(.*)$")
_MAP_MODULE = re.compile(r"^    (\w+\.py)(.*)$")


def map_entries(docstring: str) -> dict[str, str]:
    """The map's entries, path -> job: folder lines (`  transforms/x/  job`) and, under each,
    module lines (`    name.py  job`); deeper-indented lines continue the one above."""
    entries, folder = {}, None
    for line in docstring.splitlines():
        if match := _MAP_FOLDER.match(line):
            folder = match[1]
            entries[folder] = match[2].strip()
        elif folder and (match := _MAP_MODULE.match(line)):
            entries[folder + match[1]] = match[2].strip()
    return entries


def map_problems(root: Path) -> list[str]:
    """What the map in pipeline/__init__.py lacks or lists in excess, as the lines to add or
    remove, each with its folder and job (the module docstring's first line)."""
    # A package is listed by its folder (`transforms/reading/`), a module by its file.
    tree = {path_name.removesuffix("__init__.py"): path for path_name, path in _product_files(root).items()}
    [first, *_] = ast.parse((root / MAP_MODULE).read_text(encoding="utf-8")).body
    entries = map_entries(first.value.value)  # as written: ast.get_docstring would dedent it
    problems = []
    for name in sorted(tree.keys() - entries.keys()):
        job = _first_line_of_docstring(tree[name])
        if name.endswith("/"):
            problems.append(f"{MAP_MODULE}: add the folder line `  {name}  {job}`")
        else:
            folder, module = name.rsplit("/", 1)
            problems.append(f"{MAP_MODULE}: add under `  {folder}/`: `    {module}  {job}`")
    for name in sorted(entries.keys() - tree.keys()):
        problems.append(f"{MAP_MODULE}: remove `{name}`: no such module or package")
    for name in sorted(entries.keys() & tree.keys()):
        if not entries[name]:
            problems.append(f"{MAP_MODULE}: `{name}` needs its one-line job")
    return problems


# Names of our modules in prose: dotted (`transforms.reading.examples`, not after a dot or a
# word, so `self.pipeline.run` is not one), paths (`transforms/images/plan.py`, folders too)
# and bare file names (`csv_reader.py`; another project's file is named with its folder,
# `core/naming.py`, or a pattern: `*_pb2.py`).
_DOTTED = re.compile(r"(?<![\w.])((?:pipeline|transforms|protos)(?:\.[A-Za-z_]\w*)+)")
_PATH = re.compile(r"(?<![\w./-])((?:pipeline|transforms|protos)(?:/\w+)*(?:\.py|/)?)(?![\w*])")
_FILE_NAME = re.compile(r"(?<![\w./*-])(\w+\.py)\b")


def _prose(path: Path) -> Iterable[tuple[int, str]]:
    """(line, text) of every docstring and comment of a module."""
    text = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                yield body[0].lineno, body[0].value.value
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def _dotted_is_missing(name: str, modules: Mapping[str, Path]) -> bool:
    """A dotted name whose deepest existing module is a package: package __init__.py files
    hold only their docstring, so the next part can only be a module that does not exist."""
    found = _deepest_module(name, modules)
    return name != found and (found is None or _is_package(found, modules))


def stale_name_problems(root: Path, extra_roots: Iterable[str] = ("tests", "benchmarks", "deploy"),
                        ) -> list[str]:
    """Docstrings and comments of product code naming a module, file or folder of ours that
    does not exist (a bare `x.py` may be any Python file of the repository)."""
    modules = project_modules(root)
    file_names = {path.name for folder in (*PROJECT_PACKAGES, *extra_roots)
                  for path in (root / folder).rglob("*.py")}
    problems = []
    for path_name, path in sorted(_product_files(root).items()):
        for line, text in sorted(_prose(path)):
            for offset, prose_line in enumerate(text.splitlines()):
                missing = [name for name in _DOTTED.findall(prose_line) if _dotted_is_missing(name, modules)]
                missing += [name for name in _PATH.findall(prose_line) if "/" in name
                            and not (root / name).exists()]
                missing += [name for name in _FILE_NAME.findall(prose_line) if name not in file_names]
                problems += [f"{path_name}:{line + offset} names `{name}`, which does not exist"
                             for name in dict.fromkeys(missing)]
    return problems


def packaging_problems(root: Path) -> list[str]:
    """pyproject.toml's package list against the tree: every package folder of ours (the
    public folder as `tfrecord_pipeline`), nothing more."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(setuptools.get("packages", []))
    modules = project_modules(root)
    public_module = PUBLIC_FOLDER.replace("/", ".")
    tree = {PUBLIC_PACKAGE if name == public_module else name
            for name in modules if _is_package(name, modules)}
    problems = [f"pyproject.toml: add {name!r} to [tool.setuptools] packages"
                for name in sorted(tree - listed)]
    problems += [f"pyproject.toml: remove {name!r} from [tool.setuptools] packages (no such package)"
                 for name in sorted(listed - tree)]
    if setuptools.get("package-dir", {}).get(PUBLIC_PACKAGE) != PUBLIC_FOLDER:
        problems.append(f"pyproject.toml: [tool.setuptools.package-dir] needs "
                        f"{PUBLIC_PACKAGE} = {PUBLIC_FOLDER!r}")
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


def test_the_map_lists_every_module_and_nothing_else():
    problems = map_problems(REPO)
    assert not problems, _report(problems)


def test_docstrings_and_comments_name_only_modules_that_exist():
    problems = stale_name_problems(REPO)
    assert not problems, _report(problems)


def test_pyproject_installs_exactly_the_trees_packages():
    problems = packaging_problems(REPO)
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


MAPPED = '"""App.\n\n  pipeline/  the app\n    cli.py  the command line\n      (a continuation line)\n' \
         '  transforms/  transforms\n    sink.py\n    gone.py  was removed\n"""\n'


def test_the_map_names_what_to_add_and_remove(tmp_path):
    root = _tree(tmp_path, PACKAGES | {
        "pipeline/__init__.py": MAPPED,
        "pipeline/cli.py": '"""The command line: parsing and dispatch.\n\nMore."""\n',
        "transforms/sink.py": DOC,
        "transforms/fresh.py": '"""A new module\'s job."""\n',
        "transforms/format/codec.py": DOC,
        "protos/example_pb2.py": "# DO NOT EDIT\n",
    })
    assert map_entries(ast.parse(MAPPED).body[0].value.value) == {
        "pipeline/": "the app", "pipeline/cli.py": "the command line", "transforms/": "transforms",
        "transforms/sink.py": "", "transforms/gone.py": "was removed"}
    assert map_problems(root) == [
        "pipeline/__init__.py: add the folder line `  protos/  Doc`",
        "pipeline/__init__.py: add the folder line `  transforms/format/  Doc`",
        "pipeline/__init__.py: add under `  transforms/format/`: `    codec.py  Doc`",
        "pipeline/__init__.py: add under `  transforms/`: `    fresh.py  A new module's job`",
        "pipeline/__init__.py: remove `transforms/gone.py`: no such module or package",
        "pipeline/__init__.py: `transforms/sink.py` needs its one-line job",
    ]


def test_docstrings_and_comments_naming_missing_modules_are_named(tmp_path):
    root = _tree(tmp_path, PACKAGES | {
        "transforms/tabular/__init__.py": DOC,
        "transforms/tabular/spec.py": DOC + "def load_spec(): ...\n",
        "transforms/sink.py": (
            '"""Uses `transforms.tabular.spec.load_spec` and `transforms.tabular.load_spec` (gone).\n\n'
            'See transforms/tabular/spec.py, transforms/tabular/ and transforms/old.py; csv_reader.py;\n'
            'spec.py, protos/*_pb2.py, and core/naming.py are fine; pipeline.run() is read as ours.\n"""\n'
            "# transforms.format.codec.Frame came from transforms.codec (gone)\n"
            "def write(pipeline):\n"
            '    """Writes with `self.pipeline.options` and `transforms.format.gone`."""\n'
            '    return "transforms.nowhere is a string, not prose"\n'),
        "transforms/format/codec.py": DOC,
        "tests/test_spec.py": DOC,
    })
    assert stale_name_problems(root) == [
        "transforms/sink.py:1 names `transforms.tabular.load_spec`, which does not exist",
        "transforms/sink.py:3 names `transforms/old.py`, which does not exist",
        "transforms/sink.py:3 names `csv_reader.py`, which does not exist",
        "transforms/sink.py:4 names `pipeline.run`, which does not exist",
        "transforms/sink.py:6 names `transforms.codec`, which does not exist",
        "transforms/sink.py:8 names `transforms.format.gone`, which does not exist",
    ]


def test_packaging_names_missing_and_extra_packages(tmp_path):
    root = _tree(tmp_path, PACKAGES | {
        "pipeline/api/__init__.py": DOC + "import importlib\n",  # the public API may hold code
        "transforms/images/__init__.py": DOC,
        "pyproject.toml": '[tool.setuptools]\npackages = ["pipeline", "protos", "transforms", '
                          '"transforms.format", "transforms.gone", "tfrecord_pipeline"]\n',
    })
    assert packaging_problems(root) == [
        "pyproject.toml: add 'transforms.images' to [tool.setuptools] packages",
        "pyproject.toml: remove 'transforms.gone' from [tool.setuptools] packages (no such package)",
        "pyproject.toml: [tool.setuptools.package-dir] needs tfrecord_pipeline = 'pipeline/api'",
    ]
    assert init_problems(root) == []


def test_nothing_of_ours_imports_the_public_api(tmp_path):
    root = _tree(tmp_path, PACKAGES | {
        "pipeline/api/__init__.py": DOC,
        "pipeline/cli.py": DOC + "import tfrecord_pipeline\n",
        "transforms/sink.py": DOC + "from pipeline.api import read_examples\n",
    })
    problems = direction_problems(root)
    assert any("pipeline/cli.py:2 imports tfrecord_pipeline: nothing of ours imports the public API" in p
               for p in problems), problems
    assert any("transforms/sink.py:2 imports pipeline.api: nothing of ours" in p for p in problems), problems
