"""Every test the docs name exists: a guarantee sentence names the test that proves it, and a
renamed or removed test must not leave the sentence pointing at nothing.

A reference is ``tests/<file>.py::<test>``, or ``::<test>`` after one, which names a test of the
file named last before it in the same document.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCUMENTS += sorted((ROOT / "runbooks").glob("*.md"))
REFERENCE = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?|(?<![\w/])::(test_\w+)")


def references(document: Path) -> list[tuple[int, str | None, str | None]]:
    """(line, file, test) for each reference in ``document``; ``test`` None for a bare file."""
    found: list[tuple[int, str | None, str | None]] = []
    current: str | None = None
    for number, line in enumerate(document.read_text().splitlines(), 1):
        for match in REFERENCE.finditer(line):
            if match.group(1):
                current, test = match.group(1), match.group(2)
            else:
                test = match.group(3)
            found.append((number, current, test))
    return found


def test_every_test_the_docs_name_exists() -> None:
    missing = []
    for document in DOCUMENTS:
        for number, file, test in references(document):
            where = f"{document.relative_to(ROOT)}:{number}"
            if file is None or not (ROOT / file).is_file():
                missing.append(f"{where}: {file or '(no file before it)'}::{test}")
            elif test and not re.search(rf"def {test}\b", (ROOT / file).read_text()):
                missing.append(f"{where}: {file}::{test}")
    assert missing == []


def test_a_bare_reference_names_a_test_of_the_file_named_before_it(tmp_path: Path) -> None:
    document = tmp_path / "doc.md"
    document.write_text(
        "proved by `tests/test_docs_references.py::test_every_test_the_docs_name_exists`,\n"
        "`::test_that_was_renamed`\n"
    )
    assert references(document) == [
        (1, "tests/test_docs_references.py", "test_every_test_the_docs_name_exists"),
        (2, "tests/test_docs_references.py", "test_that_was_renamed"),
    ]
