"""The pre-run estimate (`workbench.estimate`): its shares against enumerations, its counts
capped as the baselines cap their sets, its low end below what a run counts, and the forward
it times tiled as the scorers tile. (Its time bound is checked against measured runs by
`bench/real.py` and recorded in docs/speed.md: no timed assert here.)"""

from __future__ import annotations

import itertools
import math

import pytest

from tests.helpers import micro_cel
from workbench.estimate import (
    LIKELY,
    LIKELY_MIN_FORWARD_S,
    MEASURE_TOKENS,
    RunEstimate,
    _duration,
    measure_forward,
    stage_forwards,
)
from workbench.pass_cost import SE_MARGIN, random_share, single_share
from workbench.pipeline import prepare_run, run_prepared
from workbench.tasks.task import load_task


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    model, main, side = micro_cel(tmp_path_factory.mktemp("micro"))
    return model, load_task(main), load_task(side)


@pytest.mark.parametrize("layers,heads,size", [(3, 2, 1), (3, 2, 2), (4, 3, 3), (30, 9, 2)])
def test_random_share_is_the_mean_over_every_set(layers, heads, size):
    """The share of a forward a random set's pass runs, against the mean over every set of
    that size (each restarts at its first ablated layer and runs `(L - first) / L`), less
    the last block and the margin at the low end."""
    every = list(itertools.combinations(range(layers * heads), size))
    if len(every) > 50_000:  # SmolLM2's pairs: 36k sets, still enumerable; the rest sampled
        every = every[::7]
    shares = [(layers - min(f // heads for f in s)) / layers for s in every]
    mean = sum(shares) / len(shares)
    sd = math.sqrt(sum((x - mean) ** 2 for x in shares) / len(shares))
    low, high = random_share(layers, heads, size, 50)
    assert low == pytest.approx(max(0.0, mean - 1 / layers - SE_MARGIN * sd / math.sqrt(50)),
                                abs=2e-3)
    assert high == pytest.approx(min(1.0, mean + SE_MARGIN * sd / math.sqrt(50)), abs=2e-3)
    # single heads of every layer: the mean restart, exactly
    assert single_share(layers)[1] == pytest.approx(
        sum((layers - l) / layers for l in range(layers)) / layers)


def test_set_counts_are_capped_at_all_sets_of_a_size(micro):
    """`--n-random 1000000000` on a model of 8 heads draws every set of each size (8, 28,
    56), as `random_head_sets` does: the estimate counts those, not a billion."""
    model, task, side = micro
    n_heads = model.cfg.n_layers * model.cfg.n_heads
    huge = stage_forwards(prepare_run(model, task, others=[side], n_random=10**9, max_size=3,
                                      progress=False))
    every = sum(math.comb(n_heads, k) for k in (1, 2, 3))
    capped = stage_forwards(prepare_run(model, task, others=[side], n_random=every,
                                        max_size=3, progress=False))
    assert huge["confirm"] == capped["confirm"]
    assert huge["confirm"][1] < 10 * every


@pytest.mark.parametrize("strategy", ["exhaustive", "interaction"])
def test_the_low_end_is_below_what_the_run_counts(micro, strategy):
    """Screening's and the search's forward-equivalents as the run counts them lie in the
    estimate's range, for a strategy whose sets are certain and one whose are not."""
    model, task, side = micro
    run = prepare_run(model, task, others=[side], strategies=(strategy,), n_random=20,
                      n_boot=100, progress=False)
    forwards = stage_forwards(run)
    result = run_prepared(run)
    done, n = result.summary["forward_eq"], result.summary["n_examples"]
    main = run.select.task.name
    screened = sum(eq * n["select" if t == main else t] / n["select"]
                   for t, eq in done["screen"].items())
    assert forwards["screen"][0] - 1e-9 <= screened <= forwards["screen"][1] + 1e-9
    assert forwards["search"][0] - 1e-9 <= done["search"] <= forwards["search"][1] + 1e-9
    assert forwards["search"][0] > 0  # knockouts, or exhaustive's sets on the first slice


def test_the_forward_is_timed_tiled_as_the_scorers_tile(micro, monkeypatch):
    """`measure_forward` times the selection rows tiled as a CPU tiles masks (up to the
    token target), never more than `MEASURE_TOKENS`, and scales per token."""
    from workbench.compute import default_masks_per_pass

    model, task, _ = micro
    run = prepare_run(model, task, progress=False)
    shapes = []
    real_forward = type(model).forward

    def recording(self, tokens, *args, **kwargs):
        shapes.append(tuple(tokens.shape))
        return real_forward(self, tokens, *args, **kwargs)

    monkeypatch.setattr(type(model), "forward", recording)
    seconds = measure_forward(run)
    rows, width = run.select.tokens[:32].shape
    tiles = default_masks_per_pass(model, rows, width, 1 << 14)
    assert shapes == [(1, width), (tiles * rows, width), (tiles * rows, width)]
    assert tiles * rows * width <= MEASURE_TOKENS and tiles > 1 and seconds > 0


def test_a_bf16_search_is_timed_on_its_copy(micro, monkeypatch):
    """Under `search_dtype="bfloat16"` screening and the search run on the bfloat16 copy: the
    estimate times a forward on it too and scales those two stages' costs by its share of a
    float32 forward (a stand-in timing: half), the confirmation's not at all, and no count;
    the copy it times is the one screening then uses (built once)."""
    import torch

    import workbench.estimate as estimate

    model, task, side = micro
    runs = {dt: prepare_run(model, task, others=[side], search_dtype=dt, progress=False)
            for dt in ("float32", "bfloat16")}
    timed = []

    def timing(run, on=None):
        on = run.model if on is None else on
        timed.append(on.cfg.dtype)
        return 1.0 if on.cfg.dtype == torch.bfloat16 else 2.0

    monkeypatch.setattr(estimate, "measure_forward", timing)
    f32, bf16 = (estimate.estimate_run(runs[dt]) for dt in ("float32", "bfloat16"))
    assert timed == [torch.float32, torch.float32, torch.bfloat16]
    assert bf16.forwards == f32.forwards and bf16.seconds_per_forward == 2.0
    for stage in ("screen", "search"):
        assert bf16.costs[stage] == pytest.approx(tuple(c / 2 for c in f32.costs[stage]))
    assert bf16.costs["confirm"] == f32.costs["confirm"]
    assert runs["bfloat16"].searcher() is runs["bfloat16"].searcher_model
    assert runs["bfloat16"].searcher().cfg.dtype == torch.bfloat16
    # a resumed run whose screening and search are done times no copy
    timed.clear()
    estimate.estimate_run(runs["bfloat16"], ("screen", "search"))
    assert timed == [torch.float32]


def test_printed_times_round_down():
    """A bound printed stays one: 59.9 s is `~59 s`, 119 s `~1 min`, 2.99 h `~2.9 h`."""
    assert _duration(59.9) == "~59 s"
    assert _duration(119) == "~1 min"
    assert _duration(2.99 * 3600) == "~2.9 h"


def test_the_likely_cost_is_the_low_end_times_the_fitted_ratio():
    """`likely` is each stage's low end times `LIKELY`, at most its high end, in seconds; the
    line says it first and keeps the bounds; below `LIKELY_MIN_FORWARD_S` (a forward of
    Python overhead) or with a stage without a rule it says none."""
    costs = {"screen": (10.0, 100.0), "search": (30.0, 50.0), "confirm": (20.0, 500.0)}
    forwards = {"screen": (20.0, 200.0), "search": (30.0, 50.0), "confirm": (40.0, 900.0)}
    est = RunEstimate(forwards, costs, 3.0, 154)
    assert est.likely == pytest.approx({
        "screen": 10 * LIKELY["screen"] * 3.0,
        "search": min(30 * LIKELY["search"], 50.0) * 3.0,
        "confirm": 20 * LIKELY["confirm"] * 3.0})
    assert est.likely["search"] == pytest.approx(150.0)  # capped at the high end
    line = est.line()
    total = sum(est.likely.values())
    assert line.startswith(f"estimate: likely ~{total / 60:.0f} min (screen ")
    assert "; screen 20-200 (" in line and "confirm 40-900 (" in line
    short = RunEstimate(forwards, costs, LIKELY_MIN_FORWARD_S / 2, 154)
    assert short.likely is None and short.line().startswith("estimate: screen 20-200 (")
    unruled = RunEstimate({**forwards, "search": None}, {**costs, "search": None}, 3.0, 154)
    assert unruled.likely is None and "likely" not in unruled.line()


def test_the_likely_factors_are_fitted_as_a_geometric_mean_with_a_left_out_check():
    """`bench/estimate_fit.py`: per stage the geometric mean of the runs' ratios (2, 8 -> 4;
    1, 1 -> 1), and each run against the others' fit (2 / 8, 8 / 2); `predicted` caps a
    stage at its high end as `RunEstimate.likely` does."""
    from bench.estimate_fit import fit_factors, predicted

    factors, left_out = fit_factors([{"screen": 2.0, "search": 1.0, "confirm": 3.0},
                                     {"screen": 8.0, "search": 1.0, "confirm": 3.0}])
    assert factors == pytest.approx({"screen": 4.0, "search": 1.0, "confirm": 3.0})
    assert left_out == [pytest.approx({"screen": 0.25, "search": 1.0, "confirm": 1.0}),
                        pytest.approx({"screen": 4.0, "search": 1.0, "confirm": 1.0})]
    row = {"screen": {"low": 10.0, "high": 100.0}, "search": {"low": 5.0, "high": 4.0},
           "confirm": {"low": 1.0, "high": 50.0}}
    assert predicted(row, factors) == pytest.approx(40.0 + 4.0 + 3.0)


def test_stage_costs_are_the_estimates_plain_forwards(micro, monkeypatch):
    """`stage_costs` is what `estimate_run` multiplies by its forward (a stand-in of 2 s):
    the bench's refit (`bench/estimate_fit.py`) reads the costs the line prints."""
    import workbench.estimate as estimate

    model, task, side = micro
    run = prepare_run(model, task, others=[side], progress=False)
    monkeypatch.setattr(estimate, "measure_forward", lambda run, on=None: 2.0)
    est = estimate.estimate_run(run)
    costs = estimate.stage_costs(run)
    assert est.costs == costs and all(0 < c[0] <= c[1] for c in costs.values())
    for stage, (low, high) in costs.items():
        assert est.stage_seconds(stage) == pytest.approx((2 * low, 2 * high))


def _counting(model, monkeypatch) -> list[int]:
    """Patch `model`'s forward to record each call's real tokens (its attention mask's ones,
    else its rows x width)."""
    calls = []
    real_forward = type(model).forward

    def recording(self, tokens, *args, **kwargs):
        mask = kwargs.get("attention_mask")
        calls.append(int(mask.sum()) if mask is not None else tokens.numel())
        return real_forward(self, tokens, *args, **kwargs)

    monkeypatch.setattr(type(model), "forward", recording)
    return calls


@pytest.mark.parametrize("one_token", [False, True])
def test_the_choice_passes_are_counted_as_the_scorer_runs_them(attn_model, monkeypatch,
                                                               one_token):
    """`choice_forwards` and `choice_tokens` against the forwards and tokens the scorer
    really runs: masks scored through the choice metric, each one pass over the prompts per
    group of examples and, with a choice longer than one token, one over the choice rows;
    none with one-token choices."""
    from tests.metrics.test_choices import mc_task
    from workbench.metrics.choices import choice_metric
    from workbench.pass_cost import choice_forwards, choice_tokens
    from workbench.scoring.scorer import MaskScorer, masks_of
    from workbench.tasks.encoding import encode_task
    from workbench.tasks.task import Task

    task = mc_task(80)  # 40 selection examples, 2-5 choices: more than one group of rows
    if one_token:
        task = Task.from_records([{"id": e.id, "prompt": e.prompt, "gold": e.gold % 3,
                                   "choices": ["w1", "w7", "w9"], "split": e.split}
                                  for e in task.examples], name="mc1")
    batch = encode_task(attn_model, task, "select")
    scorer = MaskScorer(attn_model, batch, metric=choice_metric)
    scorer.score(masks_of(attn_model, [[]]))  # the clean run, before counting
    calls = _counting(attn_model, monkeypatch)
    scorer.score(masks_of(attn_model, [["L0H1"], ["L1H2", "L0H0"], ["L1H3"]]))
    prompt, tail = choice_tokens(batch)
    per_mask = choice_forwards(batch)
    groups = math.ceil(sum(len(c) for c in batch.choice_seqs) / 64)
    assert per_mask == (groups if one_token else 2 * groups) and groups >= 2
    assert len(calls) == 3 * per_mask
    assert sum(calls) == 3 * (prompt + tail)
    assert prompt == int(batch.lengths.sum())
    assert (tail == 0) is one_token
    assert tail == sum(len(c) - 1 for cs in batch.choice_seqs for c in cs)


def test_a_multiple_choice_run_is_costed_with_every_block_and_its_choice_pass(attn_model,
                                                                              tiny_task):
    """An exact screening of a multiple-choice task costs, per head, every block and its
    choice pass (`1 + choice_share`), not a restart at the head's layer; its counts are the
    run's (masks times rows over N) as for any task, and the printed line says so."""
    from tests.metrics.test_choices import mc_task
    from workbench.estimate import RunEstimate, stage_costs
    from workbench.pass_cost import choice_share, choice_tokens, plain_share
    from workbench.racing import first_slice

    run = prepare_run(attn_model, mc_task(80), method="exact", n_random=20, max_size=2,
                      progress=False)
    prompt, tail = choice_tokens(run.select)
    assert choice_share(run) == tail / prompt > 0
    n_heads, n_sel = 8, len(run.select)
    forwards, costs = stage_forwards(run), stage_costs(run)
    screened = n_heads * first_slice(n_sel) / n_sel
    assert forwards["screen"][0] == pytest.approx(screened)
    low, high = plain_share(2)
    assert costs["screen"][0] == pytest.approx(screened * low * (1 + tail / prompt))
    assert costs["screen"][1] == pytest.approx(n_heads * high * (1 + tail / prompt))
    line = RunEstimate(forwards, costs, 1.0, n_sel, choice_share(run)).line()
    assert f"its choice pass {tail / prompt:.0%} of its tokens more" in line
    assert choice_share(prepare_run(attn_model, tiny_task, progress=False)) is None


@pytest.fixture(scope="module")
def gen_batch(attn_model):
    """A generation task's selection split of 80 examples (two groups of decoded rows), whose
    rows write 1 to 4 tokens (`max_new_tokens` 4, stop `w2`, which the model writes at
    different steps)."""
    from tests.metrics.test_generation import gen_task
    from workbench.tasks.encoding import encode_task
    from workbench.tasks.task import Task

    records = [{"id": e.id, "prompt": e.prompt, "target": e.target, "split": e.split}
               for e in gen_task(attn_model, 160).examples]
    task = Task.from_records(records, name="gen", generation={
        "max_new_tokens": 4, "until": ["w2"], "extractor": {"regex": r"(w\d+)"}})
    return task, encode_task(attn_model, task, "select")


def test_the_generation_passes_are_counted_as_the_scorer_runs_them(attn_model, gen_batch,
                                                                   monkeypatch):
    """`generation_forwards` against the forwards the scorer really runs for three masks
    through `generation_metric`: one joint call (80 rows a mask, so three masks fill
    `JOINT_ROWS`), whose decode runs the masks' 240 rows together (per group of rows its
    longest generation, the lengths read from a separate decode under each mask), then the
    target's teacher-forced pass per mask; between every row ending at its first token and
    every row writing `max_new_tokens`, the two ends `generation_share` prices. One mask
    alone: its own decode."""
    from workbench.ablation import Ablation, mask_hooks
    from workbench.generation.decode import ROWS_PER_PASS, greedy_generate
    from workbench.metrics.generation import generation_metric, target_batch
    from workbench.pass_cost import choice_forwards, generation_forwards
    from workbench.scoring.custom import masks_per_call
    from workbench.scoring.scorer import MaskScorer, masks_of

    _, batch = gen_batch
    n = len(batch)
    settings = batch.task.generation
    masks = masks_of(attn_model, [["L0H1"], ["L1H2", "L0H0"], ["L1H3"]])
    new = []
    for i in range(masks.shape[0]):
        with attn_model.hooks(fwd_hooks=mask_hooks(attn_model, masks[i : i + 1], "zero")):
            gen = greedy_generate(attn_model, batch.prompts(), settings.max_new_tokens,
                                  settings.until)
        new.append([len(t) for t in gen.tokens])
    assert any(len(set(lengths)) > 1 for lengths in new)  # rows end at different steps
    scorer = MaskScorer(attn_model, batch, metric=generation_metric)
    scorer.score(masks_of(attn_model, [[]]))  # the clean run, before counting
    calls = _counting(attn_model, monkeypatch)
    scorer.score(masks)
    assert masks_per_call(generation_metric, batch, Ablation()) == 3
    groups = math.ceil(3 * n / ROWS_PER_PASS)
    teacher = choice_forwards(target_batch(batch))
    assert groups == 4 and teacher >= 2
    assert len(calls) == generation_forwards(batch, new)
    least = generation_forwards(batch, [[1] * n] * 3)
    most = generation_forwards(batch, [[settings.max_new_tokens] * n] * 3)
    assert least == groups + 3 * teacher
    assert most == least + groups * (settings.max_new_tokens - 1)
    assert least <= generation_forwards(batch, new) <= most
    scorer = MaskScorer(attn_model, batch, metric=generation_metric)
    scorer.clean()
    calls.clear()
    scorer.score(masks[1:2])
    assert len(calls) == generation_forwards(batch, new[1:2])
    assert generation_forwards(batch, [[1] * n]) == math.ceil(n / ROWS_PER_PASS) + teacher


def test_a_generation_run_is_costed_as_it_decodes(attn_model, gen_batch, monkeypatch):
    """An exact screening of a generation task costs, per head, the decode and the
    teacher-forced pass from every block (`2 + t` at the least, `max_new_tokens + 1 + t` at
    the most, `t` the target's tokens past the first over the prompts'); attribution the
    teacher-forced pass alone; the likely time prices every pass at the clean scoring timed
    by `measure_decode` (the clean decode of 16 examples as four masks' rows, one group, and
    one teacher-forced pass: its forwards counted), and the line says so."""
    import workbench.estimate as estimate
    from workbench.generation.decode import greedy_generate
    from workbench.metrics.generation import target_batch
    from workbench.pass_cost import (
        choice_forwards,
        choice_tokens,
        generation_forwards,
        plain_share,
    )
    from workbench.racing import first_slice

    task, batch = gen_batch
    prompt, tail = choice_tokens(target_batch(batch))
    t = tail / prompt
    low, high = plain_share(2)
    max_new = task.generation.max_new_tokens
    for method, share in (("exact", (low * (2 + t), max_new + 1 + t)),
                          ("attribution", (low * (1 + t), high * (1 + t)))):
        run = prepare_run(attn_model, task, method=method, n_random=20, max_size=2,
                          check_attribution=False, progress=False)
        forwards, costs = stage_forwards(run), estimate.stage_costs(run)
        assert costs["screen"][0] == pytest.approx(forwards["screen"][0] * share[0])
        assert costs["screen"][1] == pytest.approx(forwards["screen"][1] * share[1])
    run = prepare_run(attn_model, task, method="exact", n_random=20, max_size=2,
                      progress=False)
    monkeypatch.setattr(estimate, "measure_forward", lambda run, on=None: 2.0)
    est = estimate.estimate_run(run)
    d = est.decode
    rows = run.select.rows(slice(0, d.rows))
    clean = greedy_generate(attn_model, rows.prompts(), max_new, task.generation.until)
    assert d.rows == 16 and d.share > 0 and d.span == (low * (2 + t), max_new + 1 + t)
    lengths = [len(x) for x in clean.tokens]
    teacher = choice_forwards(target_batch(rows))
    assert d.copies == 4
    assert d.forwards == generation_forwards(rows, [lengths] * 4) - 3 * teacher
    assert d.new_tokens == pytest.approx(sum(lengths) / len(lengths))
    n_heads, n_sel = 8, len(run.select)
    assert est.typical["screen"][0] == pytest.approx(
        n_heads * first_slice(n_sel) / n_sel * d.share)
    assert est.likely["screen"] == pytest.approx(
        2.0 * min(est.typical["screen"][0] * LIKELY["screen"], est.costs["screen"][1]))
    line = est.line()
    assert "a masked pass decodes" in line and "restarts at its layer" not in line
    assert f"writing {max_new} tokens" in line
