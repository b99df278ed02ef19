"""What the tests of the shipped word-fact task files share (`tasks/benchmarks/`).

`FactFiles` reads one generator's committed files with plain `json` (no task loader), parses
questions back from their prompts, and holds the checks every such file must pass whatever its
kind: groups never cross splits, few-shot examples are true pairs of the question's own split,
and the generator reproduces the files byte for byte (and another seed does not).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path

from tests.helpers import load_script, read_task_file

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
BENCH_DIR = TASKS_DIR / "benchmarks"
SPLITS = ("select", "heldout")


class FactFiles:
    """The files one generator script writes into `tasks/benchmarks/`.

    Args:
        script: the generator's file name in `tasks/` (e.g. "generate_mc_tasks.py").
        names: the task names it writes (each `<name>.jsonl`).
        prefix: the prefix every file it ships begins with (e.g. "mc_").
    """

    def __init__(self, script: str, names: tuple[str, ...], prefix: str):
        self.script, self.names, self.prefix = script, names, prefix

    @functools.cached_property
    def generator(self):
        return load_script(TASKS_DIR / self.script)

    @functools.cache  # noqa: B019  (one instance per test module, kept for the session)
    def load(self, name: str) -> tuple[dict, list[dict]]:
        return read_task_file(BENCH_DIR / f"{name}.jsonl")

    @functools.cache  # noqa: B019
    def pairs(self, subject: str) -> tuple[tuple[str, str], ...]:
        return tuple(self.generator.read_pairs(subject))

    def question_input(self, subject: str, question: str) -> str:
        """The input x of a question written from its subject's template."""
        template = self.generator.SUBJECTS[subject][1]
        before, after = template.split("{x}")
        match = re.fullmatch(re.escape(before) + "(.+)" + re.escape(after), question)
        assert match, f"question {question!r} does not follow {template!r}"
        return match[1]

    def parse_open(self, subject: str, blocks: list[str]) -> tuple[list[tuple[str, str]], str]:
        """(few-shot (input, answer) pairs, the question's input) of a prompt's blocks in the
        "Question: ...\\nAnswer: ..." form, the last one unanswered."""
        demos = []
        for block in blocks[:-1]:
            q, a = re.fullmatch(r"Question: (.+)\nAnswer: (.+)", block).groups()
            demos.append((self.question_input(subject, q), a))
        question = re.fullmatch(r"Question: (.+)\nAnswer:", blocks[-1])[1]
        return demos, self.question_input(subject, question)

    def check_demos(self, name: str, examples: list[dict], e: dict, demos, x: str) -> None:
        """Every few-shot pair of example `e` (question input `x`) is a true pair of the list,
        not the question, drawn from the question's own split; no fact of the other split is
        ever shown (held-out facts never while selecting)."""
        subject = e["meta"]["subject"]
        split_of = self.generator.pair_splits(0, name, subject)
        other = "heldout" if e["split"] == "select" else "select"
        shown = {e2["group"] for e2 in examples if e2["split"] == other}
        for dx, dy in demos:
            assert (dx, dy) in set(self.pairs(subject)) and dx != x, e["id"]
            assert split_of[dx] == e["split"], (e["id"], dx)
            assert f"{subject}:{dx}" not in shown, (e["id"], dx)

    @staticmethod
    def check_groups(examples: list[dict]) -> Counter:
        """Groups never cross splits, one question per fact, the splits are halves; returns
        the count of questions per (subject, split)."""
        split_of: dict[str, str] = {}
        for e in examples:
            assert split_of.setdefault(e["group"], e["split"]) == e["split"], e["group"]
        assert len(split_of) == len(examples), "one question per fact"
        counts = Counter(e["split"] for e in examples)
        assert counts["select"] == counts["heldout"]
        return Counter((e["meta"]["subject"], e["split"]) for e in examples)

    def check_reproduced(self, tmp_path: Path) -> None:
        """The generator at the files' seed writes the shipped files byte for byte, and they
        are all the files of its prefix; another seed writes other files."""
        seeds = {self.load(name)[0]["task"]["source"].split()[-1] for name in self.names}
        assert seeds == {"0"}, f"task files come from other seeds than the tests read: {seeds}"
        written = self.generator.write_all(tmp_path / "seed0", seed=0)
        assert sorted(p.name for p in written) == sorted(f"{n}.jsonl" for n in self.names)
        for path in written:
            assert path.read_bytes() == (BENCH_DIR / path.name).read_bytes(), path.name
        shipped = sorted(p.name for p in BENCH_DIR.iterdir() if p.name.startswith(self.prefix))
        assert shipped == sorted(p.name for p in written)
        for path in self.generator.write_all(tmp_path / "seed1", seed=1):
            assert path.read_bytes() != (BENCH_DIR / path.name).read_bytes(), path.name
