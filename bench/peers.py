"""Benchmark: the workbench's CEL beside its peers, on one task, judged by one confirmation.

    python bench/peers.py --model smollm2-135m --task ioi --out peers_ioi
    python bench/peers.py --model gemma-3-270m --task ioi --out peers_gemma_ioi
    python bench/peers.py --model tiny            # seconds: a tiny Llama with a planted head

Every method chooses heads on the task's **selection split** only, from the same examples:

- `cel`: the workbench's default run (`run_cel`: exact screening raced on the pool rule, the
  interaction search), its best set of each size; per-head score: screening's `d_<objective>`;
- `chg`: Causal Head Gating (Nam et al., NeurIPS 2025; PyPI `nam-causal-head-gating` 0.1.0, the
  optional `peers` extra, driven here and never copied): its `CHGTrainer` fits sigmoid gates in
  its three stages on the Hugging Face form of the model through its own gated forward (`CHG`,
  hooks before each `o_proj`). Two things are ours: the objective is the task's `<objective>`
  at the answer position (its trainer's log-prob is swapped for it on the trainer's `CHG`
  instance) and the pass runs in float32 (0.1.0 wraps it in bfloat16 autocast on CPU). On
  Gemma-3 it gets an adapter with the heads' stated width (`chg_adapter`: 0.1.0 assumes
  `hidden_size / num_heads`). 0.1.0's stage `"positive"` pushes gates toward 1 (keep) and
  `"negative"` toward 0, the opposite of its docstrings and `head_taxonomy()`, so heads are
  labelled here by the paper's meaning: **interfering** = gate < 0.5 in the stage that pushes
  toward keep (removal helps), facilitating = gate >= 0.5 in the stage that pushes toward
  removal, irrelevant otherwise. Per-head score: minus the keep stage's gate logit;
- `cs_peer`: compressed sensing at llm-components' settings (`CS_PEER`: 100 random masks, each
  head knocked out with probability 0.02, a Lasso with alpha 0.01 of each mask's
  `<objective>` gain); per-head score: the Lasso coefficient, its set of size k the k largest
  positive coefficients (fewer selected heads, fewer sets: at alpha 0.01 a head enters only
  when its effect is about 0.5 in the objective's units);
- `cs_peer_std`: the same masks and gains refitted standardised (`gain / sd`) at the same alpha,
  scale-free (ours, beside theirs; no forward of its own);
- `cs_workbench`: the workbench's `compressed_sensing` strategy at its defaults (more masks, a
  cross-validated penalty, then every set among the top 8 coefficients scored exactly);
- `attribution`: attribution screening (gradient x (ablated - clean) at `hook_z`, one forward
  and one backward); per-head score: its estimate of `d_<objective>`.

A peer's set of size k is its k best heads by its per-head score (cs_workbench's and cel's
are their searches' best sets). Every method's sets go through the **same** held-out
confirmation (`confirm_sets`, not raced): the same random sets of each size from all heads
and from CEL's pool (drawn with one seed), each scored once (`SharedScorer`) and reused, so
every percentile is against identical numbers; `p_holm` is Holm over one method's sizes.

Budget: wall and CPU seconds, and forward-equivalents: one pass of the whole model over the
selection split; a masked pass that restarts at layer l of L counts (L - l) / L, a pass over
r of the N examples r / N, and a backward pass ~2 forward-equivalents (so CHG's update over b
examples costs 3 b / N, attribution 3). Clean passes and confirmation are not counted.
Rank agreement: Spearman and Kendall's tau-b between the methods' per-head scores.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer_methods import (  # noqa: E402
    CS_PEER,
    CHGBudget,
    CSSettings,
    MethodResult,
    attribution,
    cel_default,
    chg,
    chg_adapter,
    chg_available,
    chg_gated_scores,
    chg_labels,
    chg_trainer,
    cs_peer,
    cs_peer_std,
    cs_workbench,
    top_sets,
)
from real import Meter, metered  # noqa: E402

from workbench.confirmation.confirm import ConfirmPlan, cluster_labels, confirm_sets  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.heads import HeadSet  # noqa: E402
from workbench.scoring.scorer import MaskScorer, masks_of  # noqa: E402
from workbench.stats import (  # noqa: E402
    Stats,
    clustered_bootstrap,
    effect_summary,
    rank_correlation,
    sign_flip_pvalue,
)
from workbench.tables import head_name  # noqa: E402
from workbench.tasks.encoding import TaskBatch, encode_task  # noqa: E402
from workbench.tasks.task import Task, load_task  # noqa: E402

# the names tests and readers reach through this script
__all__ = ["CS_PEER", "CHGBudget", "CSSettings", "MethodResult", "attribution",
           "cel_default", "chg", "chg_adapter", "chg_available", "chg_gated_scores", "chg_labels",
           "chg_trainer", "cs_peer", "cs_peer_std", "cs_workbench", "top_sets", "Meter", "metered"]

def kendall_tau_b(a, b) -> float:
    """Kendall's tau-b (ties in either ranking corrected), ignoring pairs with a NaN."""
    a, b = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    if len(a) < 3:
        return float("nan")
    da = np.sign(a[:, None] - a[None, :])
    db = np.sign(b[:, None] - b[None, :])
    iu = np.triu_indices(len(a), 1)
    da, db = da[iu], db[iu]
    denom = np.sqrt(float((da != 0).sum()) * float((db != 0).sum()))
    return float((da * db).sum() / denom) if denom > 0 else float("nan")


