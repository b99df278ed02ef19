"""Every cross-reference of the README, docs/, tasks/README.md and the notebooks resolves:
relative Markdown links (with their `#section` anchors, by GitHub's heading slugs), the
repository paths the prose names (`docs/x.md`, `workbench/x.py`, `bench/x.py`, ...; a name in
a module, `tests/helpers.assert_close`, must be defined there) and sections named after a
file (`tasks/README.md` *Rules*)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP = ("bench", "docs", "notebooks", "scripts", "tasks", "tests", "workbench")
# a path the prose names: a top-level folder, then path characters, ending in a file or "/"
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./<>*{}-]*[\w/*>}])")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# a section named after a file in prose: `tasks/README.md` *Rules*
SECTION = re.compile(r"`([\w/.-]+\.md)`\)? \*([^*]+)\*")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _documents() -> dict[Path, tuple[str, str]]:
    """Each document's `(Markdown, code)`: Markdown files as written (no code), notebooks'
    Markdown cells and code cells, each joined (code is searched for paths, not links)."""
    docs = {p: (p.read_text(encoding="utf-8"), "")
            for p in [ROOT / "README.md", ROOT / "tasks" / "README.md",
                      ROOT / "notebooks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
            if p.is_file()}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        docs[nb] = tuple("\n\n".join("".join(c["source"]) for c in cells
                                       if c["cell_type"] == kind) for kind in ("markdown", "code"))
    return docs


def _exists(name: str) -> bool:
    """A path in the repository, or a Python name in a module (`tests/helpers.assert_close`)."""
    if (ROOT / name).exists():
        return True
    module, _, attr = name.rpartition(".")
    source = ROOT / f"{module}.py"
    return bool(attr) and source.is_file() and re.search(
        rf"^(def|class) {re.escape(attr)}\b|^{re.escape(attr)}\s*[:=]", source.read_text(),
        re.M) is not None


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to
    hyphens (backticks and emphasis are markup, not text)."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings (repeats get -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        out.add(s if n == 0 else f"{s}-{n}")
        seen[s] = n + 1
    return out


def _problems(doc: Path, text: str, docs: dict[Path, tuple[str, str]], code: str = "") \
        -> list[str]:
    where = doc.relative_to(ROOT)
    found = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            found.append(f"{where}: link {target!r}: no such file")
        elif anchor and path.suffix == ".md":
            text_of = docs[path][0] if path in docs else path.read_text(encoding="utf-8")
            if anchor not in anchors(text_of):
                found.append(f"{where}: link {target!r}: no heading with that anchor")
    for file, section in SECTION.findall(text):
        path = ROOT / file
        if path.is_file() and slug(section) not in anchors(path.read_text(encoding="utf-8")):
            found.append(f"{where}: names section {section!r} of {file}, which has none")
    for name in sorted(set(PATH.findall(text + "\n" + code))):
        if any(c in name for c in "<>*{}") or "..." in name:
            continue  # a pattern, not a path
        if not _exists(name):
            found.append(f"{where}: names {name!r}, which does not exist")
    return found


def test_slugs_follow_github():
    """The anchor rule the link check relies on, on headings of the kinds the docs use."""
    assert slug("CEL: the main job") == "cel-the-main-job"
    assert slug("The `workbench` command (`cli.py`)") == "the-workbench-command-clipy"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_a_broken_reference_is_found(tmp_path):
    """The check could fail: a missing file, a missing anchor and a named path that is not
    there are each reported."""
    doc = ROOT / "docs" / "x.md"
    text = ("[a](missing.md) [b](../README.md#no-such-section) see `workbench/nothing.py` "
            "and `tasks/<name>.jsonl`, `tasks/embedded_*.jsonl`, `tests/helpers.assert_close` "
            "and [ok](main-job.md#cel-the-main-job), `tasks/README.md` *Rules* and "
            "`tasks/README.md` *Gone*")
    found = _problems(doc, text, {}, code='load_task("bench/gone.py")')
    assert len(found) == 5, found
    assert any("'Gone'" in f for f in found)
    assert any("bench/gone.py" in f for f in found)
    assert any("missing.md" in f for f in found)
    assert any("no-such-section" in f for f in found)
    assert any("workbench/nothing.py" in f for f in found)


@pytest.mark.parametrize("doc", sorted(p.relative_to(ROOT).as_posix() for p in _documents()))
def test_every_cross_reference_resolves(doc):
    docs = _documents()
    path = ROOT / doc
    assert _problems(path, *docs[path][:1], docs, docs[path][1]) == []
