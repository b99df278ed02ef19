"""Benchmark: how far the CPU kernel paths move the real-model comparisons the tests make.

The real-model tests compare the workbench with an independent reference on SmolLM2-135M and
Gemma-3-270m: Hugging Face's own forward on the same weights (logits, answer log-probs of every
hub task), its `o_proj` with a head's input columns zeroed (zero and mean ablation), the naive
one-forward-per-head loop (exact screening), and the logit difference itself (the DLA
components' sum); the loading tests compare small random models of ten families with
transformers the same way (`tiny`). Both sides are float32, so each gap is rounding, and the
rounding depends on the kernels the CPU runs: MKL's and oneDNN's GEMMs, torch's own vectorised
kernels, the thread count. The machines the project runs on differ in exactly these (AMD with
and without AVX-512, Intel with AMX); one machine can take each path when told to, so this runs
every comparison under each variant of `bench.golden_spread.VARIANTS` (`ATEN_CPU_CAPABILITY`
default / avx2 / the CPU's own, `MKL_CBWR` AVX2 / COMPATIBLE, `ONEDNN_MAX_CPU_ISA=AVX2`, one
and two threads, and all of them at once: an AVX2-only CPU), each in its own process.

For each quantity it prints the largest gap per variant, the worst over the variants, the
bound the tests hold it to (`tests/tolerances.py`) and their ratio; a bound within 2x of the
worst is flagged. The hub comparison runs on the tests' own examples and, with `--wide N`, on
N more examples per task and split (the tail of the distribution the tests sample from).

    python -m bench.real_spread                                  # every variant and model
    python -m bench.real_spread --variants frozen all --models gemma-3-270m
    python -m bench.real_spread --json spread.json --wide 4     # every gap, kept

About 6 minutes per variant for all three models on one idle thread (loading the two readings
of each GGUF file, the wide hub examples and the long prompt are most of it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.golden_spread import CLEARED, VARIANTS  # noqa: E402
from tests.tolerances import BOUNDS  # noqa: E402

MODELS = ("smollm2-135m", "gemma-3-270m", "tiny")  # tiny: the loading tests' small models


def _hub_gaps(model, hf, names, sample, wide: int) -> tuple[list[dict], list[dict]]:
    """The hub comparison on the tests' examples (`sample(batch)` per task in `names`) and on
    `wide` further examples per task and split."""
    from tests.tasks.test_hub_smollm2 import answer_logprob_gaps
    from workbench import encode_task, load_task

    tested, extra = [], []
    for name in names:
        batch = encode_task(model, load_task(name))
        idx = sample(batch)
        tested += answer_logprob_gaps(model, hf, batch, idx)
        if wide:
            more = []
            for split in ("select", "heldout"):
                rows = [i for i, e in enumerate(batch.task.examples)
                        if e.split == split and i not in idx]
                more += rows[1 :: max(1, len(rows) // wide)][:wide]
            extra += answer_logprob_gaps(model, hf, batch, more)
    return tested, extra


def _screening_gap(model, batch, subset) -> float:
    """Max |exact screening - the naive loop| over `subset` and the continuous metrics."""
    import numpy as np

    from tests.helpers import loop_head_effects
    from workbench.screening.screen import screen_heads
    from workbench.stats import Stats
    from workbench.tables import table_to_matrix

    exact = screen_heads(model, batch, split=None, heads=subset, stats=Stats(n_boot=10))
    loop = loop_head_effects(model, batch, heads=subset)
    rows = tuple(np.array(subset).T)
    return max(float(np.abs(table_to_matrix(exact, f"d_{m}")[rows] - loop[m][rows]).max())
               for m in ("logprob", "logit_diff"))


def measure(name: str, wide: int) -> dict:
    """Every comparison of the tests on real model `name`, in this process's kernels."""
    from tests.helpers import hf_checks_batch, hf_reading, workbench_reading

    hf, tokenizer = hf_reading(name)
    model = workbench_reading(name, (hf, tokenizer))
    out: dict = {}
    if name == "smollm2-135m":
        import tests.test_real_model as t
        from tests.tasks.test_hub_files import TASK_NAMES
        from tests.tasks.test_hub_smollm2 import _sample

        batch = hf_checks_batch(tokenizer, t.EXAMPLES, "smollm2_checks")
        names, sample = TASK_NAMES, _sample
    else:
        import tests.test_gemma as t
        from tests.tasks.test_hub_gemma3 import LOGPROB_TASKS
        from tests.tasks.test_hub_smollm2 import _sample

        batch = hf_checks_batch(tokenizer, t.EXAMPLES, "gemma3_checks", prepend_bos=True)
        names, sample = LOGPROB_TASKS, lambda b: _sample(b)[-1:]
        long = t.measure_long_prompt(model, hf, tokenizer)
        out["long_prompt_prob"] = long["prob"]
        out["all_global_before_window"] = long["all_global_before_window"]
        dla = t.measure_dla(model, batch)
        out["dla_sum"], out["dla_other"] = dla["sum"], dla["other"]
    logits = t.measure_logits(model, hf, batch)
    out["logits"] = logits["logits"]
    out["p_paris"] = abs(logits["p_paris"] - logits["p_paris_hf"])
    abl = t.measure_ablations(model, hf, batch)
    out["zero_ablation"], out["mean_ablation"] = abl["zero"], abl["mean"]
    out["screening_vs_loop"] = _screening_gap(model, batch, t.SUBSET)
    tested, extra = _hub_gaps(model, hf, names, sample, wide)
    for key in ("first", "sequence"):
        out[f"hub_{key}"] = max((g.get(key, 0.0) for g in tested), default=0.0)
        if extra:
            out[f"hub_{key}_wide"] = max((g.get(key, 0.0) for g in extra), default=0.0)
    out["hub_gaps"] = tested + extra
    return out