def rank_agreement(methods: list[MethodResult]) -> pd.DataFrame:
    """Spearman and Kendall tau-b between every two methods' per-head scores."""
    rows = []
    for x, y in combinations(methods, 2):
        a, b = x.scores.ravel(), y.scores.ravel()
        rows.append({"a": x.name, "b": y.name, "spearman": rank_correlation(a, b),
                     "kendall_tau_b": kendall_tau_b(a, b)})
    return pd.DataFrame(rows)


class SharedScorer:
    """A `Scorer` that scores each mask once on every example and serves it again from memory,
    so every method's confirmation reads the same random sets' numbers; `n_scored` counts the
    masks actually run."""

    def __init__(self, inner: MaskScorer) -> None:
        self.inner, self.model, self.compute = inner, inner.model, inner.compute
        self.data = inner.data
        self.cache: dict[bytes, dict[str, torch.Tensor]] = {}
        self.n_scored = 0

    def clean(self) -> dict[str, torch.Tensor]:
        return self.inner.clean()

    def score(self, masks, progress: bool = False, desc: str = "masks", rows=None):
        keys = [m.to(torch.uint8).cpu().numpy().tobytes() for m in masks]
        new = list(dict.fromkeys(k for k in keys if k not in self.cache))
        if new:
            first = {k: i for i, k in reversed(list(enumerate(keys)))}
            fresh = self.inner.score(masks[[first[k] for k in new]], progress, desc)
            self.n_scored += len(new)
            for j, k in enumerate(new):
                self.cache[k] = {m: v[j] for m, v in fresh.items()}
        out = {m: torch.stack([self.cache[k][m] for k in keys]) for m in self.cache[keys[0]]}
        return out if rows is None else {m: v[:, rows.to(v.device)] for m, v in out.items()}


def paired_differences(heldout, methods: list[MethodResult], objective: str, stats: Stats,
                       groups=None, reference: str = "cel") -> pd.DataFrame:
    """Which method is right where two disagree: for every size at which a method's set differs
    from `reference`'s, the held-out difference of their gains, example by example (the clean
    run cancels), with a paired bootstrap interval (clusters resampled with `groups`) and a
    two-sided sign-flip p-value. Positive: the method's set beats the reference's."""
    ref = next(m for m in methods if m.name == reference)
    rows = []
    for m in methods:
        for k, heads in m.sets.items():
            if m.name == reference or k not in ref.sets or sorted(heads) == sorted(ref.sets[k]):
                continue
            scores = heldout.score(masks_of(heldout.model, [heads, ref.sets[k]]))[objective]
            d = (scores[0] - scores[1])[None]
            mean = effect_summary(d, stats.n_boot, stats.seed, stats.ci)
            lo, hi = ((mean["_lo"], mean["_hi"]) if groups is None else
                      clustered_bootstrap(d, groups, stats.n_boot, stats.seed, stats.ci))
            rows.append({"method": m.name, "size": k,
                         "heads": str(HeadSet.of(heldout.model, heads)),
                         "reference": str(HeadSet.of(heldout.model, ref.sets[k])),
                         "difference": float(mean[""][0]), "lo": float(lo[0]),
                         "hi": float(hi[0]), "p_two_sided": sign_flip_pvalue(
                             d[0], groups, stats.n_flips, stats.seed, "two-sided")})
    return pd.DataFrame(rows)


