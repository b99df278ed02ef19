"""Sweeps: train several conditions (init scale, heads, cue), analyse each, summarise.

A *condition* is a named `TheoryConfig`. `run_condition` trains all its seeds in one
vectorised run and analyses them on a held-out set; `run_sweep` does that for each condition
and stacks the results into long tables with a `condition` column (placed after `head_name`
in per-head tables, before `seed`). `summarise` reduces the per-seed table to one row per
condition: means over seeds and fractions of seeds.

Named sweeps live in `SWEEPS` (name -> function of a base config returning the conditions):
`"init"` small vs large initialisation (the `workbench theory` default), `"table"` the
measured table of `docs/theory.md` (adds the clean-cue control, H = 2 and 8, cue strength 2 and
0.5), `"scale"` init scale x heads, `"cue"` cue strength.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from workbench.errors import WorkbenchError
from workbench.loading.model import resolve_device
from workbench.tables import load_table, save_table
from workbench.theory.analysis import ablation_table, evaluate, feature_use_table, seed_summary
from workbench.theory.config import TheoryConfig
from workbench.theory.data import make_batch
from workbench.theory.train import TrainResult, train

TABLES = ("summary", "seeds", "features", "ablations", "history", "head_history")
FIGURES = ("summary", "feature_heatmap", "ablation_bars", "gap_history", "feature_trajectories",
           "tradeoff_vs_init", "gain_vs_cue")
RESULT_FILES = frozenset({f"{t}.csv" for t in TABLES} | {f"{f}.png" for f in FIGURES}
                         | {"configs.json"})
DEFAULT_TOL = 1e-3  # nats; a loss change smaller than this is neither a gain nor a harm
SMALL_INIT, LARGE_INIT = 1e-3, 1.0


@dataclass
class ConditionResult:
    """One condition: its trained models and the tables read from them (see `analysis`)."""

    name: str
    config: TheoryConfig
    train: TrainResult
    metrics: pd.DataFrame
    features: pd.DataFrame
    ablations: pd.DataFrame
    seeds: pd.DataFrame


def run_condition(config: TheoryConfig, name: str = "run", device: str | torch.device = "auto",
                  progress: bool = False, tol: float = DEFAULT_TOL) -> ConditionResult:
    """Train every seed of `config`, then measure fit, feature use and ablations on
    `config.n_eval` held-out samples (drawn with `data_seed + 1`)."""
    device = resolve_device(device)
    result = train(config, device=device, progress=progress)
    held_out = make_batch(config, config.n_eval,
                          torch.Generator(device=device).manual_seed(config.data_seed + 1), device)
    metrics = evaluate(result.model, held_out, config)
    features = feature_use_table(result.model, held_out, config.seeds)
    ablations = ablation_table(result.model, held_out, config.seeds)
    seeds = seed_summary(metrics, features, ablations, tol=tol)
    return ConditionResult(name, config, result, metrics, features, ablations, seeds)


def _with_condition(df: pd.DataFrame, name: str, position: int) -> pd.DataFrame:
    df = df.copy()
    df.insert(position, "condition", name)
    return df


@dataclass
class SweepResult:
    """Long tables over all conditions of a sweep.

    Attributes:
        configs: condition -> config.
        seeds: per (condition, seed): `seed_summary` columns.
        features, ablations: per (condition, seed, head), per-head schema then `condition,
            seed`.
        history: per (condition, seed, step): probe loss, Bayes loss and gap.
        head_history: per (condition, seed, step, head): feature-use coefficients.
    """

    configs: dict[str, TheoryConfig]
    seeds: pd.DataFrame
    features: pd.DataFrame
    ablations: pd.DataFrame
    history: pd.DataFrame
    head_history: pd.DataFrame

    def summary(self) -> pd.DataFrame:
        """One row per condition; see `summarise`."""
        return summarise(self.seeds, self.configs)

    @classmethod
    def load(cls, folder: str | Path) -> SweepResult:
        """Read a folder written by `save` (figures are not read)."""
        folder = Path(folder)
        if not (folder / "configs.json").is_file():
            raise WorkbenchError(f"{str(folder)!r} has no configs.json; is it a theory results "
                                 f"folder written by `workbench theory`?")
        with open(folder / "configs.json") as fh:
            configs = {k: TheoryConfig.from_dict(v) for k, v in json.load(fh).items()}
        tables = {}
        for name in TABLES[1:]:
            try:
                tables[name] = load_table(folder / f"{name}.csv")
            except pd.errors.EmptyDataError:  # head_history of a run without records
                tables[name] = pd.DataFrame()
        return cls(configs=configs, **tables)

    def save(self, out_dir: str | Path, figures: bool = True) -> Path:
        """Write CSV tables, `configs.json` and (optionally) PNG figures to `out_dir`.

        The folder is built in a temporary sibling and renamed into place, so `out_dir` is
        either the old complete folder or the new complete one, never half written. An
        existing `out_dir` is replaced only if it holds nothing but files this method writes.
        """
        out_dir = Path(out_dir).resolve()
        if out_dir.exists():
            foreign = ([out_dir.name] if not out_dir.is_dir() else
                       sorted(p.name for p in out_dir.iterdir() if p.name not in RESULT_FILES))
            if foreign:
                raise WorkbenchError(
                    f"{str(out_dir)!r} exists and holds {foreign[:5]}, which are not theory "
                    f"results; pick another --out or remove it")
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", suffix=".tmp", dir=out_dir.parent))
        try:
            save_table(self.summary(), tmp / "summary.csv")
            for name in ("seeds", "features", "ablations", "history", "head_history"):
                save_table(getattr(self, name), tmp / f"{name}.csv")
            with open(tmp / "configs.json", "w") as fh:
                json.dump({k: c.to_dict() for k, c in self.configs.items()}, fh, indent=2)
            if figures:  # matplotlib is imported only when figures are drawn
                from workbench.theory.plots import save_sweep_figures

                save_sweep_figures(self, tmp)
            if out_dir.exists():
                old = out_dir.with_name(out_dir.name + ".old.tmp")
                shutil.rmtree(old, ignore_errors=True)
                os.replace(out_dir, old)
                os.replace(tmp, out_dir)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, out_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return out_dir


def run_sweep(conditions: Mapping[str, TheoryConfig], device: str | torch.device = "auto",
              progress: bool = False, tol: float = DEFAULT_TOL) -> SweepResult:
    """Run every condition (one after the other) and stack the results.

    Args:
        conditions: name -> config, e.g. `SWEEPS["init"](TheoryConfig())`.
        device: `"auto"`, `"cpu"`, `"cuda"`, ...
        progress: show tqdm bars (conditions and steps).
        tol: see `seed_summary`.
    """
    if not conditions:
        raise WorkbenchError("run_sweep needs at least one condition; got none")
    from tqdm.auto import tqdm

    parts: dict[str, list[pd.DataFrame]] = {k: [] for k in
                                             ("seeds", "features", "ablations", "history",
                                              "head_history")}
    for name, config in tqdm(list(conditions.items()), disable=not progress, desc="conditions"):
        r = run_condition(config, name=name, device=device, progress=progress, tol=tol)
        parts["seeds"].append(_with_condition(r.seeds, name, 0))
        parts["features"].append(_with_condition(r.features, name, 3))
        parts["ablations"].append(_with_condition(r.ablations, name, 3))
        parts["history"].append(_with_condition(r.train.history, name, 0))
        if len(r.train.head_history):
            parts["head_history"].append(_with_condition(r.train.head_history, name, 3))
    tables = {k: pd.concat(v, ignore_index=True) if v else pd.DataFrame()
              for k, v in parts.items()}
    return SweepResult(configs=dict(conditions), **tables)


SUMMARY_MEANS = ("gap", "conflict_top2", "ablate_A_d_loss_A", "ablate_A_d_loss_B",
                 "ablate_A_d_acc_B", "ablate_B_d_loss_B", "ablate_B_d_loss_A", "ablate_B_d_acc_A",
                 "gain", "gain_acc", "gain_best")
SUMMARY_FRACTIONS = ("tradeoff_A", "tradeoff_B", "tradeoff", "tradeoff_any")


def summarise(seeds: pd.DataFrame, configs: Mapping[str, TheoryConfig] | None = None
              ) -> pd.DataFrame:
    """Reduce a per-seed table (with a `condition` column) to one row per condition.

    Returns:
        `condition, n_heads, init_scale, cue, cue_strength, n_seeds`, the mean over seeds of
        `gap, conflict_top2`, the role-head ablation effects and the gains (nats, accuracy as
        a fraction), `gap_max`, and `frac_<flag>` for each trade-off flag (fraction of seeds).
    """
    rows = []
    for name, group in seeds.groupby("condition", sort=False):
        row: dict[str, object] = {"condition": name}
        if configs is not None and name in configs:
            c = configs[name]
            row.update(n_heads=c.n_heads, init_scale=c.init_scale, cue=c.cue,
                       cue_strength=c.cue_strength)
        row["n_seeds"] = len(group)
        row.update({k: float(group[k].mean()) for k in SUMMARY_MEANS})
        row["gap_max"] = float(group["gap"].max())
        row.update({f"frac_{k}": float(group[k].mean()) for k in SUMMARY_FRACTIONS})
        rows.append(row)
    return pd.DataFrame(rows)


def _sweep_init(base: TheoryConfig) -> dict[str, TheoryConfig]:
    return {"small_init": base.replace(init_scale=SMALL_INIT),
            "large_init": base.replace(init_scale=LARGE_INIT)}


def _sweep_table(base: TheoryConfig) -> dict[str, TheoryConfig]:
    small = base.replace(init_scale=SMALL_INIT)
    return {
        **_sweep_init(base),
        "clean_cue": small.replace(cue="clean"),
        "H2": small.replace(n_heads=2),
        "H8": small.replace(n_heads=8),
        "gamma2": small.replace(cue_strength=2.0),
        "gamma0.5": small.replace(cue_strength=0.5),
    }


def _sweep_scale(base: TheoryConfig) -> dict[str, TheoryConfig]:
    return {f"H{h}_init{s:g}": base.replace(n_heads=h, init_scale=s)
            for h in (2, 4, 8) for s in (1e-3, 1e-2, 1e-1, 1.0)}


def _sweep_cue(base: TheoryConfig) -> dict[str, TheoryConfig]:
    small = base.replace(init_scale=SMALL_INIT)
    return {f"gamma{g:g}": small.replace(cue_strength=g) for g in (0.5, 1.0, 2.0)}


# sweep name -> (base config -> {condition: config})
SWEEPS: dict[str, Callable[[TheoryConfig], dict[str, TheoryConfig]]] = {
    "init": _sweep_init,
    "table": _sweep_table,
    "scale": _sweep_scale,
    "cue": _sweep_cue,
}


def quick_config(**changes) -> TheoryConfig:
    """A reduced base config for CI and notebooks: 4 seeds, 600 steps, batch 1000."""
    base = dict(seeds=tuple(range(4)), steps=600, batch_size=1000, n_eval=20_000,
                n_probe=4000, n_records=15)
    base.update(changes)
    return TheoryConfig(**base)