def measure_tiny() -> dict:
    """The loading tests' comparisons with transformers on small random models: a GGUF file
    of each family (`tests/loading/test_gguf.py`) and each local Hugging Face folder
    (`tests/loading/test_model.py`): max |ours - transformers| log-softmax."""
    import torch
    import transformers as tf

    import tests.loading.test_gguf as g
    import tests.loading.test_model as m
    from workbench import load_model

    out = {"gguf_files": 0.0, "hf_folders": 0.0}
    folders = {
        "gpt2-local": m._hf_gpt2, "tiny-llama-gqa": m._hf_llama_gqa, "g3": m._hf_gemma3,
        "g3-linear-rope": lambda: m._hf_gemma3(**m._LINEAR_ROPE),
        "g3-soft-caps": lambda: m._hf_gemma3(final_logit_softcapping=3.0,
                                             attn_logit_softcapping=5.0),
        "qwen3": lambda: m._tiny(tf.Qwen3Config, tf.Qwen3ForCausalLM),
        "mixtral": lambda: m._tiny(tf.MixtralConfig, tf.MixtralForCausalLM,
                                   num_local_experts=4, num_experts_per_tok=2),
    }
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WORKBENCH_CACHE"] = str(Path(tmp) / "cache")
        for family, tokenizer, tied in g.CASES:
            path = g.write_tiny_gguf(Path(tmp) / f"{family}.gguf", family, tokenizer, tied)
            hf, hf_tokenizer = g.transformers_reading(path)
            gap, _ = g.logsoftmax_gap(load_model(path, device="cpu"), hf, hf_tokenizer)
            out["gguf_files"] = max(out["gguf_files"], gap)
        for folder, build in folders.items():
            hf = build()
            hf.save_pretrained(Path(tmp) / folder)
            model = load_model(Path(tmp) / folder, device="cpu")
            tokens = torch.randint(0, 50, (3, 12), generator=torch.Generator().manual_seed(0))
            with torch.no_grad():
                gap = (model(tokens).log_softmax(-1) - hf(tokens).logits.log_softmax(-1))
            out["hf_folders"] = max(out["hf_folders"], float(gap.abs().max()))
    return out


def run_variant(variant: str, models, wide: int, folder: Path) -> dict:
    """Run `measure` for each model in a child process under `variant`'s kernels."""
    env_vars, threads = VARIANTS[variant]
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(env_vars, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = folder / f"{variant}.json"
    cmd = [sys.executable, "-m", "bench.real_spread", "--child", str(out), "--threads",
           str(threads), "--wide", str(wide), "--models", *models]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"variant {variant} failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def spread_rows(results: dict) -> list[dict]:
    """One row per model and quantity: the gap under each variant, the worst and its path,
    the bound and the headroom (bound / worst)."""
    rows = []
    for name in MODELS:
        runs = {v: r[name] for v, r in results.items() if name in r}
        if not runs:
            continue
        for key in [k for k in next(iter(runs.values())) if k != "hub_gaps"]:
            gaps = {v: run[key] for v, run in runs.items()}
            path = max(gaps, key=gaps.get)
            b = BOUNDS.get(name, {}).get(key.removesuffix("_wide"))
            rows.append({"model": name, "quantity": key, "gaps": gaps, "worst": gaps[path],
                         "path": path, "bound": b.value if b else None,
                         "headroom": b.value / gaps[path] if b and gaps[path] else None})
    return rows


def print_table(rows: list[dict], markdown: bool = False) -> None:
    """The rows as text (`!!` where the headroom is under 2) or as a Markdown table."""
    variants = list(rows[0]["gaps"]) if rows else []
    if markdown:
        print("| model | quantity | " + " | ".join(variants) + " | worst | bound | headroom |")
        print("|---" * (len(variants) + 5) + "|")
    for r in rows:
        bound = f"{r['bound']:.3g}" if r["bound"] else "-"
        room = f"{r['headroom']:.1f}" if r["headroom"] else "-"
        if markdown:
            print(f"| {r['model']} | {r['quantity']} | "
                  + " | ".join(f"{r['gaps'][v]:.2g}" for v in variants)
                  + f" | {r['worst']:.2g} ({r['path']}) | {bound} | {room} |")
        else:
            flag = " !!" if r["headroom"] is not None and r["headroom"] < 2 else ""
            print(f"{r['model'][:12]:12s} {r['quantity']:26s} "
                  + " ".join(f"{r['gaps'][v]:9.3g}" for v in variants)
                  + f"  worst {r['worst']:9.3g} ({r['path']}) bound {bound} "
                  f"headroom {room}{flag}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--wide", type=int, default=0,
                        help="further examples per hub task and split (default 0)")
    parser.add_argument("--json", type=Path, help="write every variant's gaps here")
    parser.add_argument("--from-json", type=Path, help="print the tables of an earlier --json "
                        "instead of measuring")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--keep", type=Path, help="keep each variant's gaps here "
                        "(<keep>/<variant>.json), and read any already there instead of "
                        "measuring that variant again")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        result = {name: measure_tiny() if name == "tiny" else measure(name, args.wide)
                  for name in args.models}
        args.child.write_text(json.dumps(result))
        return 0
    if args.from_json:
        print_table(spread_rows(json.loads(args.from_json.read_text())), args.markdown)
        return 0
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for variant in args.variants:
            kept = folder / f"{variant}.json"
            if kept.exists() and set(args.models) <= set(json.loads(kept.read_text())):
                results[variant] = json.loads(kept.read_text())
                continue
            results[variant] = run_variant(variant, args.models, args.wide, folder)
            print(f"{variant}: done", flush=True)
    print(f"variants: {', '.join(results)}")
    print_table(spread_rows(results), args.markdown)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