def confirm_methods(heldout: SharedScorer, methods: list[MethodResult], objective: str,
                    secondary: str | None, n_random: int, stats: Stats, pool=None,
                    groups=None) -> pd.DataFrame:
    """Each method's sets through `confirm_sets` on one shared scorer (same random sets, scored
    once), one table with a `method` column."""
    tables = []
    for m in methods:
        if not m.sets:  # a Lasso that selected no head has nothing to confirm
            continue
        sets = {k: HeadSet.of(heldout.model, s) for k, s in m.sets.items()}
        table, _ = confirm_sets(heldout, sets, ConfirmPlan(
            objective, secondary, n_random=n_random, stats=stats, pool=pool, groups=groups,
            adaptive=False))
        tables.append(table.assign(method=m.name))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


# ---------------------------------------------------------------------------------------------
# Models and the run


PLANT = (1, 2)  # the tiny model's interfering head


def planted_task(words, n: int = 96, seed: int = 0) -> Task:
    """A task over the embedded vocabulary whose answer is always the same word and whose wrong
    answer always another: `n` prompts of six random words, half select, half held out."""
    from workbench.tasks.task import Example

    vocab = [w for w in words.vocab if w.isalpha() and w not in ("bos", "pad")]
    answer, wrong = vocab[0], vocab[1]
    rng = np.random.default_rng([seed, 96])
    examples = [Example(id=f"planted-{i:03d}", prompt=" ".join(rng.choice(vocab[2:], 6)),
                        answers=(answer,), wrong=(wrong,),
                        split="select" if i % 2 == 0 else "heldout") for i in range(n)]
    return Task(name="planted", examples=examples, metric="logit_diff")


