"""torch.distributed: 2 CPU ranks give one process's numbers bit for bit, and a sweep resumes.

The ranks are spawned with gloo on the loopback interface only: `GLOO_SOCKET_IFNAME=lo` makes
gloo listen on 127.0.0.1, and the ranks meet through a file store (a TCP store would listen on
every interface). Every rank uses one torch thread, and so does each one-process reference:
bit-for-bit equality is a claim about the same arithmetic, which the thread count can change.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from shlex import quote as shlex_quote

import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp

from tests.helpers import randomize_biases, tiny_model, write_task
from workbench import distributed
from workbench.ablation import Ablation
from workbench.compute import Compute
from workbench.distributed import balanced_bounds, shard_plan
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import load_task

WORLD = 2
SWEEP_OPTIONS = dict(n_random=20, n_boot=100, max_size=2, top_m=4)
CEL_FAST = ["--n-random", "20", "--n-boot", "100", "--max-size", "2", "--quiet"]


def _join(rank: int, store: str) -> None:
    """Join a 2-rank gloo group on 127.0.0.1 the way `workbench` does (`init_from_env`)."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        MASTER_ADDR="127.0.0.1",
        GLOO_SOCKET_IFNAME="lo",
    )
    torch.set_num_threads(1)
    assert distributed.init_from_env("cpu", init_method=f"file://{store}")


def _scorer_cases(folder):
    """A 3-layer model with MLPs and random biases, a task, and several mask sets."""
    model = tiny_model(attn_only=False, n_layers=3, seed=1)
    randomize_biases(model, seed=1)
    task = load_task(write_task(folder / "t.jsonl", n=30))
    g = torch.Generator().manual_seed(0)
    singles = masks_of(model, [[(l, h)] for l in range(3) for h in range(4)])
    sets = (torch.rand(17, 3, 4, generator=g) < 0.25).float()
    sets[5] = 0.0  # the empty mask: its scores are the clean scores
    return model, task, singles, sets


def _assert_same_tables(two: Path, one: Path) -> None:
    """The run_cel tables of two results folders are equal bit for bit."""
    for table in ("heads", "combos", "confirmation", "side_effects"):
        pd.testing.assert_frame_equal(
            pd.read_csv(two / f"{table}.csv"), pd.read_csv(one / f"{table}.csv"), check_exact=True
        )


def _logprob_metric(model, data):
    logits = model(data.tokens)
    rows = torch.arange(logits.shape[0])
    lp = logits[rows, data.answer_pos].log_softmax(-1)
    return lp[rows, data.answer_ids[:, 0]]


