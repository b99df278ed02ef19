"""What the removed heads do: attention by token role, direct logit attribution, OV/QK circuits.

Once CEL has found heads whose removal helps a task, this package explains each head from
several angles, all measured at the answer position (the last real token of each right-padded
prompt), one module per angle:

- **where it looks** (`attention`: `attention_by_role`): the head's attention pattern
  (`hook_pattern`) from the answer position, summed over the positions of each token role.
  Roles come from the task when it labels them (e.g. `marker`, `context`, `query`, with `bos`
  at position 0), else from position (`bos`, `previous`, `self`, `other`). Attention to a role
  is a fraction of the head's attention, so the roles of one example sum to 1; and, on a few
  single examples, the raw attention row token by token (`examples`: `attention_examples`),
  removed heads beside comparison heads;
- **what it writes** (`attribution`: `direct_logit_attribution`): the head's output
  `z_h @ W_O[h]` read through the final layer norm onto the correct answer, the wrong answer
  and their difference. The residual stream at the answer position is a sum of components,
  and the final layer norm is linear once its scale (`ln_final.hook_scale`, taken from the
  cache) is fixed, so each component gets an exact share of the logits (`dla_components`;
  the decomposition is written out in `workbench.explain.dla`);
- **what it moves** (`circuits`: `ov_circuit`, `qk_circuit`): the OV circuit
  (TransformerLens's `FactoredMatrix` `W_V W_O`) of the tokens the head attends to, read out
  through the unembedding: which output tokens it promotes and suppresses; and the QK
  circuit's preferred source tokens for the task's query tokens;
- **did removal help through it** (`removal`: `ablation_outcomes`, `removal_vs_dla`): per
  example, the change in the correct-answer log-prob, in `logit_diff` and in `mean_logit_diff`
  (the mean answer logit minus the mean wrong logit: `docs/explain.md` *Names*) when the head alone
  is ablated, next to its direct effect (the change in its own direct logit attribution); the
  rest went through later layers or the final layer norm's scale.

`explain_heads` (`explanation`) runs all of it on one forward pass (`capture`) and returns a
`HeadExplanation` holding the tables (the per-head ones built alike on every kind of task by
`per_head`); `figures` draws them with matplotlib; `report`
(`explain_folder`) writes one into a CEL results folder and its `report.md`, and `stage` is
`run_cel`'s explain stage, which writes the same files at the end of a run. The helpers the
modules share (`capture`, `attribute`, `roles_for`, the `*_table` builders) are public names
of their modules but not exported here. Per-head tables follow the schema of
`workbench.tables` (`layer, head, head_name` first); per-example tables start with `id, layer,
head, head_name`. Logits and log-probs are in nats; attention is a fraction in [0, 1]; entropy
is in nats.

Example:
    >>> ex = explain_heads(model, task, ["L1H2"], split="heldout")
    >>> ex.roles          # mean attention per role, entropy, top tokens, per head
    >>> ex.dla_summary    # mean direct logit attribution, removed vs comparison heads
    >>> plot_removal_vs_dla(ex.removal)
"""

from workbench.explain.attention import (
    ROLE_SCHEMES,
    RoleScheme,
    attention_by_role,
    summarize_attention,
)
from workbench.explain.capture import EXAMPLE_INDEX
from workbench.explain.circuits import ov_circuit, qk_circuit
from workbench.explain.dla import (
    comparison_heads,
    direct_logit_attribution,
    dla_components,
    summarize_dla,
)
from workbench.explain.examples import attention_examples
from workbench.explain.explanation import HeadExplanation, explain_heads
from workbench.explain.figures import (
    plot_answer_attention,
    plot_attention,
    plot_attention_examples,
    plot_dla,
    plot_removal_vs_dla,
    plot_role_bars,
)
from workbench.explain.removal import OUTCOMES, ablation_outcomes, removal_vs_dla

__all__ = [
    "EXAMPLE_INDEX",
    "OUTCOMES",
    "ROLE_SCHEMES",
    "HeadExplanation",
    "RoleScheme",
    "ablation_outcomes",
    "attention_by_role",
    "attention_examples",
    "comparison_heads",
    "direct_logit_attribution",
    "dla_components",
    "explain_heads",
    "ov_circuit",
    "plot_answer_attention",
    "plot_attention",
    "plot_attention_examples",
    "plot_dla",
    "plot_removal_vs_dla",
    "plot_role_bars",
    "qk_circuit",
    "removal_vs_dla",
    "summarize_attention",
    "summarize_dla",
]
