"""Training: plain SGD on the population logistic loss from a small random initialisation.

Each step draws a fresh batch (so with a large batch this is gradient descent on the
population loss, not on a fixed training set) and takes one SGD step for every seed at once.
The loss summed over seeds has a block-diagonal gradient, so the seeds stay independent.

At `n_records` log-spaced steps the trainer records, on a fixed held-out probe batch, each
seed's joint loss and its gap to the Bayes loss and each head's feature use, so the
trajectories (plotted on a log-step axis) show when each head picks up which feature.
Recording happens on the device; the history is moved to the CPU once, after training.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from workbench.loading.model import resolve_device
from workbench.theory.analysis import feature_coefficients, features_to_table
from workbench.theory.bayes import bayes_loss, logistic_loss
from workbench.theory.config import TheoryConfig
from workbench.theory.data import make_batch
from workbench.theory.model import MultiHeadAttentionModel


@dataclass
class TrainResult:
    """A trained model with its training history.

    Attributes:
        config: the config that was run.
        model: the trained `MultiHeadAttentionModel` (one copy per seed).
        history: per seed and recorded step: `seed, step, loss, bayes_loss, gap` (nats, on the
            probe batch).
        head_history: per-head feature use at each recorded step: `layer, head, head_name,
            seed, step` then the columns of `feature_use_table`.
    """

    config: TheoryConfig
    model: MultiHeadAttentionModel
    history: pd.DataFrame
    head_history: pd.DataFrame


def record_steps(steps: int, n_records: int) -> list[int]:
    """Step 0, then about `n_records` log-spaced steps ending at `steps` (unique, sorted)."""
    if n_records == 0:
        return []
    grid = np.unique(np.round(np.logspace(0, np.log10(steps), n_records)).astype(int))
    return [0, *[int(s) for s in grid if s > 0]]


def train(config: TheoryConfig, device: str | torch.device = "auto",
          progress: bool = False) -> TrainResult:
    """Train one model per seed of `config` with SGD and return it with its history.

    Args:
        config: the experiment settings.
        device: `"auto"` (cuda, then mps, then cpu) or a torch device.
        progress: show a tqdm progress bar over steps.

    Example:
        >>> result = train(TheoryConfig(steps=10, seeds=(0, 1), n_records=3), device="cpu")
        >>> result.model.params["v"].shape  # (seed, head_index, d_model)
        torch.Size([2, 4, 10])
    """
    device = resolve_device(device)
    model = MultiHeadAttentionModel(config, device=device)
    optimiser = torch.optim.SGD(model.parameters(), lr=config.lr)
    stream = torch.Generator(device=device).manual_seed(config.data_seed)
    probe = make_batch(config, config.n_probe,
                       torch.Generator(device=device).manual_seed(config.data_seed + 2), device)
    probe_bayes = bayes_loss(probe, config)
    checkpoints = set(record_steps(config.steps, config.n_records))
    records: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    def record(step: int) -> None:
        with torch.no_grad():
            head_out = model.head_outputs(probe.x, probe.q)  # (S, B, H)
            loss = logistic_loss(head_out.sum(-1), probe.y).mean(-1)  # (S,)
            records.append((step, loss, feature_coefficients(head_out, probe)))

    for step in tqdm(range(config.steps), disable=not progress, desc="theory train",
                     leave=False):
        if step in checkpoints:
            record(step)
        batch = make_batch(config, config.batch_size, stream, device)
        loss = logistic_loss(model(batch.x, batch.q), batch.y).mean(-1).sum()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
    if config.steps in checkpoints:
        record(config.steps)

    bayes = float(probe_bayes)
    rows, head_tables = [], []
    for step, loss, coefs in records:
        loss_np = loss.cpu().double().numpy()
        for i, seed in enumerate(config.seeds):
            rows.append({"seed": seed, "step": step, "loss": loss_np[i], "bayes_loss": bayes,
                         "gap": loss_np[i] - bayes})
        table = features_to_table(coefs, config.seeds)
        table.insert(4, "step", step)
        head_tables.append(table)
    history = pd.DataFrame(rows, columns=["seed", "step", "loss", "bayes_loss", "gap"])
    head_history = pd.concat(head_tables, ignore_index=True) if head_tables else pd.DataFrame()
    return TrainResult(config=config, model=model, history=history, head_history=head_history)
