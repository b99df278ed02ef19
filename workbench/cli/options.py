"""The options of a CEL run on the command line, shared by `cel` and `sweep`.

Each flag for a `CELConfig` field stores under the field's name with the field's default
(`workbench.cli.commands.run_options` collects them); the choices come from the option types
(`workbench.options`) and the registries of screening methods, search strategies and metrics,
so no name is written here, and each strategy's own settings get a flag from its record.
Imports no torch.
"""

from __future__ import annotations

import argparse
import dataclasses

from workbench.config import DEFAULT_THREADS, CELConfig
from workbench.guards import GuardRule
from workbench.metric_records import help_text as metric_help
from workbench.options import AblationKind, ClusterMode, Racing, SearchDtype
from workbench.screening.registry import cel_methods
from workbench.screening.registry import methods as screening_methods
from workbench.search.registry import strategies, strategy_list

# CELConfig's defaults, which are the flags' defaults
CONFIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(CELConfig)}
QUICK_HELP = (
    "a quick look: --max-examples 40 --side-examples 16 --no-side-screening --method "
    "attribution --no-attribution-check --strategy exhaustive --top-m 6 --max-size 2 "
    "--n-random 20 (flags given beside it win). Measured on a 2-core machine shared with "
    "other jobs: the embedded main job 21 s instead of 184 s; SmolLM2 on ioi 3.4-7.3 min "
    "instead of ~26 (docs/speed.md)"
)
THREADS_HELP = (
    "torch's CPU threads per operation (torch.set_num_threads), set before the model loads: "
    "an integer, or auto (the default): OMP_NUM_THREADS where it is set, else the cores idle "
    "when the command starts, measured over 0.3 s (not the lagging load average), at least 1; "
    "the header says how many and why. On a 2-core machine a Gemma-3 forward took 1.13 s on "
    "1 thread and 0.66-0.76 s on 2 when idle, while under other jobs' load 2 threads ran the "
    "embedded main job 6x slower than 1 (docs/speed.md, bench/threads.py)"
)