def _scorer_worker(rank: int, store: str, folder: str) -> None:
    from pathlib import Path

    import workbench.cli.parser as cli
    from workbench.ablation import compute_head_means
    from workbench.cli.demo import write_demo
    from workbench.sweep import run_sweep

    _join(rank, store)
    folder = Path(folder)
    model, task, singles, sets = _scorer_cases(folder)
    batch = encode_task(model, task)
    means = compute_head_means(model, batch.tokens, batch.lengths)
    scorers = {
        "prefix": MaskScorer(model, batch),
        "prefix, 7 rows per forward": MaskScorer(model, batch, compute=Compute(max_rows=7)),
        "prefix, 3 masks per pass, mean": MaskScorer(
            model, batch, Ablation("mean", means), compute=Compute(masks_per_pass=3)
        ),
        "naive": MaskScorer(model, batch, reuse_prefix=False),
        "custom metric": MaskScorer(model, batch, metric=_logprob_metric),
    }
    for name, scorer in scorers.items():
        for masks in (singles, sets):
            order, bounds = shard_plan(scorer, masks, WORLD)
            assert all(b > a for a, b in bounds), f"{name}: a rank got no masks {bounds}"
            sharded = scorer.score(masks)
            with distributed.local():
                one = scorer.score(masks)
            assert sharded.keys() == one.keys()
            for m in one:
                assert torch.equal(sharded[m], one[m]), f"{name}, {m}: sharded != one process"
    # A sweep cell run by both ranks together, and `workbench cel` on both ranks (every stage
    # sharded), write what one process writes.
    if rank == 0:
        write_demo(folder / "demo")
    distributed.barrier()
    demo = folder / "demo"
    model_dir, main, side = (
        demo / "micro_model",
        demo / "micro_map.jsonl",
        demo / "micro_short.jsonl",
    )
    sweep_args = ([str(model_dir)], [str(main)], ["zero"])
    sweep_kw = dict(others=[str(side)], progress=False, plot=False, **SWEEP_OPTIONS)
    run_sweep(*sweep_args, out=folder / "sweep_two", split="masks", **sweep_kw)
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--others", str(side)]
    argv += ["--device", "cpu", *CEL_FAST]
    assert cli.main([*argv, "--out", str(folder / "two")]) == 0  # also leaves the group
    if rank == 0:
        os.environ["WORLD_SIZE"] = "1"
        # two ranks do not share prefixes (`Compute.share_prefix` auto): one process alike
        assert cli.main([*argv, "--share-prefix", "off", "--out", str(folder / "one")]) == 0
        run_sweep(*sweep_args, out=folder / "sweep_one", share_prefix=False, **sweep_kw)
        pd.testing.assert_frame_equal(
            pd.read_csv(folder / "sweep_two" / "sweep.csv"),
            pd.read_csv(folder / "sweep_one" / "sweep.csv"),
            check_exact=True,
        )
        _assert_same_tables(folder / "two", folder / "one")


def test_balanced_bounds_are_contiguous_and_balanced():
    assert balanced_bounds([1.0] * 10, 2) == [(0, 5), (5, 10)]
    # 12 heads of cost 12 (layer 0) then 12 of 11 and 12 of 1 (the last layer): by cost, not
    # by count, so the first half ends inside layer 1
    bounds = balanced_bounds([12.0] * 12 + [11.0] * 12 + [1.0] * 12, 2)
    assert bounds == [(0, 12), (12, 36)]
    assert balanced_bounds([], 3) == [(0, 0)] * 3
    assert balanced_bounds([1.0] * 3, 4) == [(0, 1), (1, 1), (1, 2), (2, 3)]


def test_shards_cut_only_between_tiled_passes(tmp_path):
    """With 3 masks per pass, every cut in the plan is at a first-layer change or at a
    multiple of 3 masks into a layer's group, as one process tiles them."""
    model, task, _, sets = _scorer_cases(tmp_path)
    scorer = MaskScorer(model, encode_task(model, task), compute=Compute(masks_per_pass=3))
    for world in (2, 3, 5):
        order, bounds = shard_plan(scorer, sets, world)
        assert sorted(order.tolist()) == list(range(len(sets)))
        assert [a for a, _ in bounds[1:]] == [b for _, b in bounds[:-1]]
        first = distributed._first_layers(sets[order], 3).tolist()
        for cut, _ in bounds[1:]:
            if 0 < cut < len(sets) and first[cut] == first[cut - 1]:
                assert first[cut - 3 : cut] == [first[cut]] * 3
                assert first.index(first[cut]) % 3 == cut % 3


@pytest.mark.slow
def test_two_ranks_score_masks_and_run_cel_like_one_process(tmp_path):
    mp.spawn(_scorer_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)


def _sweep_worker(rank: int, store: str, folder: str, die_after: int) -> None:
    """Run the sweep; with `die_after` > 0, rank 1 exits (as if killed) after that many cells."""
    from pathlib import Path

    import workbench.sweep as sweep

    _join(rank, store)
    if rank == 1 and die_after > 0:
        run_cell, done = sweep._run_cell, []

        def dying(*args, **kwargs):
            run_cell(*args, **kwargs)
            done.append(1)
            if len(done) == die_after:
                os._exit(1)

        sweep._run_cell = dying
    folder = Path(folder)
    sweep.run_sweep(
        [str(folder / "micro_model")],
        [str(folder / "micro_map.jsonl"), str(folder / "micro_short.jsonl")],
        kinds=["zero", "mean"],
        out=folder / "sweep",
        progress=False,
        plot=False,
        **SWEEP_OPTIONS,
    )
    distributed.shutdown()


