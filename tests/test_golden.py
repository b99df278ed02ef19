"""Every golden results folder (`tests/golden.py`) is reproduced: to the byte on the CPU that
froze them, with the same decisions and numbers within float32 noise on another; and that
other-CPU comparison passes noise of the measured size and fails a real change."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.golden import (
    CASES,
    EPS32,
    GOLDEN_DIR,
    MAIN_JOB,
    MEASURED_ULPS,
    SIGNATURE_FILE,
    TABLES,
    column_kind,
    column_scale,
    config_problems,
    cpu_signature,
    folder_problems,
    read_table,
    report_problems,
    run_case,
    run_scale,
    table_problems,
)

SAME_CPU = json.loads((GOLDEN_DIR / SIGNATURE_FILE).read_text()) == cpu_signature()
ALL_CASES = [MAIN_JOB, *CASES]


@pytest.mark.parametrize("case", ALL_CASES)
def test_golden_folder_is_reproduced(case, tmp_path, capsys):
    out = run_case(case, tmp_path / case)
    if case == MAIN_JOB:  # what the command printed is what the README shows of it
        from tests.test_readme import command_output

        printed = capsys.readouterr().out
        assert printed.endswith(command_output(out, out)), printed[-3000:]
        if SAME_CPU:  # less the line of what this run cost, which the frozen copy predates
            lines = printed.splitlines(keepends=True)
            rest = "".join(x for x in lines if not x.startswith("cost: "))
            assert len(lines) - rest.count("\n") == 1
            assert rest.endswith(command_output(GOLDEN_DIR / case, out)), printed[-3000:]
    problems = folder_problems(out, case, same_cpu=SAME_CPU)
    assert not problems, f"{case} differs from its frozen copy: {problems[:10]}"
    # the other CPU's comparison on this CPU too, so that it runs wherever the tests do
    problems = folder_problems(out, case, same_cpu=False)
    assert not problems, f"{case} fails the other-CPU comparison: {problems[:10]}"


# ---- the other-CPU comparison on the frozen files, changed by hand ----------------------


def _frozen(case: str, name: str) -> str:
    return (GOLDEN_DIR / case / name).read_text()


def _run(case: str) -> float:
    return run_scale(json.loads(_frozen(case, "config.json")))


def _csv(frame) -> str:
    return frame.to_csv(index=False)


def _noisy(text: str, run: float, ulps: float, seed: int = 0) -> str:
    """`text` (a table's CSV) with every number that is not a decision moved up or down at
    random by `ulps` float32 ulps of the comparison's scale: another CPU's noise."""
    rng = np.random.default_rng(seed)
    frame = read_table(text)
    for col in frame.columns:
        if column_kind(col, frame[col]) != "decision":
            scale = max(column_scale(frame[col]), run)
            signs = rng.choice([-1.0, 1.0], size=len(frame))
            frame[col] = frame[col] + signs * ulps * EPS32 * scale
    return _csv(frame)


def _other(got: str, want: str, run: float) -> list[str]:
    return table_problems(got, want, same_cpu=False, run=run)


@pytest.mark.parametrize("case", ALL_CASES)
def test_noise_of_the_measured_size_passes_on_another_cpu_only(case):
    run = _run(case)
    for table in TABLES:
        if not (GOLDEN_DIR / case / table).exists():  # frontier.csv: guarded cases only
            continue
        want = _frozen(case, table)
        assert not _other(want, want, run), table
        noisy = _noisy(want, run, MEASURED_ULPS)
        assert noisy != want
        assert not _other(noisy, want, run), f"{case}/{table}: {_other(noisy, want, run)[:3]}"
        # the freezing CPU's comparison is byte for byte
        assert table_problems(noisy, want, same_cpu=True, run=run)


def _changed(case: str, table: str, col: str, change, row=None) -> tuple[str, str, float]:
    """The frozen `table` of `case` with `change` applied to column `col` at `row` (by
    default the row of its largest |value|); the changed text, the frozen text, run scale."""
    want = _frozen(case, table)
    frame = read_table(want)
    if row is None:
        row = int(np.nanargmax(np.abs(frame[col].to_numpy(float))))
    frame[col] = frame[col].astype(object)
    frame.loc[row, col] = change(frame.loc[row, col])
    return _csv(frame), want, _run(case)


@pytest.mark.parametrize("case, table, col, change", [
    # 1e-4 relative on one effect, one interval end, one tidy value of the embedded job
    (MAIN_JOB, "heads.csv", "d_logit_diff", lambda v: v * (1 + 1e-4)),
    (MAIN_JOB, "confirmation.csv", "d_logprob", lambda v: v * (1 - 1e-4)),
    (MAIN_JOB, "side_effects.csv", "d_prob_diff_lo", lambda v: v * (1 + 1e-4)),
    (MAIN_JOB, "combos.csv", "d_logprob", lambda v: v * (1 + 1e-4)),
    (MAIN_JOB, "tidy.csv", "value", lambda v: v * (1 + 1e-4)),
    (MAIN_JOB, "tradeoff.csv", "side_d_hi", lambda v: v * (1 + 1e-4)),
    # one example's worth of an accuracy (600 held-out examples; the tiny model's 24)
    (MAIN_JOB, "confirmation.csv", "d_accuracy", lambda v: v + 1 / 600),
    ("tiny_zero_exact", "confirmation.csv", "d_accuracy", lambda v: v - 1 / 24),
    (MAIN_JOB, "heads.csv", "d_accuracy_embedded_copy", lambda v: v + 1 / 600),
    # one count of a p-value (10000 sign flips), one tie of a percentile (200 random sets)
    (MAIN_JOB, "confirmation.csv", "p_value", lambda v: v + 1 / 10001),
    (MAIN_JOB, "confirmation.csv", "percentile", lambda v: v - 100 / 400),
    # the tiny model's largest effects, 1e-3 relative (its numbers are ~1e-2: known to
    # ~1e-7, its float32 sums being of size ~3.6)
    ("tiny_mean_exact", "heads.csv", "d_logit_diff", lambda v: v * (1 + 1e-3)),
    ("tiny_zero_attribution", "side_effects.csv", "d_logprob", lambda v: v * (1 - 1e-3)),
])
def test_a_real_change_of_a_number_fails(case, table, col, change):
    got, want, run = _changed(case, table, col, change)
    problems = _other(got, want, run)
    assert problems and all(p.startswith(f"{col} row") for p in problems), problems
    # and it still fails under noise everywhere else
    assert _other(_noisy(got, run, MEASURED_ULPS), want, run)


@pytest.mark.parametrize("case, table, col, row, change", [
    (MAIN_JOB, "heads.csv", "candidate", 0, lambda v: not v),
    (MAIN_JOB, "confirmation.csv", "best", 0, lambda v: not v),
    (MAIN_JOB, "confirmation.csv", "gamed", 2, lambda v: not v),
    (MAIN_JOB, "confirmation.csv", "heads", 2, lambda v: v.replace("L1H6", "L1H7")),
    (MAIN_JOB, "heads.csv", "head_name", 3, lambda v: "L1H7"),
    (MAIN_JOB, "combos.csv", "heads", 0, lambda v: v.replace("L1H2", "L1H3")),
    (MAIN_JOB, "side_effects.csv", "task", 0, lambda v: "embedded_sort"),
    (MAIN_JOB, "confirmation.csv", "d_accuracy_n", 1, lambda v: v - 1),
    (MAIN_JOB, "heads.csv", "d_logprob_n_embedded_add", 0, lambda v: v + 1),
    (MAIN_JOB, "confirmation.csv", "n_random", 0, lambda v: v + 50),
    (MAIN_JOB, "heads.csv", "candidate_rank", 1, lambda v: v + 1),
    (MAIN_JOB, "tidy.csv", "n", 0, lambda v: v - 1),
    (MAIN_JOB, "tradeoff.csv", "origin", 0, lambda v: "random"),
    ("tiny_mean_exact", "combos.csv", "size", 0, lambda v: v + 1),
    # a number where there was none, and none where there was one
    (MAIN_JOB, "heads.csv", "d_logit_diff_embedded_add", 0, lambda v: 0.0),
    (MAIN_JOB, "confirmation.csv", "random_pct_hi", 2, lambda v: math.nan),
])
def test_a_changed_decision_fails(case, table, col, row, change):
    got, want, run = _changed(case, table, col, change, row=row)
    assert got != want
    problems = _other(got, want, run)
    assert problems and all(p.startswith(f"{col} row") for p in problems), problems
    # however small the noise elsewhere
    assert _other(_noisy(got, run, MEASURED_ULPS), want, run)


def test_a_missing_row_or_column_fails():
    want = _frozen(MAIN_JOB, "confirmation.csv")
    frame = read_table(want)
    run = _run(MAIN_JOB)
    assert _other(_csv(frame.iloc[:-1]), want, run)
    assert _other(_csv(frame.drop(columns=["gamed"])), want, run)
    assert _other(_csv(frame[list(frame.columns[::-1])]), want, run)


def _report(case: str, old: str, new: str, count: int = 1) -> tuple[str, str]:
    want = _frozen(case, "report.md")
    assert want.count(old) >= count, old
    return want.replace(old, new, count), want


@pytest.mark.parametrize("old, new, passes", [
    # a rounding flip in the last printed digit, at 4 significant digits and at 2 decimals
    ("| L0H4 | 0.2633 |", "| L0H4 | 0.2634 |", True),
    ("+2.53 [+2.19, +2.91]", "+2.53 [+2.19, +2.92]", True),
    ("| 9.999e-05 | 0.0008999 |", "| 9.999e-05 | 0.0009 |", True),
    # a real change of a number, an integer, a word, a head, a flag
    ("| L0H4 | 0.2633 |", "| L0H4 | 0.2643 |", False),
    ("+2.53 [+2.19, +2.91]", "+2.53 [+2.19, +2.95]", False),
    ("fixes 307 examples", "fixes 308 examples", False),
    ("| 3 | L1H0,L1H4,L1H6 | 0.5083 |", "| 3 | L1H0,L1H4,L1H7 | 0.5083 |", False),
    ("| False | True | True |", "| False | True | False |", False),
    ("significant at size(s) [1, 2, 3]", "significant at size(s) [1, 2]", False),
    ("directly pushes toward the wrong", "directly pushes toward the right", False),
])
def test_report_numbers_to_their_printed_digits_and_text_exactly(old, new, passes):
    got, want = _report(MAIN_JOB, old, new)
    run = _run(MAIN_JOB)
    problems = report_problems(got, want, same_cpu=False, run=run)
    assert (not problems) == passes, problems
    assert report_problems(got, want, same_cpu=True, run=run)
    assert not report_problems(want, want, same_cpu=True, run=run)


def _config_changed(case: str, change) -> tuple[str, str, float]:
    want = _frozen(case, "config.json")
    data = json.loads(want)
    change(data)
    return json.dumps(data, indent=1, sort_keys=True) + "\n", want, _run(case)


def _set(path: str, value):
    def change(data):
        *keys, last = path.split(".")
        node = data
        for key in keys:
            node = node[key]
        node[last] = value(node[last]) if callable(value) else value
    return change


@pytest.mark.parametrize("path, value, passes", [
    # float noise of the measured size in the summary's numbers; the tables' digests
    ("summary.clean.heldout.logprob", lambda v: v + MEASURED_ULPS * EPS32 * 6.2, True),
    ("summary.interaction.effects.L1H0", lambda v: v - MEASURED_ULPS * EPS32 * 6.2, True),
    ("files.heads.sha256", "0" * 64, True),
    # a real change: a number, the best set, the candidates, a count, the run's identity
    ("summary.clean.heldout.logprob", lambda v: v * (1 + 1e-4), False),
    ("summary.best_heads", "L1H0,L1H4", False),
    ("summary.candidates", lambda v: v[::-1], False),
    ("summary.significant_sizes", [1, 2], False),
    ("summary.n_examples.heldout", 599, False),
    ("files.heads.rows", 15, False),
    ("config.seed", 1, False),
    ("config.model_fingerprint", "0" * 16, False),
])
def test_config_numbers_within_the_bound_and_the_rest_exactly(path, value, passes):
    got, want, run = _config_changed(MAIN_JOB, _set(path, value))
    problems = config_problems(got, want, same_cpu=False, run=run)
    assert (not problems) == passes, problems
    assert config_problems(got, want, same_cpu=True, run=run)
    assert not config_problems(want, want, same_cpu=True, run=run)
