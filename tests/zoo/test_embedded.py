"""The embedded model and its tasks.

The generators obey their rules on every example, the task files are exactly what
`python -m workbench.zoo.make_tasks` writes, and the shipped checkpoint's numbers are what its
meta says: the per-task held-out baselines and the held-out gain of the shipped best head set
are facts about a fixed file, so they are checked exactly. The claims the README makes on
them (gain of at least 5 points, the conflicting task harmed, the ordinary tasks unmoved) are
checked too, so replacing the checkpoint by one that lacks them fails here.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from workbench.zoo import DEFAULT_TASK, EMBEDDED_PATH, SIDE_TASKS
from workbench.zoo import language as lang
from workbench.zoo.make_tasks import TASKS_DIR, task_records

TASKS = list(lang.GENERATORS)
PAIR = ("embedded_copy", "embedded_map")


def _read_task_file(task: str) -> list[dict]:
    return [json.loads(line) for line in (TASKS_DIR / f"{task}.jsonl").read_text().splitlines()]


def test_task_names_and_defaults():
    assert DEFAULT_TASK == "embedded_map"
    assert sorted([DEFAULT_TASK, *SIDE_TASKS]) == sorted(TASKS)
    assert len(lang.VOCAB) == len(set(lang.VOCAB))
    assert all(lang.WORD_MAP[w] != w for w in lang.CONTENT_WORDS)


@pytest.mark.parametrize("task", TASKS)
def test_generators_are_deterministic_by_seed(task):
    a = lang.generate(task, 64, np.random.default_rng(3))
    b = lang.generate(task, 64, np.random.default_rng(3))
    c = lang.generate(task, 64, np.random.default_rng(4))
    for field in ("tokens", "lengths", "answer", "wrong", "roles", "group"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert not np.array_equal(a.tokens, c.tokens)


@pytest.mark.parametrize("task", TASKS)
def test_every_generated_example_follows_its_rule(task):
    batch = lang.generate(task, 500, np.random.default_rng(0))
    for i in range(len(batch)):
        words = lang.prompt_words(batch, i)
        roles = list(batch.roles[i, : batch.lengths[i]])
        assert len(roles) == len(words) and all(roles)
        assert lang.VOCAB[batch.answer[i]] == lang.RULES[task](words)
        if task in PAIR:
            _check_pair_example(task, words, roles, lang.VOCAB[batch.wrong[i]], batch.group[i])


def _check_pair_example(task: str, words: list[str], roles: list[str], wrong: str, group: str):
    other = PAIR[1 - PAIR.index(task)]
    answer = lang.RULES[task](words)
    assert wrong == lang.RULES[other](words) != answer  # the two rules always disagree
    marker = {"embedded_copy": "copy", "embedded_map": "map"}[task]
    assert words[0] == (marker if group == "marked" else lang.NEUTRAL)
    source = "answer_source" if task == "embedded_copy" else "wrong_source"
    assert words[roles.index(source)] == lang.copy_answer(words)
    assert words[roles.index("cue")] == words[-1] and roles[-1] == "query"
    assert len(set(words[1:-2])) == lang.N_CONTEXT


def test_copy_and_map_prompts_come_from_one_distribution():
    """Only the marker differs: with the marker blanked, the two tasks' prompts are the same."""
    copy = lang.generate("embedded_copy", 200, np.random.default_rng(7))
    mapped = lang.generate("embedded_map", 200, np.random.default_rng(7))
    assert np.array_equal(copy.tokens[:, 1:], mapped.tokens[:, 1:])
    assert np.array_equal(copy.group, mapped.group)
    assert np.array_equal(copy.answer, mapped.wrong) and np.array_equal(copy.wrong, mapped.answer)


@pytest.mark.parametrize(
    ("stage", "copy_marked", "copy_unmarked"), [("PRETRAIN", 0.6, 0.6), ("FINETUNE", 0.5, 0.95)]
)
def test_training_stages_mix_the_pair_as_documented(stage, copy_marked, copy_unmarked):
    """Counted on 300 training batches: the share of copy among marked and unmarked prompts."""
    from workbench.zoo import train

    rng = np.random.default_rng(0)
    batch = lang.concat([train.mixed_batch(128, rng, getattr(train, stage)) for _ in range(300)])
    marker = batch.tokens[:, 0]
    copy_id, map_id, neutral = (lang.VOCAB.index(w) for w in ("copy", "map", lang.NEUTRAL))
    is_pair = np.isin(marker, [copy_id, map_id, neutral])
    # A copy/map row is a copy prompt when its answer is the copy rule's.
    copies = np.array([
        bool(pair) and lang.VOCAB[batch.answer[i]] == lang.copy_answer(lang.prompt_words(batch, i))
        for i, pair in enumerate(is_pair)
    ])
    unmarked = marker == neutral
    marked = is_pair & ~unmarked
    assert copies[marked].mean() == pytest.approx(copy_marked, abs=0.02)
    assert copies[unmarked].mean() == pytest.approx(copy_unmarked, abs=0.02)
    assert is_pair.mean() == pytest.approx(train.PAIR_SHARE, abs=0.01)


