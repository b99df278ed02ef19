"""lm-eval (lm-evaluation-harness) with the workbench: its tasks as workbench tasks, and a
hooked model with heads removed as a model it scores.

- `HookedLM` (`workbench.lm_eval.model`): an `lm_eval.api.model.LM` over a TransformerLens
  model with heads ablated at `hook_z`; `lm_eval.simple_evaluate(model=HookedLM(...))` scores
  it with lm-eval's own prompts and metrics.
- `lm_eval_records` (`workbench.lm_eval.source`): an lm-eval `multiple_choice` or
  `generate_until` task (a registered name `lm_eval:arc_easy` or a YAML path) as the header and
  records of a workbench multiple-choice or generation task
  (`workbench.lm_eval.generate_until`); `load_task` uses it.
- `workbench.lm_eval.rescore.rescore`: lm-eval's scores of a model clean and with a head set
  removed; `python -m workbench.lm_eval.rescore --model M --task T --heads L3H1`.
- `workbench.lm_eval.export.write_lm_eval_task`: a workbench multiple-choice task's split as an
  lm-eval task over local files, for `rescore`.

lm-eval is an optional dependency (`pip install "cel-workbench[lm_eval]"`). The names are
imported on first use, so `import workbench.lm_eval` needs neither lm-eval nor torch, and
inside these modules `import lm_eval` is the library itself. See docs/lm_eval.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.lazy import lazy_package

if TYPE_CHECKING:  # the package's public names; imported on first use (workbench.lazy)
    from workbench.lm_eval.model import HookedLM
    from workbench.lm_eval.source import lm_eval_records

__getattr__, __dir__, __all__ = lazy_package(globals())