def tiny_models(seed: int = 0, plant=PLANT, scale: float = 4.0):
    """`(hf_model, hooked_model, task)`: a random 2-layer x 4-head Llama on the embedded word
    vocabulary, in its Hugging Face form and as the workbench loads it, and `planted_task`.
    Head `plant` is made interfering: every embedding shares a large component `e`, so the
    head's value is nearly the same everywhere, and its output projection maps that value to
    `-scale` times the unit direction of the answer's minus the wrong answer's unembedding. Its
    removal then raises the logit difference on every prompt (tests measure it)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from workbench.loading import load_model
    from workbench.loading.checkpoint import attach_word_tokenizer
    from workbench.loading.hf_folder import convert_hf_model

    words = load_model("embedded", device="cpu").word_tokenizer
    task = planted_task(words, seed=seed)
    cfg = LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64, tie_word_embeddings=False)
    torch.manual_seed(seed)
    hf = LlamaForCausalLM(cfg).eval()
    layer, head = plant
    d = cfg.hidden_size // cfg.num_attention_heads
    kv = head // (cfg.num_attention_heads // cfg.num_key_value_heads)
    attn = hf.model.layers[layer].self_attn
    answer, wrong = (words.encode(e)[0] for e in (*task.examples[0].answers,
                                                   *task.examples[0].wrong))
    with torch.no_grad():
        e = torch.randn(cfg.hidden_size)
        e /= e.norm()
        hf.model.embed_tokens.weight += 4.0 * e
        v = attn.v_proj.weight[kv * d:(kv + 1) * d] @ (e * cfg.hidden_size ** 0.5)  # (d,)
        direction = hf.lm_head.weight[answer] - hf.lm_head.weight[wrong]
        attn.o_proj.weight[:, head * d:(head + 1) * d] = \
            -scale * torch.outer(direction / direction.norm(), v / v.norm() ** 2)
    hooked = attach_word_tokenizer(convert_hf_model(
        hf, None, "tiny-peers", torch.device("cpu"), torch.float32), words)
    return hf, hooked, task


def default_objective(task: Task) -> str:
    """The task's metric, or a continuous one when it is accuracy (gates and regressions need
    one): the logit difference where the task has wrong answers, else the log-prob."""
    if task.metric != "accuracy":
        return task.metric
    return "logit_diff" if any(e.wrong for e in task.examples) else "logprob"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny", help="smollm2-135m, gemma-3-270m, or tiny (seconds)")
    p.add_argument("--task", default=None, help="default: ioi (tiny: its planted task)")
    p.add_argument("--methods", nargs="*",
                   default=["cel", "chg", "cs_peer", "cs_workbench", "attribution"])
    p.add_argument("--max-size", type=int, default=3)
    p.add_argument("--n-random", type=int, default=200)
    p.add_argument("--chg-updates", type=int, default=100, help="updates per CHG stage")
    p.add_argument("--chg-batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="folder for the CSV/JSON tables")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    if args.model == "tiny":
        hf, model, task = tiny_models(args.seed)
    else:
        from workbench.loading import load_model
        from workbench.loading.gguf import read_gguf
        from workbench.loading.shipped import REAL_MODELS

        model = load_model(args.model, device="cpu")
        # transformers' float32 reading of the same file (CHG runs on Hugging Face models)
        hf = read_gguf(REAL_MODELS[args.model].path())[0] if "chg" in args.methods else None
        task = load_task(args.task or "ioi")
    print(f"models loaded in {time.perf_counter() - t0:.0f} s; load {os.getloadavg()}",
          flush=True)
    objective = default_objective(task)
    select, heldout = encode_task(model, task, "select"), encode_task(model, task, "heldout")
    meter, methods, skipped = Meter(len(select)), [], {}
    with metered(meter):
        if "cel" not in args.methods:
            raise WorkbenchError("the benchmark needs the cel method: its screening decides "
                                 "the pool baseline every method is confirmed against")
        cel = cached(args.out, "cel", lambda: cel_default(model, task, objective, args.max_size,
                                                          args.seed, meter))
        methods.append(cel)
        secondary = cel.notes["secondary"]
        print(f"cel: {cel.sets} in {cel.wall_s:.0f} s", flush=True)
        makers = {
            "chg": lambda: chg(hf, select, objective, args.max_size, args.seed,
                               CHGBudget(updates=args.chg_updates, batch_size=args.chg_batch)),
            "cs_peer": lambda: cs_peer(model, select, objective, args.max_size, args.seed,
                                       meter),
            "cs_workbench": lambda: cs_workbench(model, select, objective, secondary,
                                                 args.max_size, args.seed, meter),
            "attribution": lambda: attribution(model, select, objective, args.max_size),
            "cs_peer_std": lambda: cs_peer_std(next(m for m in methods if m.name == "cs_peer"),
                                               args.max_size),
        }
        shared = SharedScorer(MaskScorer(model, heldout))
        stats, groups = Stats(seed=args.seed), cluster_labels(heldout, "auto")
        tables = []

        def confirm(m: MethodResult) -> None:
            # each method is confirmed as soon as it is done (the random sets are scored with
            # the first and served from memory after), so a run cut short keeps its rows
            meter.stage = "confirmation"
            t = time.perf_counter()
            tables.append(confirm_methods(shared, [m], objective, secondary, args.n_random,
                                          stats, pool=cel.notes["pool"], groups=groups))
            meter.stage = "setup"
            print(f"{m.name} confirmed in {time.perf_counter() - t:.0f} s ({shared.n_scored} "
                  f"masks scored so far); load {os.getloadavg()}", flush=True)
            report(model, task, objective, methods, pd.concat(tables, ignore_index=True),
                   skipped, args)

        confirm(cel)
        for name in args.methods:
            if name == "cel":
                continue
            if name not in makers:
                raise WorkbenchError(f"unknown method {name!r}; expected {sorted(makers)}")
            if name == "chg" and chg_available():
                skipped["chg"] = chg_available()
                continue
            methods.append(cached(args.out, name, makers[name]))
            print(f"{name}: {methods[-1].sets} in {methods[-1].wall_s:.0f} s", flush=True)
            if name == "chg":
                gate_check(model, hf, select, objective, cel.sets[max(cel.sets)])
            confirm(methods[-1])
        # on the objective, and on the secondary metric (a gamed objective shows there); the
        # sets' masks were scored in confirmation, so the second table costs no forward
        paired = pd.concat([paired_differences(shared, methods, metric, stats, groups)
                            .assign(metric=metric) for metric in (objective, secondary)
                            if metric is not None], ignore_index=True)
        print(f"held-out gain of each method's set minus CEL's set of the same size:\n"
              f"{markdown(paired)}", flush=True)
        if args.out:
            paired.to_csv(args.out / "paired.csv", index=False)


def gate_check(model, hf, select: TaskBatch, objective: str, heads) -> None:
    """Print the gain of removing `heads` on 32 selection examples by the workbench's
    `MaskScorer` and by CHG's gated forward with their gates at 0: the two should agree."""
    gates = torch.ones(model.cfg.n_layers, model.cfg.n_heads)
    for l, h in heads:
        gates[l, h] = 0.0
    few = select.rows(slice(0, 32))
    scorer = MaskScorer(model, few)
    wb = float((scorer.score(masks_of(model, [heads]))[objective][0]
                - scorer.clean()[objective]).mean())
    ch = float((chg_gated_scores(hf, few, objective, gates)
                - chg_gated_scores(hf, few, objective, torch.ones_like(gates))).mean())
    print(f"gate check, {HeadSet.of(model, heads)} removed on 32 selection examples: "
          f"workbench {wb:+.4f}, CHG's gated forward {ch:+.4f}", flush=True)