def threads_arg(text: str) -> int | str:
    """An argparse type for `--threads`: `auto` or an integer >= 1."""
    if text == "auto":
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected auto or an integer >= 1; got {text!r}") from None


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (a clear parser error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1; got {text!r}")
    return value


def add_run_options(p, several_kinds: bool) -> None:
    """The options of a CEL run, shared by `cel` and `sweep` (`sweep` takes several kinds), in
    one argument group per stage.

    Each flag for a `CELConfig` field stores under the field's name with the field's default
    (`workbench.cli.commands.run_options` collects them); `sweep`'s `--ablation` stores a list as
    `kinds`."""
    _ablation_options(p.add_argument_group("ablation"), several_kinds)
    _screen_options(p.add_argument_group("screening (stage 1)"))
    _search_options(p.add_argument_group("search (stage 2)"))
    _confirm_options(p.add_argument_group("confirmation (stage 3)"))
    _guard_options(p.add_argument_group("guards: enhancement, not a gamed objective"))
    _data_options(p.add_argument_group("examples and compute"))


def _ablation_options(p, several_kinds: bool) -> None:
    """How a head is removed."""
    d = CONFIG_DEFAULTS
    p.add_argument(
        "--ablation",
        dest="kinds" if several_kinds else "kind",
        choices=AblationKind.values(),
        default=[d["kind"]] if several_kinds else d["kind"],
        nargs="+" if several_kinds else None,
        help="replace a removed head's z by 0, by its mean over each task's prompts, or by its "
        "z on the example's counterfactual prompt (tasks with 'counterfactual' fields) "
        f"(default {d['kind']})",
    )
    p.add_argument(
        "--per-position",
        action="store_true",
        default=d["per_position"],
        help="mean ablation with the mean at each position (prompts of equal length)",
    )


def _screen_options(p) -> None:
    """Stage 1: screening every head alone."""
    d = CONFIG_DEFAULTS
    p.add_argument(
        "--method",
        choices=cel_methods(),
        default=d["method"],
        help="single-head screening: "
        + "; ".join(f"{n}: {screening_methods()[n].summary}" for n in cel_methods())
        + " (default %(default)s)",
    )
    p.add_argument(
        "--no-attribution-check",
        dest="check_attribution",
        action="store_false",
        default=d["check_attribution"],
        help="with --method attribution, skip the exact screening that reports attribution's "
        "agreement with it (faster; the table then has attribution's estimates only)",
    )
    p.add_argument(
        "--no-side-screening",
        dest="side_screening",
        action="store_false",
        default=d["side_screening"],
        help="screen heads on the main task only (no per-head side-task columns); the found "
        "sets' side effects are measured as always",
    )


def _search_options(p) -> None:
    """Stage 2: the search over head sets."""
    d = CONFIG_DEFAULTS
    p.add_argument(
        "--max-size",
        type=int,
        default=d["max_size"],
        metavar="N",
        help="largest head set to search (default %(default)s)",
    )
    p.add_argument(
        "--strategy",
        dest="strategies",
        nargs="+",
        default=list(d["strategies"]),
        choices=strategy_list(),
        metavar="NAME",
        help="search strategies, run in order on a shared cache: "
        + "; ".join(f"{n}: {s.summary}" for n, s in sorted(strategies().items()))
        + f" (default {' '.join(d['strategies'])})",
    )
    _add_strategy_settings(p)
    p.add_argument(
        "--top-m",
        type=int,
        default=d["top_m"],
        metavar="N",
        help="candidates for the exhaustive search (default %(default)s)",
    )
    p.add_argument(
        "--search-budget",
        type=int,
        default=d["search_budget"],
        metavar="N",
        help="masks the interaction search may score on the selection split "
        "(default: 2.5 x heads + 500, half that with --max-size 2 or 1)",
    )
    p.add_argument(
        "--objective",
        default=d["objective"],
        metavar="METRIC",
        help=f"metric to improve (default: the task's): {metric_help()}",
    )


def _confirm_options(p) -> None:
    """Stage 3: the held-out confirmation."""
    d = CONFIG_DEFAULTS
    p.add_argument(
        "--cluster",
        choices=ClusterMode.values(),
        default=d["cluster"],
        help="held-out intervals and p-values resample the tasks' groups (group; auto: when a "
        "split has at least 8) or single examples (none) (default %(default)s)",
    )
    p.add_argument(
        "--n-random",
        type=int,
        default=d["n_random"],
        metavar="N",
        help="random head sets per size in the held-out baseline (default %(default)s)",
    )
    p.add_argument(
        "--n-boot",
        type=int,
        default=d["n_boot"],
        metavar="N",
        help="paired bootstrap resamples of the held-out intervals (default %(default)s)",
    )


def _guard_options(p) -> None:
    """The guards (`workbench.guards`): which sets the search may find and confirmation pass."""
    d = CONFIG_DEFAULTS
    p.add_argument(
        "--guard",
        dest="guards",
        action="append",
        default=None,
        metavar="TASK:METRIC[:TOL]",
        help="search only sets that do not lower METRIC on TASK ('main' or a side task) by "
        "more than TOL (default 0; 0.02 = two points of accuracy), and confirm them so held "
        "out; repeatable; adds to the default guards (a guard of the same task and metric "
        "sets its tolerance). Default: with a difference objective (logit_diff, prob_diff) "
        "the main task's accuracy and answer log-prob, else none",
    )
    p.add_argument("--no-guard", action="store_true",
                   help="no guards: the unconstrained search of earlier versions")
    p.add_argument(
        "--guard-rule",
        choices=GuardRule.values(),
        default=d["guard_rule"],
        help="how a guard decides on the selection split: not_worse (its interval's lower end "
        "is at least -TOL), no_fall (its mean), no_significant_fall (its upper end) "
        "(default %(default)s)",
    )


def _data_options(p) -> None:
    """Which examples, and how the run computes."""
    d = CONFIG_DEFAULTS
    p.add_argument(
        "--max-examples",
        type=int,
        default=d["max_examples"],
        metavar="N",
        help="use only N examples of each split of every task (main and side), drawn at random "
        "with --seed before fitting to the tokenizer: a quick look (default: all)",
    )
    p.add_argument(
        "--side-examples",
        type=int,
        default=d["side_examples"],
        metavar="N",
        help="the same for the side tasks alone (default: --max-examples)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=d["seed"],
        metavar="N",
        help="the seed every random draw of the run derives from (default %(default)s)",
    )
    p.add_argument("--quick", action="store_true", help=QUICK_HELP)
    p.add_argument(
        "--token-budget",
        type=positive_int,
        default=None,
        metavar="N",
        help="the most tokens (rows x padded length) in one forward; bounds memory "
        "(default: picked per device)",
    )
    add_load_options(p)
    p.add_argument("--share-prefix", choices=("auto", "on", "off"), default="auto",
                   help="run the blocks that several masks run identically once (equal to one "
                   "restart per mask to ~1e-5); auto: in one process where it saves blocks "
                   "(the search's finalist sets), with masks that restart at different layers "
                   "joined into common passes; never under torchrun, whose ranks then write "
                   "what one process writes with off, bit for bit (default %(default)s)")
    p.add_argument(
        "--search-dtype",
        choices=SearchDtype.values(),
        default=d["search_dtype"],
        help="precision of the passes that only rank heads (screening, the search's "
        "knockouts): bfloat16 runs them on a bfloat16 copy of the model (fast on a GPU and on "
        "CPUs with AVX-512 BF16 or AMX, slow elsewhere, which the run says); the finalist sets "
        "are compared, and the chosen sets, baselines, side effects and explanation measured, "
        "in the model's own dtype; auto: bfloat16 where the device has native bfloat16 and "
        "the model is at least 512 wide, else float32. Faster, but bfloat16 screening can "
        "move the pool and so the sets found (default %(default)s; docs/speed.md)",
    )
    p.add_argument(
        "--racing",
        choices=Racing.values(),
        default=Racing.AUTO.value,
        help="score candidates on growing slices of a split until decided (docs/speed.md); "
        "auto: on, except on a GPU where a measured pass over the first slice costs nearly a "
        "full pass (launch overhead: small models), where it is off; a resumed run keeps its "
        "folder's choice (default %(default)s; sweep: auto is on)",
    )
    p.add_argument("--quiet", action="store_true",
                   help="no progress, those of loading a model included (the GGUF "
                   "conversion's and transformers' bars); without it, a log (stderr not a "
                   "terminal) gets plain lines with the run's ETA instead of bars")

def strategy_flag(strategy: str, setting: str) -> tuple[str, str]:
    """`(flag, dest)` of a strategy's own setting: `--gates-steps`, `strategy__gates__steps`."""
    return (f"--{strategy}-{setting}".replace("_", "-"), f"strategy__{strategy}__{setting}")


def _add_strategy_settings(p) -> None:
    """One flag per strategy's own setting (those that are not `CELConfig` fields), from the
    strategies' records (`workbench.search.registry`)."""
    for name, strategy in sorted(strategies().items()):
        for setting in strategy.settings:
            if setting.field:
                continue
            flag, dest = strategy_flag(name, setting.name)
            default = "chosen by the strategy" if setting.default is None else setting.default
            p.add_argument(flag, dest=dest, default=None, metavar="N",
                           help=f"--strategy {name}: {setting.help} (default {default})")


def add_load_options(p) -> None:
    """Where, in what precision and on how many threads the model runs."""
    p.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, cuda:1, mps")
    p.add_argument(
        "--dtype",
        default=None,
        help="float32, bfloat16 (bf16), float16 (fp16), float64, or auto: bfloat16 on CUDA GPUs "
        "that support it, float16 on older ones, float32 on CPU and MPS (default: float32, or "
        "the dtype a workbench checkpoint was saved in; bfloat16 halves GPU memory)",
    )
    p.add_argument("--threads", type=threads_arg, default=DEFAULT_THREADS, metavar="N",
                   help=THREADS_HELP)
