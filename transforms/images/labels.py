"""The rules of image labels, for class-folder trees and manifests alike: which texts can be
labels, the order that gives each its index, and reading a labels.txt.

A label map is written as `labels.txt`, one label per line, line number = index, and read
back by TFDS (`ClassLabel(names_file=...)`, which strips each line) and by `--labels-file`.
So a label holding a line break, or beginning or ending with white space, or that is not
text (a folder name of bytes invalid in UTF-8) cannot round-trip: every index after it
would shift. Such a label is refused (`label_problem`): its images are dead letters
(`invalid_label`), never part of the map. Beam-free.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = ["check_label_list", "label_problem", "parse_labels_text", "sorted_labels"]

# What str.splitlines() splits on: any of these inside a label breaks labels.txt.
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
_INTEGER = re.compile(r"-?\d+")


def label_problem(label: str) -> str | None:
    """Why `label` cannot be a label (a dead letter's message), or None when it can."""
    if any(ch in _LINE_BREAKS for ch in label):
        return f"label {label!r} holds a line break, which labels.txt cannot hold"
    if label != label.strip():
        return (f"label {label!r} begins or ends with white space, which readers of "
                f"labels.txt strip")
    try:
        label.encode("utf-8")
    except UnicodeEncodeError:  # a folder name's invalid bytes, as surrogate escapes
        shown = label.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return f"label {shown} is not valid UTF-8 text"
    return None


def sorted_labels(labels: Iterable[str]) -> tuple[str, ...]:
    """The label map of the distinct `labels`: sorted, in numeric order when every label is
    an integer (ties such as "1" and "01" by their text, so the order never depends on the
    order labels were met in)."""
    labels = set(labels)
    if labels and all(_INTEGER.fullmatch(label) for label in labels):
        return tuple(sorted(labels, key=lambda label: (int(label), label)))
    return tuple(sorted(labels))


def parse_labels_text(text: str) -> tuple[str, ...]:
    """The labels of a labels.txt, in order: one per non-blank line, stripped as TFDS reads
    them, a leading byte-order mark dropped; checked as `check_label_list` checks them."""
    labels = tuple(line.strip() for line in text.removeprefix("\ufeff").splitlines())
    return check_label_list([label for label in labels if label])


def check_label_list(labels: Sequence[str]) -> tuple[str, ...]:
    """`labels` as a label map; raises ValueError when empty, holding duplicates or a text
    that cannot be a label (`label_problem`)."""
    labels = tuple(str(label) for label in labels)
    if not labels:
        raise ValueError("the label list is empty")
    if len(set(labels)) != len(labels):
        raise ValueError("the label list has duplicates")
    problems = [problem for problem in map(label_problem, labels) if problem]
    if problems:
        raise ValueError(f"the label list: {problems[0]}")
    return labels