@pytest.mark.parametrize("task", TASKS)
def test_task_file_is_what_make_tasks_writes(task):
    assert _read_task_file(task) == json.loads(json.dumps(task_records(task)))


@pytest.mark.parametrize("task", TASKS)
def test_task_file_examples(task):
    header, *examples = _read_task_file(task)
    assert header["task"]["name"] == task and header["task"]["prepend_bos"] is True
    assert len(examples) >= 500
    splits = {"select": set(), "heldout": set()}
    for ex in examples:
        words = ex["prompt"].split()
        assert len(ex["roles"]) == len(words)
        assert ex["answer"] == lang.RULES[task](words)
        splits[ex["split"]].add(ex["prompt"])
        if task in PAIR:
            _check_pair_example(task, words, ex["roles"], ex["wrong"][0], ex["group"])
    assert len(splits["select"]) == len(splits["heldout"]) >= 250
    assert not splits["select"] & splits["heldout"]
    assert len(splits["select"]) + len(splits["heldout"]) == len(examples)  # no repeats


@pytest.fixture(scope="module")
def embedded():
    from workbench import load_model

    return load_model("embedded", device="cpu")


def _heldout(model, task: str, heads=None):
    from workbench import evaluate, load_task

    return evaluate(model, load_task(task), heads=heads, split="heldout")


def test_checkpoint_is_small_and_documented(embedded):
    size = sum(p.stat().st_size for p in EMBEDDED_PATH.iterdir())
    assert size <= 5 * 2**20
    meta = embedded.workbench_meta
    assert {"seed", "command", "train_config", "heldout", "cel"} <= set(meta)
    assert embedded.word_tokenizer.vocab == lang.VOCAB


@pytest.mark.parametrize("task", TASKS)
def test_heldout_baselines_match_meta(embedded, task):
    scores = _heldout(embedded, task)
    stored = embedded.workbench_meta["heldout"][task]
    assert (len(scores), int(scores["correct"].sum())) == (stored["n"], stored["correct"])
    assert float(scores["logprob"].mean()) == pytest.approx(stored["logprob"], abs=1e-4)


def test_shipped_best_set_gain(embedded):
    meta = embedded.workbench_meta
    best = meta["cel"]["best"]
    assert 1 <= len(best) <= 3
    after = {t: int(_heldout(embedded, t, best)["correct"].sum()) for t in TASKS}
    assert after == {t: meta["cel"]["heldout_ablated"][t]["correct"] for t in TASKS}
    n = {t: meta["heldout"][t]["n"] for t in TASKS}
    gain = {t: (after[t] - meta["heldout"][t]["correct"]) / n[t] for t in TASKS}
    assert gain[DEFAULT_TASK] >= 0.05
    assert gain["embedded_copy"] < -0.05  # the conflicting task pays for it
    for task in ("embedded_add", "embedded_sort"):
        assert abs(gain[task]) < 0.02, task


def test_shipped_best_sets_against_every_set_of_their_size(embedded):
    """Every head set of each size (16, 120, 560) scored on the held-out split: the recorded
    gains and exact-baseline shares reproduce, the shipped best set beats every other set of
    its size, and it clears the 99th percentile of the recorded random baseline."""
    from workbench import encode_task, load_task
    from workbench.heads import all_heads, parse_head
    from workbench.scoring.scorer import MaskScorer, masks_of

    cel = embedded.workbench_meta["cel"]
    scorer = MaskScorer(embedded, encode_task(embedded, load_task(DEFAULT_TASK), "heldout"))
    heads = list(all_heads(embedded))
    clean = scorer.clean()["accuracy"].float().mean()
    for entry in cel["sets"]:
        sets = [list(c) for c in itertools.combinations(heads, len(entry["heads"]))]
        gains = scorer.score(masks_of(embedded, sets))["accuracy"].float().mean(-1) - clean
        found = gains[sets.index([parse_head(h) for h in entry["heads"]])]
        assert float(found) == pytest.approx(entry["heldout_gain"], abs=1e-6)
        share = float((gains >= found - 1e-9).float().mean())
        if entry["n_random"] == len(sets):  # the recorded baseline was every set of the size
            assert share == pytest.approx(entry["random_share_ge"], abs=1e-9)
        if entry["heads"] == cel["best"]:
            assert share == pytest.approx(1 / len(sets))  # no other set does as well
            assert entry["percentile"] > 99 and entry["percentile_logprob"] > 99


def test_train_config_rejects_a_stage_switch_outside_the_run():
    from workbench import WorkbenchError
    from workbench.zoo.train import TrainConfig

    assert TrainConfig(steps=100, finetune_from=100).finetune_from == 100  # stage 2 empty: fine
    with pytest.raises(WorkbenchError, match=r"finetune_from must be in \[0, steps=100\]"):
        TrainConfig(steps=100, finetune_from=2500)
