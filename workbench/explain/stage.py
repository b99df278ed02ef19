"""The explain stage of `run_cel`: what the best set's heads do, written into the results folder.

At the end of a run with a results folder, `explain_stage` explains the confirmed best set
(or the top candidate, marked as not significant, when no set is) on the held-out split of
the examples the run used (`workbench.explain.report.explanation_of`) and writes
`explanation/`, `explanation.png` and `attention_examples.png`; the report stage then renders
the explanation's section into `report.md` from those files. It is the same explanation
`workbench explain DIR` writes into a finished folder. It runs again on every run (a
resumed run whose stages all load explains again), and is turned off by `run_cel(...,
explain=False)` (the command line's `--no-explain`). On a generation task it reads the
generated tokens that decide the extracted answer (`workbench.explain.generated`); it does not
run on a multiple-choice task, whose answer is not one token for attention and logit
attribution to read. Under torchrun only rank 0 explains: the other ranks' folders are private
copies that are thrown away.
"""

from __future__ import annotations

from workbench import distributed
from workbench.explain.report import explanation_of, save_explanation


def explain_stage(run, result, store) -> dict:
    """Explain a finished run's best set into its results folder (`store`, open and locked);
    the explanation is kept as `run.explanation` (None where nothing was explained). Writes
    no result table: returns `{}`."""
    run.explanation = None
    folder = store.folder
    if (not run.explain or folder is None or not distributed.is_main()
            or not result.complete or not result.top_candidate
            or run.main.is_multiple_choice):
        return {}
    # on the examples the run used (`max_examples` samples them)
    run.explanation = explanation_of(run.model, run.main, result)
    save_explanation(folder, run.explanation)
    return {}