def _finish_times(out, cells) -> dict[str, int]:
    from workbench.sweep import finished_result

    return {
        c.name: (out / c.name / "report.md").stat().st_mtime_ns
        for c in cells
        if finished_result(out / c.name) is not None
    }


@pytest.mark.slow
def test_killed_sweep_resumes_on_two_ranks_and_matches_one_process(tmp_path):
    from workbench.cli.demo import write_demo
    from workbench.sweep import TABLE_FILE, run_sweep, sweep_cells

    write_demo(tmp_path)
    models = [str(tmp_path / "micro_model")]
    tasks = [str(tmp_path / "micro_map.jsonl"), str(tmp_path / "micro_short.jsonl")]
    cells = sweep_cells(models, tasks, ["zero", "mean"])
    out = tmp_path / "sweep"
    with pytest.raises(mp.ProcessExitedException):
        mp.spawn(_sweep_worker, args=(str(tmp_path / "store1"), str(tmp_path), 1), nprocs=WORLD)
    first = _finish_times(out, cells)
    # rank 1 runs cells 1 and 3 and died after cell 1; rank 0 runs 0 and 2
    assert cells[1].name in first and len(first) < len(cells)
    mp.spawn(_sweep_worker, args=(str(tmp_path / "store2"), str(tmp_path), 0), nprocs=WORLD)
    second = _finish_times(out, cells)
    assert set(second) == {c.name for c in cells}
    assert {k: second[k] for k in first} == first  # finished cells were not run again
    two_ranks = pd.read_csv(out / TABLE_FILE)
    assert list(two_ranks["folder"]) == [c.name for c in cells]

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_sweep(
            models,
            tasks,
            kinds=["zero", "mean"],
            out=tmp_path / "one",
            progress=False,
            plot=False,
            share_prefix=False,  # as the two ranks (`Compute.share_prefix` auto)
            **SWEEP_OPTIONS,
        )
    finally:
        torch.set_num_threads(threads)
    one = pd.read_csv(tmp_path / "one" / TABLE_FILE)
    pd.testing.assert_frame_equal(two_ranks, one, check_exact=True)


def _isolated_network() -> list[str] | None:
    """A command prefix that runs its command in a new network namespace holding only the
    loopback interface (root: `unshare -n`; otherwise a user namespace, `unshare -rn`), or None
    where neither is allowed."""
    import shutil
    import subprocess

    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        probe = subprocess.run([*prefix, "ip", "link", "set", "lo", "up"], capture_output=True)
        if probe.returncode == 0:
            return prefix
    return None


