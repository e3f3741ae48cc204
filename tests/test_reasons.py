"""One registry of dead-letter reasons (`transforms.records.REASONS`): the README lists exactly
its codes, each where its conversion is documented, and the product writes no other."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from transforms.records import IMAGE_REASONS, REASONS, SEQUENCE_REASONS, TABULAR_REASONS

REPO = Path(__file__).resolve().parents[1]
_CODE = re.compile(r"`([a-z]+(?:_[a-z0-9]+)+)`")


def _section(text: str, start: str, end: str) -> str:
    begin = text.index(start)
    return text[begin:text.index(end, begin + len(start))]


def test_the_readme_lists_exactly_the_registered_reasons():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    tabular = _section(readme, "| reason | cause |", "\n\n")
    images = _section(readme, "Image reasons, besides the tabular ones", "\n\n")
    sequences = _section(readme, "Extra reasons:", "\n\n")
    first_cells = [line.split("|")[1] for line in tabular.splitlines()[2:]]
    assert {code for cell in first_cells for code in _CODE.findall(cell)} == set(TABULAR_REASONS)
    assert set(_CODE.findall(images)) - {"train", "validation", "test"} == set(IMAGE_REASONS) | {
        "missing_file"}
    assert set(_CODE.findall(sequences)) == set(SEQUENCE_REASONS)


def _written_codes(tree: ast.AST) -> set[str]:
    """Reason codes a module writes: the first argument of a dead-letter error (or of a function
    making one, `row_error`), a `reason=`
    keyword, or the code of a (reason, message) pair a planner rejects an item with."""
    codes = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name.endswith(("Error", "_error")) and node.args and isinstance(node.args[0], ast.Constant):
                codes.add(node.args[0].value)
            codes |= {keyword.value.value for keyword in node.keywords if keyword.arg == "reason"
                      and isinstance(keyword.value, ast.Constant)}
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (isinstance(key, ast.Constant) and key.value == "reject"
                        and isinstance(value, ast.Tuple) and isinstance(value.elts[0], ast.Constant)):
                    codes.add(value.elts[0].value)
    return {code for code in codes if isinstance(code, str) and re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", code)}


def test_the_product_writes_only_registered_reasons():
    written = set()
    for path in sorted((REPO / "transforms").rglob("*.py")):
        written |= _written_codes(ast.parse(path.read_text(encoding="utf-8")))
    assert {"invalid_int", "unterminated_quote", "truncated_image", "group_too_large"} <= written
    assert written - set(REASONS) == set()