def markdown(df: pd.DataFrame) -> str:
    """A markdown table (4 significant digits), without the optional `tabulate` package."""
    def cell(v):
        return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(False)]
    return "\n".join(lines)


def cached(out: Path | None, name: str, make) -> MethodResult:
    """A method's result from `out/<name>.pkl` when an earlier run left it, else `make()`,
    saved there: a long run that stops later keeps the methods it finished."""
    path = None if out is None else out / f"{name}.pkl"
    if path is not None and path.exists():
        return pickle.loads(path.read_bytes())
    res = make()
    if path is not None:
        out.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(res))
    return res


def report(model, task, objective, methods, table, skipped, args) -> None:
    """Print the markdown tables; with `--out` also write them as files."""
    cost = pd.DataFrame([{"method": m.name, "wall_s": round(m.wall_s, 1),
                          "cpu_s": round(m.cpu_s, 1), "forward_eq": round(m.forward_eq, 1)}
                         for m in methods])
    agree = rank_agreement(methods)
    cols = ["method", "size", "heads", f"select_d_{objective}", f"d_{objective}",
            f"d_{objective}_lo", f"d_{objective}_hi", "p_holm", "percentile", "pool_percentile",
            "random_mean", "pool_random_mean"]
    conf = table[[c for c in cols if c in table]]
    print(f"\n{args.model} x {task.name}, objective {objective}; load {os.getloadavg()}")
    for df in (conf, cost, agree):
        print(markdown(df) + "\n")
    for m in methods:
        if m.name == "chg":
            print("chg:", {k: v for k, v in m.notes.items() if k in
                           ("budget", "objective", "label_counts")})
            names = [head_name(l, h) for l, h in zip(*np.nonzero(m.notes["labels"] ==
                                                                 "interfering"), strict=True)]
            print("chg interfering heads:", names[:30])
        if m.name.startswith("cs_peer"):
            print(f"{m.name}:", {k: v for k, v in m.notes.items() if k in
                                 ("nonzero", "positive", "alpha_max", "gain_sd")})
    if skipped:
        print("skipped:", skipped)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out / "confirmation.csv", index=False)
        cost.to_csv(args.out / "cost.csv", index=False)
        agree.to_csv(args.out / "agreement.csv", index=False)
        L, H = model.cfg.n_layers, model.cfg.n_heads
        heads = pd.DataFrame({"head_name": [head_name(l, h) for l in range(L) for h in range(H)]})
        for m in methods:
            heads[m.name] = m.scores.ravel()
            for k in ("keep_gate", "remove_gate", "labels"):
                if k in m.notes:
                    heads[f"chg_{k}"] = np.asarray(m.notes[k]).ravel()
        heads.to_csv(args.out / "scores.csv", index=False)
        (args.out / "run.json").write_text(json.dumps(
            {"model": args.model, "task": task.name, "objective": objective,
             "args": {k: str(v) for k, v in vars(args).items()}, "skipped": skipped,
             "load": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