@pytest.mark.slow
def test_torchrun_launch_writes_one_process_tables(tmp_path):
    """`torchrun --nproc-per-node 2 -m workbench cel` end to end, as users launch it.

    torchrun's rendezvous store (a TCPStore) listens on every interface whatever address it is
    given, so the launch runs in a network namespace of its own whose only interface is
    loopback: nothing outside this machine's 127.0.0.1 can reach it or be reached."""
    import subprocess

    from workbench.cli.demo import write_demo

    prefix = _isolated_network()
    if prefix is None:
        pytest.skip(
            "needs a network namespace with loopback only (unshare -n or -rn) for "
            "torchrun's store, which listens on every interface"
        )
    model_dir, main, side = write_demo(tmp_path)
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--others", str(side)]
    argv += ["--device", "cpu", *CEL_FAST]
    root = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
    }
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    launch = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(WORLD),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "127.0.0.1:29500",
        "-m",
        "workbench",
        *argv,
        "--out",
        str(tmp_path / "two"),
    ]
    script = "ip link set lo up && exec " + " ".join(shlex_quote(a) for a in launch)
    done = subprocess.run(
        [*prefix, "sh", "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    # rank 0 alone prints the run's summary (the other rank is quiet)
    assert done.stdout.count("best set: L0H1,L1H1") == 1, done.stdout[-4000:]
    import workbench.cli.parser as cli

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert cli.main([*argv, "--share-prefix", "off", "--out", str(tmp_path / "one")]) == 0
    finally:
        torch.set_num_threads(threads)
    _assert_same_tables(tmp_path / "two", tmp_path / "one")


def test_sweep_cells_and_bad_input(tmp_path):
    from workbench import WorkbenchError
    from workbench.sweep import run_sweep, sweep_cells

    cells = sweep_cells(["a/gpt2", "embedded"], ["ioi", "x/my_task.jsonl"], ["zero", "mean"])
    assert [c.name for c in cells[:3]] == [
        "gpt2__ioi__zero",
        "gpt2__ioi__mean",
        "gpt2__my_task__zero",
    ]
    assert len(cells) == 8
    with pytest.raises(WorkbenchError, match="share the folder"):
        sweep_cells(["a/gpt2", "b/gpt2"], ["ioi"])
    with pytest.raises(WorkbenchError, match="ablation kind 'max' is unknown"):
        sweep_cells(["gpt2"], ["ioi"], ["max"])
    with pytest.raises(WorkbenchError, match="non-empty list of tasks"):
        sweep_cells(["gpt2"], [])
    with pytest.raises(WorkbenchError, match="sets run_cel's 'out_dir'"):
        run_sweep(["gpt2"], ["ioi"], out=tmp_path, out_dir=tmp_path)
    with pytest.raises(WorkbenchError, match="split 'rows' is unknown"):
        run_sweep(["gpt2"], ["ioi"], out=tmp_path, split="rows")


def test_sweep_without_models_runs_the_embedded_family_on_the_default_task():
    import workbench.cli.commands as commands
    import workbench.cli.parser as cli
    import workbench.zoo as zoo

    args = cli.build_parser().parse_args(["sweep"])
    if commands.embedded_defaults() is None:
        pytest.skip("the embedded checkpoint is not on disk")
    models, tasks, others = commands.sweep_inputs(args)
    assert models == list(getattr(zoo, "EMBEDDED_FAMILY", ("embedded",)))
    assert tasks == [zoo.DEFAULT_TASK] and others == list(zoo.SIDE_TASKS)


@pytest.mark.slow
def test_sweep_command_resumes_and_refuses_other_options(tmp_path, capsys):
    """`python -m workbench sweep` runs a cell and prints the table; a rerun skips the finished
    cell; a rerun with another option is refused instead of mixing configs."""
    import subprocess

    from workbench.cli.demo import write_demo

    model_dir, main, side = write_demo(tmp_path)
    argv = ["sweep", "--models", str(model_dir), "--tasks", str(main), "--others", str(side)]
    argv += ["--out", str(tmp_path / "sw"), "--device", "cpu", "--no-plots", *CEL_FAST]
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "WORLD_SIZE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "workbench", *argv], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "micro_model" in done.stdout and "L0H1,L1H1" in done.stdout
    report = tmp_path / "sw" / "micro_model__micro_map__zero" / "report.md"
    before = report.stat().st_mtime_ns
    import workbench.cli.parser as cli

    assert cli.main(argv) == 0
    assert report.stat().st_mtime_ns == before
    capsys.readouterr()
    assert cli.main([*argv, "--n-random", "21"]) == 2  # argparse: the last value wins
    assert "were run with other options" in capsys.readouterr().err
    assert cli.main([*argv, "--max-examples", "8"]) == 2  # fewer examples than the cell used
    assert "(max_examples)" in capsys.readouterr().err
    assert report.stat().st_mtime_ns == before


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
