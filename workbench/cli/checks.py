"""What the command line does before it loads a model: check every option and the results
folder, set the threads, and quiet what loading prints.

Loading a model takes seconds to minutes, and opening a results folder creates it; a run that
is then refused wastes the first and leaves the second behind. So `workbench cel` and
`workbench sweep` check every option first, in one line each, as `run_cel` would refuse it
(`check_options`: the whole `CELConfig`, `--search-dtype` with it, the objective's name,
`--device`, `--dtype` and `--racing`, none of which needs torch), the objective against the
task once the task file is read (`check_task_objective`), and the results folder (`check_out`:
not a file, not held by another run, writable, its recorded tables unchanged, its config the
one these options make, but for what the run takes from the folder: `--racing auto` keeps a
resumed folder's choice, `resumed_choices`).
`run_cel` checks all of it again; these checks only come first. Then `use_threads` sets
torch's threads (`--threads`, `workbench.environment`) and `bars_off` keeps loading quiet.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.config import CELConfig, resolve_threads
from workbench.errors import WorkbenchError
from workbench.metric_records import base_metric, check_objective, task_kind
from workbench.options import Racing, SearchDtype, check_device_name, check_dtype_name

# CELConfig fields a run's flags do not set (`workbench.cli.commands.run_options`), or that
# are resolved once the model loads
_RESOLVED = ("task", "others", "objective", "secondary", "model_fingerprint",
             "task_fingerprint", "others_fingerprint")


def check_options(args, options: dict, model: str = "model", task: str = "task") -> CELConfig:
    """The run's `CELConfig` from the flags' `options` (`run_options`), validated now (a bad
    value is one `WorkbenchError`; `--search-dtype` is `CELConfig.search_dtype`), with
    `--objective`, `--device`, `--dtype` and `--racing` checked by name. Imports no torch."""
    Racing.parse(getattr(args, "racing", Racing.AUTO))
    fields = {k: v for k, v in options.items() if k in CELConfig.__dataclass_fields__}
    config = CELConfig(model=model, task=task, **fields)
    check_objective(config.objective)
    check_device_name(getattr(args, "device", None))
    check_dtype_name(getattr(args, "dtype", None))
    return config


def resumed_choices(args) -> tuple[str, ...]:
    """The `CELConfig` fields a run takes from the folder it resumes rather than from its
    flags: `adaptive` under `--racing auto` (`workbench.cli.auto.decide_racing`), and
    `search_dtype` under `--search-dtype auto`."""
    racing = Racing.parse(getattr(args, "racing", Racing.AUTO)) is Racing.AUTO
    searched = SearchDtype.parse(getattr(args, "search_dtype", SearchDtype.FLOAT32))
    return (("adaptive",) if racing else ()) + (
        ("search_dtype",) if searched is SearchDtype.AUTO else ())


def check_task_objective(objective: str | None, task) -> None:
    """Refuse an objective the task cannot score (a difference metric on a task without wrong
    answers), once its file is read and before the model loads."""
    check_objective(objective, task.name, any(e.wrong for e in task.examples), task_kind(task))


def check_out(out: Path, overwrite: bool, config: CELConfig | None = None,
              resumed: tuple[str, ...] = ()) -> None:
    """Refuse, before loading anything (and before saying "resuming"), an --out that is a
    file, a folder another run holds, one this user or its file system cannot write, a
    results folder whose recorded tables were changed, or one made with other options than
    `config`'s but for the fields in `resumed`, which the run takes from the folder
    (`resumed_choices`; `run_cel` checks all of it again when it opens the folder)."""
    if out.exists() and not out.is_dir():
        raise WorkbenchError(f"--out {str(out)!r} is a file; expected a folder (new or a CEL "
                             "results folder)")
    from workbench.results.lock import check_unlocked, check_writable
    from workbench.results.store import CONFIG_FILE

    if out.is_dir():
        check_unlocked(out)
    check_writable(out)
    if overwrite or not (out / CONFIG_FILE).is_file():
        return
    from workbench.results.store import verify_folder

    recorded = verify_folder(out)["config"]
    if config is not None:
        _check_same_options(out, config, recorded, resumed)


def _check_same_options(out: Path, config: CELConfig, recorded: dict,
                        resumed: tuple[str, ...] = ()) -> None:
    """Refuse a folder whose recorded config differs from `config` in a field the flags set
    (the model, task and fingerprints are compared once they are loaded)."""
    try:
        before = CELConfig.from_dict(recorded)
    except WorkbenchError:
        return  # `run_cel` says what is wrong with it
    diff = [k for k in config.differences(before) if k not in (*_RESOLVED, *resumed)]
    if config.objective is not None and base_metric(config.objective) != before.objective:
        diff.append("objective")
    if config.model == "demo" or before.model == "demo":
        diff = [k for k in diff if k != "model"]
    if diff:
        raise WorkbenchError(
            f"{str(out)!r} holds a CEL run with a different config (differs in {diff}); use "
            "another --out folder, delete this one, or rerun with --overwrite (run_cel(..., "
            "overwrite=True)) to replace it")


def use_threads(threads: int | str | None) -> None:
    """Set torch's intra-op CPU threads (None: leave torch's default; `"auto"`:
    `workbench.config.resolve_threads`)."""
    threads = resolve_threads(threads)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


@contextmanager
def bars_off(quiet: bool) -> Iterator[None]:
    """While a model loads: no tqdm progress bar at all while `quiet` (`--quiet`) or where
    stderr is not a terminal (a bar's frames in a log are carriage returns), and under
    `--quiet` nothing on stdout either; restored afterwards.

    The workbench's own bars follow `Compute.progress`, but loading a GGUF file shows bars
    that take no switch: the conversion's (`workbench.loading.gguf`) and transformers'
    de-quantizing one, both bare `tqdm` bars. Every tqdm bar (transformers' and
    huggingface_hub's included) is a `tqdm.std.tqdm`, so while off its constructor is given
    `disable=True`. `load_model` keeps TransformerLens's prints off stdout itself; under
    `--quiet` stdout goes nowhere at all while the model loads (errors go to stderr)."""
    from workbench.progress import plain, stdout_off

    if not quiet and not plain():
        yield
        return
    from tqdm import std

    init = std.tqdm.__init__

    def disabled(self, *args, **kwargs):
        kwargs["disable"] = True
        init(self, *args, **kwargs)

    std.tqdm.__init__ = disabled
    try:
        with stdout_off(quiet):
            yield
    finally:
        std.tqdm.__init__ = init
