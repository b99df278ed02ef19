"""A micro model built by hand whose CEL answer is known: the demo and the tests' ground truth.

The model (2 layers x 4 heads, no layer norm, a 2-neuron ReLU MLP in layer 1) reads prompts
`f<j> x<i>` and should answer `y<i>`. Every logit is set by hand:

- five *helpful* heads (L0H0, L0H2, L1H0, L1H2, L1H3) attend uniformly and copy `x<i>` into
  the logit of `y<i>`; together they give it `s_i = i + 0.5`;
- the *harmful* head L0H3 writes a constant `+2` to the distractor token `D`;
- the *redundant pair* L0H1 and L1H1 each write 1 to a residual direction `p` that the MLP
  reads as `3 * min(p, 1) = 3 * (relu(p) - relu(p - 1))`, added to the logit of `D`. The
  pair acts as an OR gate: removing either head alone changes nothing at all (`min(1, 1) =
  min(2, 1)`), removing both takes 3 off `D`. The "only jointly" effect is exact, not small.

So the clean model answers correctly when `s_i > 5` (3 of 8 tokens); removing L0H3 gives 5/8,
removing the pair 6/8, removing all three 8/8, and removing any helpful head lowers accuracy.
The best head sets are {L0H3}, {L0H1, L1H1} and {L0H1, L0H3, L1H1}.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from workbench.loading.checkpoint import save_checkpoint
from workbench.tasks.tokenizer import WordTokenizer

N_TOKENS = 8
N_FILLERS = 4
HARMFUL_HEAD = "L0H3"
REDUNDANT_PAIR = ("L0H1", "L1H1")
HELPFUL_HEADS = ("L0H0", "L0H2", "L1H0", "L1H2", "L1H3")
_HARM, _PAIR_GAIN = 2.0, 3.0

# Residual directions.
_CONST, _P = 0, 1
_X, _Y, _D, _F = 2, 2 + N_TOKENS, 2 + 2 * N_TOKENS, 3 + 2 * N_TOKENS


def micro_vocab() -> list[str]:
    return (
        ["<bos>", "<pad>"]
        + [f"x{i}" for i in range(N_TOKENS)]
        + [f"y{i}" for i in range(N_TOKENS)]
        + ["D"]
        + [f"f{j}" for j in range(N_FILLERS)]
    )


def micro_model(device: str = "cpu") -> HookedTransformer:
    """The hand-built model described in the module docstring, with `word_tokenizer` set."""
    tok = WordTokenizer(micro_vocab())
    cfg = HookedTransformerConfig(
        n_layers=2,
        d_model=32,
        n_ctx=8,
        d_head=8,
        n_heads=4,
        d_mlp=2,
        d_vocab=len(tok),
        act_fn="relu",
        normalization_type=None,
        attn_only=False,
        positional_embedding_type="standard",
        device=device,
        seed=0,
    )
    model = HookedTransformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        ids = {w: i for i, w in enumerate(tok.vocab)}
        model.embed.W_E[:, _CONST] = 1.0
        for i in range(N_TOKENS):
            model.embed.W_E[ids[f"x{i}"], _X + i] = 1.0
            model.unembed.W_U[_Y + i, ids[f"y{i}"]] = 1.0
        for j in range(N_FILLERS):
            model.embed.W_E[ids[f"f{j}"], _F + j] = 1.0
        model.unembed.W_U[_D, ids["D"]] = 1.0
        # Prompts are `<bos> f x` (3 positions) and attention is uniform (W_Q = W_K = 0), so a
        # head sees x with weight 1/3: scale by 3 and split s_i over the five helpful heads.
        for name in HELPFUL_HEADS:
            layer, head = int(name[1]), int(name[3])
            attn = model.blocks[layer].attn
            for i in range(N_TOKENS):
                attn.W_V[head, _X + i, i] = 1.0
                attn.W_O[head, i, _Y + i] = 3.0 * (i + 0.5) / len(HELPFUL_HEADS)
        harm_layer, harm_head = int(HARMFUL_HEAD[1]), int(HARMFUL_HEAD[3])
        model.blocks[harm_layer].attn.b_V[harm_head, 0] = 1.0  # z = e_0 whatever it attends to
        model.blocks[harm_layer].attn.W_O[harm_head, 0, _D] = _HARM
        for name in REDUNDANT_PAIR:
            layer, head = int(name[1]), int(name[3])
            model.blocks[layer].attn.b_V[head, 0] = 1.0
            model.blocks[layer].attn.W_O[head, 0, _P] = 1.0
        mlp = model.blocks[1].mlp
        mlp.W_in[_P, :] = 1.0
        mlp.b_in[:] = torch.tensor([0.0, -1.0])
        mlp.W_out[0, _D] = _PAIR_GAIN
        mlp.W_out[1, _D] = -_PAIR_GAIN
    model.word_tokenizer = tok
    model.eval()
    return model


def write_micro_tasks(folder: str | Path) -> tuple[Path, Path]:
    """Write the main task (`micro_map`: fillers f0, f1 select, f2, f3 held out) and a side
    task (`micro_short`: the bare prompts `x<i>`) as JSONL; return their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    header = {
        "task": {
            "name": "micro_map",
            "metric": "accuracy",
            "source": "workbench.cli.demo",
            "description": "answer y<i> to 'f<j> x<i>'; D is the distractor",
        }
    }
    lines = [json.dumps(header)]
    for j in range(N_FILLERS):
        for i in range(N_TOKENS):
            lines.append(
                json.dumps(
                    {
                        "id": f"f{j}-x{i}",
                        "prompt": f"f{j} x{i}",
                        "answer": f"y{i}",
                        "wrong": ["D"],
                        "split": "select" if j < 2 else "heldout",
                    }
                )
            )
    main = folder / "micro_map.jsonl"
    main.write_text("\n".join(lines) + "\n")
    side_lines = [
        json.dumps(
            {"task": {"name": "micro_short", "metric": "accuracy", "source": "workbench.cli.demo"}}
        )
    ]
    for i in range(N_TOKENS):
        side_lines.append(
            json.dumps(
                {
                    "id": f"x{i}",
                    "prompt": f"x{i}",
                    "answer": f"y{i}",
                    "wrong": ["D"],
                    "split": "select" if i % 2 else "heldout",
                }
            )
        )
    side = folder / "micro_short.jsonl"
    side.write_text("\n".join(side_lines) + "\n")
    return main, side


def write_demo(folder: str | Path) -> tuple[Path, Path, Path]:
    """Save the micro model as a workbench checkpoint plus its two tasks under `folder`.

    Returns:
        `(model_dir, main_task_path, side_task_path)`.
    """
    folder = Path(folder)
    model = micro_model()
    model_dir = save_checkpoint(
        model,
        model.word_tokenizer,
        folder / "micro_model",
        meta={"source": "workbench.cli.demo.micro_model"},
    )
    main, side = write_micro_tasks(folder)
    return model_dir, main, side
