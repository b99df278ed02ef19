"""`HookedLM`: a hooked model, with heads removed, as a language model lm-eval can score.

lm-eval (lm-evaluation-harness) asks a model three things: the log-likelihood of a
continuation after a context (`loglikelihood`, what every `multiple_choice` task uses), the
log-likelihood of a whole text (`loglikelihood_rolling`, perplexity tasks) and a generation
(`generate_until`). `HookedLM` answers the first two with a TransformerLens model whose heads
are ablated at `blocks.{l}.attn.hook_z` by the workbench's own hooks (`workbench.ablation`),
so `lm_eval.simple_evaluate(model=HookedLM(model, heads), tasks=[...])` scores the model
without those heads with lm-eval's own prompts, metrics and aggregation.

Everything that is not the forward pass is lm-eval's Hugging Face model's (`HFLM`), so the two
give the same numbers on the same weights: the pair is split into tokens by lm-eval's own
`TemplateLM._encode_pair` (trailing whitespace of the context moves into the continuation;
the continuation is `tokens(context + continuation)[len(tokens(context)):]`), a BOS is
prepended when the model's own tokenizer adds one (`cfg.default_prepend_bos`, which
`load_model` sets from the tokenizer) unless the text already starts with it, requests are
ordered and batched by lm-eval's `Collator` (longest first; one forward serves all one-token
continuations of a context), and inputs longer than the model's context are cut from the left.
Log-softmax is taken in float32. `generate_until` decodes greedily with a key-value cache
(`workbench.generation.greedy_generate`) under the same hooks, with HFLM's handling of
`until`, `max_gen_toks` and the context's length; sampling is refused.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Int
from torch import Tensor

from workbench.lm_eval.source import require_lm_eval

require_lm_eval()  # without lm-eval: one line naming the fix, not an ImportError from below

from lm_eval import utils as lm_utils  # noqa: E402
from lm_eval.api.model import TemplateLM  # noqa: E402
from lm_eval.models.utils import (  # noqa: E402
    Collator,
    handle_stop_sequences,
    has_bos_prefix,
    normalize_gen_kwargs,
)
from lm_eval.models.utils_hf import pad_and_concat  # noqa: E402

from workbench.ablation import HeadMeans, ablation_hooks  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.heads import HeadSet, HeadSpec  # noqa: E402
from workbench.options import AblationKind  # noqa: E402

Request = tuple[tuple[str, str] | None, list[int], list[int]]


class HookedLM(TemplateLM):
    """A hooked model with `heads` ablated, as an `lm_eval.api.model.LM`.

    Args:
        model: a HookedTransformer (or a TransformerBridge in compatibility mode) with a Hugging
            Face tokenizer, e.g. from `load_model`.
        heads: the heads to remove (`"L1H2,L0H3"`, `[(1, 2)]`, a `HeadSet`); None: none.
        kind: `"zero"` or `"mean"` ablation (resample needs a counterfactual per prompt,
            which lm-eval's requests do not have).
        means: the heads' mean `z` (`compute_head_means`), for `kind="mean"`.
        batch_size: sequences per forward pass.
        max_length: the longest input in tokens (default the model's `n_ctx`); longer inputs
            lose tokens from the left, as in lm-eval.
        max_gen_toks: the most tokens generated where a task's `generation_kwargs` do not
            say (`HFLM`'s default, 256).

    Example:
        >>> import lm_eval
        >>> lm = HookedLM(load_model("smollm2-135m"), heads="L3H1")
        >>> lm_eval.simple_evaluate(model=lm, tasks=["my_task"], task_manager=tm)
    """

    def __init__(
        self,
        model,
        heads: HeadSet | list[HeadSpec] | str | None = None,
        kind: AblationKind | str = AblationKind.ZERO,
        means: HeadMeans | None = None,
        *,
        batch_size: int = 8,
        max_length: int | None = None,
        max_gen_toks: int = 256,
    ) -> None:
        super().__init__()
        if getattr(model, "tokenizer", None) is None:
            raise WorkbenchError(
                "HookedLM needs a model with a Hugging Face tokenizer (model.tokenizer is None); "
                "load the model with load_model(...) or pass one to HookedTransformer"
            )
        kind = AblationKind.parse(kind)
        if kind is AblationKind.RESAMPLE:
            raise WorkbenchError(
                "HookedLM ablates heads with kind 'zero' or 'mean'; resample ablation needs a "
                "counterfactual of each prompt, which lm-eval's requests do not have"
            )
        if int(batch_size) < 1:
            raise WorkbenchError(f"batch_size must be at least 1; got {batch_size}")
        self.model = model
        self.tokenizer = model.tokenizer
        self.heads = HeadSet.of(model, heads)
        self.kind = kind
        self.hooks = ablation_hooks(model, self.heads, kind, means)
        self._batch_size = int(batch_size)
        self._max_length = int(max_length or model.cfg.n_ctx)
        if int(max_gen_toks) < 1:
            raise WorkbenchError(f"max_gen_toks must be at least 1; got {max_gen_toks}")
        self.max_gen_toks = int(max_gen_toks)
        self._add_bos = bool(model.cfg.default_prepend_bos)

    # --- what lm-eval reads -----------------------------------------------------------------

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        """The token an empty context stands for: BOS, or EOS without one (as `HFLM`)."""
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def device(self) -> torch.device:
        return torch.device(self.model.cfg.device)

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def tok_encode(
        self, string: str, add_special_tokens: bool | None = None, **kwargs
    ) -> list[int]:
        """The ids of `string` as the model's own Hugging Face tokenizer gives them: BOS first
        when that tokenizer adds one (and `add_special_tokens` is not False), but not before
        a text that already starts with the BOS string (`HFLM.tok_encode`)."""
        bos = self._add_bos if add_special_tokens is None else bool(add_special_tokens)
        if add_special_tokens is None and has_bos_prefix(
            string, self.tokenizer.decode(self.prefix_token_id)
        ):
            bos = False
        ids = self.tokenizer.encode(string, add_special_tokens=False)
        return [self.tokenizer.bos_token_id, *ids] if bos and self._add_bos else ids

    def tok_decode(self, tokens, skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)

    # --- scoring ------------------------------------------------------------------------------

    def _forward(self, tokens: Int[Tensor, "batch pos"]) -> Tensor:
        """Float32 log-probabilities `[batch, pos, d_vocab]` with the heads ablated."""
        with torch.no_grad(), self.model.hooks(fwd_hooks=self.hooks):
            logits = self.model(tokens)
        return F.log_softmax(logits.float(), dim=-1)

    def _loglikelihood_tokens(
        self, requests: list[Request], disable_tqdm: bool = False, **kwargs
    ) -> list[tuple[float, bool]]:
        """`(sum of log p(continuation token), every token the argmax)` per request, batched
        as `HFLM._loglikelihood_tokens` batches them (its causal path)."""

        def by_length(req: Request):
            toks = req[1] + req[2]
            return -len(toks), tuple(toks)

        order = Collator(
            requests, sort_fn=by_length, group_by="contexts",
            group_fn=lambda req: req[-2] + req[-1][:-1],
        )
        out = []
        for chunk in order.get_batched(n=self.batch_size):
            inps = []
            for _, context, continuation in chunk:
                if not context or not continuation:
                    raise WorkbenchError(
                        "HookedLM got a request with an empty context or continuation "
                        f"({len(context)} and {len(continuation)} tokens)"
                    )
                whole = (context + continuation)[-(self.max_length + 1):][:-1]
                inps.append(torch.tensor(whole, dtype=torch.long, device=self.device))
            lengths = [len(i) for i in inps]  # before pad_and_concat, which pads in place
            logp = self._forward(pad_and_concat(max(lengths), inps, padding_side="right"))
            for (key, context, continuation), row, end in zip(chunk, logp, lengths, strict=True):
                n = len(continuation)
                row = row[end - n : end][None]  # (1, n, V): the continuation's
                greedy = row.argmax(-1)
                for key_, cont, row_ in order.get_cache(
                    req_str=key, cxt_toks=context, cont_toks=continuation, logits=row
                ):
                    cont = torch.tensor(cont, dtype=torch.long, device=row_.device)[None]
                    is_greedy = bool((greedy[:, -cont.shape[1]:] == cont).all())
                    ll = torch.gather(row_, 2, cont[..., None])[..., 0]
                    answer = (float(ll.sum()), is_greedy)
                    out.append(answer)
                    if key_ is not None:
                        self.cache_hook.add_partial("loglikelihood", key_, answer)
        return order.get_original(out)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """The log-likelihood of each whole text, in windows of `max_length` tokens after the
        prefix token, as `HFLM.loglikelihood_rolling` cuts them."""
        windows, counts = [], []
        for (string,) in [req.args for req in requests]:
            rolling = [
                lm_utils.make_disjoint_window(w)
                for w in lm_utils.get_rolling_token_windows(
                    token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length, context_len=1,
                )
            ]
            windows += [(None, *w) for w in rolling]
            counts.append(len(rolling))
        lls = self._loglikelihood_tokens(windows)
        totals, start = [], 0
        for req, n in zip(requests, counts, strict=True):
            total = sum(ll for ll, _ in lls[start : start + n])
            totals.append(total)
            start += n
            self.cache_hook.add_partial("loglikelihood_rolling", tuple(req.args), total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Each request's greedy continuation with the heads ablated, as `HFLM.generate_until`
        makes it: requests grouped by their generation settings (`normalize_gen_kwargs`:
        `max_gen_toks`, default `max_gen_toks`), the model's EOS string added to `until`
        (`handle_stop_sequences`), the context encoded as `tok_encode` and cut from the left to
        `max_length - max_gen_toks` tokens, decoded greedily (`greedy_generate`) and the text
        cut before the first stop sequence. Sampling is refused."""
        from workbench.generation import greedy_generate

        groups: dict[str, list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault(repr(sorted(req.args[1].items())), []).append(i)
        eos = self.tok_decode([self.eot_token_id], skip_special_tokens=False)
        out: list[str] = [""] * len(requests)
        for rows in groups.values():
            kwargs = normalize_gen_kwargs(requests[rows[0]].args[1], self.max_gen_toks)
            if kwargs.get("do_sample"):
                raise WorkbenchError(
                    "HookedLM decodes greedily; this task samples (do_sample true, or a "
                    f"temperature above 0: {requests[rows[0]].args[1]}); set do_sample: false")
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            n = int(kwargs.pop("max_gen_toks"))
            if n >= self.max_length:
                raise WorkbenchError(f"max_gen_toks={n} leaves no room for a context in "
                                     f"max_length={self.max_length} tokens")
            contexts = [self.tok_encode(requests[i].args[0])[-(self.max_length - n):]
                        for i in rows]
            with self.model.hooks(fwd_hooks=self.hooks):
                texts = greedy_generate(
                    self.model, [torch.tensor(c) for c in contexts], n,
                    [u for u in until if u], rows_per_pass=self.batch_size).texts
            for i, text in zip(rows, texts, strict=True):
                out[i] = text
                self.cache_hook.add_partial("generate_until", requests[i].args, text)
        return out
