"""Timing on a GPU without weights: SmolLM2's and Gemma-3's exact shapes, randomly initialised.

How long a CEL run takes depends on a model's shape (layers, heads, widths, vocabulary,
attention kinds), not on its weights, so `random_model` builds a `HookedTransformer` from the
exact TransformerLens config the workbench loads for `smollm2-135m` or `gemma-3-270m`
(`bench/configs/<name>.json`, written from `load_model(name).cfg` on this project's CPU
machine), with random weights and a word-level tokenizer of the same vocabulary size (ids
`w0` ... `w<d_vocab - 3>` beside `<bos>` and `<pad>`): nothing large has to travel to the
GPU. Its tasks have the real tasks' shapes: `ioi_like` (154 selection and 155 held-out
prompts of 14 to 20 tokens, one wrong answer, logit difference, as ioi on SmolLM2's
tokenizer) and `induction_like` (300 prompts of 10 to 29 tokens, accuracy), random words.

Racing and the search's decisions follow the effects, which random weights make small and
alike, so a random model's run does not retrace the real model's decisions; the shape of its
cost (a forward, the launch overhead, the share of each stage) is the real model's.

What it measures (`--what`, any of):

- `run`: the default `run_cel` (ioi-like, induction-like beside it): wall time, one clean
  forward over the selection split measured in the same process (`measure_forward`), and
  their ratio, the run's forward-times; racing off as well as on, and `--racing auto`'s
  decision (`workbench.racing.auto_racing`);
- `screen`: exact screening of every head against the naive loop (one full `run_with_hooks`
  per head), unraced, and their ratio;
- `bf16`: screening and search in float32 and in bfloat16 (`bench/search_dtype.py`),
  forward-times of each.

    python bench/random_models.py --model smollm2-135m --device cuda --what run screen bf16
    python bench/random_models.py --model gemma-3-270m --device cpu --check   # a smoke run

`--check` shrinks the run (4 layers, 16 examples per split, sets of up to 2 within 80 masks,
10 random sets) so that every step runs in minutes on a CPU: `bash bench/gpu.sh --cpu-check`
uses it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout: bench.*

from bench.search_dtype import screen_and_search  # noqa: E402
from workbench.compute import Compute  # noqa: E402
from workbench.estimate import measure_forward  # noqa: E402
from workbench.pipeline import prepare_run, run_prepared  # noqa: E402
from workbench.racing import auto_racing  # noqa: E402
from workbench.scoring.scorer import MaskScorer, masks_of  # noqa: E402
from workbench.tasks.encoding import encode_task  # noqa: E402
from workbench.tasks.task import load_task  # noqa: E402
from workbench.tasks.tokenizer import WordTokenizer  # noqa: E402

CONFIGS = Path(__file__).resolve().parent / "configs"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def random_model(name: str, device: str = "cpu", layers: int | None = None,
                 seed: int = 0) -> HookedTransformer:
    """`name`'s exact config (`bench/configs/<name>.json`) with random weights (seeded) and a
    word tokenizer of its vocabulary size; `layers` keeps only the first layers (smoke runs)."""
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    cfg.update(device=device, dtype=DTYPES[cfg["dtype"]], init_weights=True, seed=seed)
    if layers is not None:
        cfg["n_layers"] = layers
        if isinstance(cfg.get("attn_types"), list):
            cfg["attn_types"] = cfg["attn_types"][:layers]
    known = set(HookedTransformerConfig.__dataclass_fields__)
    config = HookedTransformerConfig(**{k: v for k, v in cfg.items() if k in known})
    torch.manual_seed(seed)
    model = HookedTransformer(config)
    model.eval()
    words = ["<bos>", "<pad>"] + [f"w{i}" for i in range(config.d_vocab - 2)]
    model.word_tokenizer = WordTokenizer(words)
    return model


def write_tasks(folder: Path, d_vocab: int, n: int | None = None, seed: int = 0):
    """`(ioi_like, induction_like)` task files in `folder` (see the module docstring); `n`
    examples per split instead of the real tasks' counts."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)

    def word() -> str:
        return f"w{int(rng.integers(0, d_vocab - 2))}"

    def write(name, metric, splits, lengths, wrong):
        lines = [json.dumps({"task": {"name": name, "metric": metric}})]
        for split, count in splits.items():
            for i in range(n or count):
                prompt = " ".join(word() for _ in range(int(rng.integers(*lengths))))
                ex = {"id": f"{name}-{split}-{i}", "prompt": prompt, "answer": word(),
                      "split": split, "group": f"g{i % 16}"}
                if wrong:
                    ex["wrong"] = [word()]
                lines.append(json.dumps(ex))
        path = folder / f"{name}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        return load_task(path)

    return (write("ioi_like", "logit_diff", {"select": 154, "heldout": 155}, (13, 20), True),
            write("induction_like", "accuracy", {"select": 150, "heldout": 150}, (9, 29), False))


def sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_run(model, main, others, settings: dict) -> dict:
    """The default run: wall, the forward measured just before, forward-times, stages."""
    run = prepare_run(model, main, others, progress=False, **settings)
    with run.compute.threads_set():
        forward = measure_forward(run)
    t0 = time.perf_counter()
    result = run_prepared(run, plots=False)
    sync(model.cfg.device)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "forward_s": forward, "forward_times": wall / forward,
            "stages_s": {k: round(v, 2) for k, v in result.timings.items()},
            "adaptive": run.config.adaptive}


def time_screening(model, main) -> dict:
    """Exact screening (unraced, every head) against the naive loop, wall time."""
    data = encode_task(model, main, "select")
    cfg = model.cfg
    masks = masks_of(model, [[(l, h)] for l in range(cfg.n_layers) for h in range(cfg.n_heads)])
    out = {}
    for name, scorer in (("naive", MaskScorer(model, data, reuse_prefix=False)),
                         ("exact", MaskScorer(model, data, compute=Compute(progress=False)))):
        sync(cfg.device)
        t0 = time.perf_counter()
        scorer.clean()
        scores = scorer.score(masks)
        sync(cfg.device)
        out[name] = (time.perf_counter() - t0, scores["logit_diff"])
    gap = float((out["exact"][1] - out["naive"][1]).abs().max())
    return {"naive_s": out["naive"][0], "exact_s": out["exact"][0],
            "exact_over_naive": out["exact"][0] / out["naive"][0], "max_abs_diff": gap}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, choices=sorted(c.stem for c in
                                                             CONFIGS.glob("*.json")))
    p.add_argument("--device", default="cuda")
    p.add_argument("--what", nargs="+", default=["run", "screen", "bf16"],
                   choices=["run", "screen", "bf16"])
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--check", action="store_true", help="a smoke run: small, every step")
    p.add_argument("--out", default=None, help="a JSON line per measurement is appended here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    layers = 4 if args.check else None
    model = random_model(args.model, args.device, layers)
    folder = Path(tempfile.mkdtemp(prefix="random_models_"))
    main_task, side = write_tasks(folder, model.cfg.d_vocab, 16 if args.check else None)
    small = ({"n_random": 10, "n_boot": 100, "search_budget": 80, "max_size": 2} if args.check
             else {})
    where = (torch.cuda.get_device_name(0) if torch.device(args.device).type == "cuda"
             else "cpu")
    print(f"{args.model} (random weights): {model.cfg.n_layers} layers x {model.cfg.n_heads} "
          f"heads, d_vocab {model.cfg.d_vocab}, on {where}; torch {torch.__version__}; load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    if "run" in args.what:
        scorer = MaskScorer(model, encode_task(model, main_task, "select"))
        on, why = auto_racing(scorer)
        rows.append({"what": "racing auto", "racing_on": on, "why": why})
        for adaptive in (True, False):
            rows.append({"what": f"run, racing {'on' if adaptive else 'off'}",
                         **time_run(model, main_task, [side],
                                    {"adaptive": adaptive, "threads": args.threads, **small})})
    if "screen" in args.what:
        rows.append({"what": "exact screening vs naive loop", **time_screening(model, main_task)})
    if "bf16" in args.what:
        for dtype in ("float32", "bfloat16"):
            rec = screen_and_search(model, main_task, [side], dtype, folder / dtype, args.threads,
                                    **small)
            rows.append({"what": f"screen + search, {dtype}",
                         **{f"{s}_s": rec["seconds"][s] for s in rec["seconds"]},
                         "forward_times": sum(rec["seconds"][s] / rec["forward"][s]
                                              for s in rec["seconds"])})
    for row in rows:
        row = {"model": args.model, "device": where, **row}
        print(json.dumps(row, default=float), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row, default=float) + "\n")


if __name__ == "__main__":
    main()
