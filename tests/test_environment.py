"""`workbench.environment`: `--threads auto` takes the cores idle now (not the lagging load
average) and says why; `OMP_NUM_THREADS` wins; the environment a run records. The sampler is
mocked: no test here depends on how busy the machine running it is, nor on timing."""

from __future__ import annotations

import os

import pytest

import workbench.environment as environment
from workbench.environment import (
    ThreadChoice,
    auto_threads,
    choose_threads,
    cpu_info,
    environment_line,
    idle_cores,
    idle_threads,
    read_cpu_times,
    resolve_threads,
    thread_choice,
)
from workbench.errors import WorkbenchError

# /proc/stat's first lines: the total, then one line per core (user nice system idle iowait
# irq softirq steal guest guest_nice)
STAT = """cpu  {t}
cpu0 {c0} 0 {s0} {i0} {w0} 0 0 0 0 0
cpu1 {c1} 0 {s1} {i1} {w1} 0 0 0 0 0
intr 12345
"""


def _stat(tmp_path, name, **ticks) -> str:
    path = tmp_path / name
    path.write_text(STAT.format(t="1 2 3 4 5 6 7 8 0 0", **ticks))
    return str(path)


def test_cpu_times_are_read_per_core(tmp_path):
    path = _stat(tmp_path, "stat", c0=100, s0=20, i0=300, w0=5, c1=50, s1=10, i1=400, w1=0)
    assert read_cpu_times(path) == {0: (305, 425), 1: (400, 460)}
    assert read_cpu_times(tmp_path / "missing") is None


def test_idle_cores_count_each_cores_idle_share_and_this_process_as_idle():
    before = {0: (1000, 2000), 1: (1000, 2000), 2: (0, 100)}
    # over 30 ticks per core: core 0 idle all of them, core 1 busy 20 of 30
    after = {0: (1030, 2030), 1: (1010, 2030), 2: (0, 130)}
    assert idle_cores(before, after, {0, 1}) == pytest.approx(40 / 30)
    assert idle_cores(before, after, {0, 1}, own=15) == pytest.approx(55 / 30)  # 15 were ours
    assert idle_cores(before, after, {0, 1}, own=100) == 2.0  # never more than the cores
    assert idle_cores(before, after, {2}) == 0.0  # a core other jobs keep busy
    assert idle_cores(before, before, {0, 1}) == 2.0  # no tick passed: none is busy


@pytest.mark.parametrize("cores, idle, threads, line", [
    (2, 2.0, 2, "2 threads: 2 cores idle"),
    (2, 1.6, 2, "2 threads: 2 cores idle"),  # a core 80 % idle counts as idle
    (2, 1.1, 1, "1 thread: 1 of 2 cores busy"),
    (2, 0.2, 1, "1 thread: 2 of 2 cores busy"),  # at least one thread, even when all are busy
    (16, 3.4, 3, "3 threads: 13 of 16 cores busy"),
    (1, 1.0, 1, "1 thread: 1 core idle"),
])
def test_idle_threads_take_the_idle_cores_and_say_why(cores, idle, threads, line):
    choice = idle_threads(cores, idle)
    assert choice.threads == threads and choice.line() == line


def _snapshots(monkeypatch, *samples, load=(3.5, 2.0, 1.1)):
    """`read_cpu_times` returns `samples` in turn; no real sleep; a load average."""
    it = iter(samples)
    monkeypatch.setattr(environment, "read_cpu_times", lambda *a: next(it))
    monkeypatch.setattr(environment.time, "sleep", lambda s: None)
    monkeypatch.setattr(environment, "own_ticks", lambda: 0.0)
    monkeypatch.setattr(environment, "usable_cores", lambda: {0, 1})
    monkeypatch.setattr(environment.os, "getloadavg", lambda: load, raising=False)


def test_a_machine_that_has_just_become_idle_gets_every_core(monkeypatch):
    """Right after `scripts/setup.sh` the 1-minute load average stood at 1.1 and more on an
    idle 2-core machine, and the load-average rule gave 1 thread: the cores idle now give 2."""
    _snapshots(monkeypatch, {0: (0, 0), 1: (0, 0)}, {0: (30, 30), 1: (29, 30)}, load=(3.5, 2, 1))
    assert auto_threads(2, os.getloadavg()[0]) == 1  # what the load average would have given
    choice = choose_threads(environ={})
    assert choice == ThreadChoice(2, "2 cores idle")
    assert choice.line() == "2 threads: 2 cores idle"


def test_a_busy_machine_gets_the_cores_left_idle(monkeypatch):
    # one core busy with another job all the window, the other idle; the load average is low
    _snapshots(monkeypatch, {0: (0, 0), 1: (0, 0)}, {0: (0, 30), 1: (30, 30)}, load=(0.1, 0, 0))
    assert choose_threads(environ={}).line() == "1 thread: 1 of 2 cores busy"


def test_omp_num_threads_wins_and_without_proc_stat_the_load_average_stands_in(monkeypatch):
    def never():
        raise AssertionError("sampled although OMP_NUM_THREADS is set")

    assert choose_threads(never, {"OMP_NUM_THREADS": "1"}).line() == "1 thread: OMP_NUM_THREADS=1"
    assert choose_threads(never, {"OMP_NUM_THREADS": "4"}).threads == 4
    monkeypatch.setattr(environment, "usable_cores", lambda: {0, 1, 2, 3})
    monkeypatch.setattr(environment.os, "getloadavg", lambda: (1.2, 0, 0), raising=False)
    choice = choose_threads(lambda: None, {"OMP_NUM_THREADS": "x"})  # not a number: ignored
    assert choice == ThreadChoice(3, "4 cores, 1-minute load average 1.2")


def test_auto_is_resolved_once_and_bad_threads_are_refused():
    """`auto` is decided once per process (a run's own work never lowers it later); under
    the test suite `OMP_NUM_THREADS` is 1, as torchrun sets it for each rank."""
    from workbench.compute import Compute

    first = thread_choice("auto")
    assert first == ThreadChoice(int(os.environ["OMP_NUM_THREADS"]),
                                 f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}")
    assert thread_choice("auto") is first and resolve_threads("auto") == first.threads
    assert thread_choice(3).line() == "3 threads: set by threads=3"
    assert resolve_threads(None) is None and thread_choice(None).line(4) == \
        "4 threads: torch's setting"
    for bad in (0, -1, "two", 1.5, True):
        with pytest.raises(WorkbenchError, match="threads must be an integer >= 1 or 'auto'"):
            resolve_threads(bad)
        with pytest.raises(WorkbenchError, match="threads must be"):
            Compute(threads=bad)
    import torch

    before = torch.get_num_threads()
    with Compute(threads="auto").threads_set():
        assert torch.get_num_threads() == first.threads
    assert torch.get_num_threads() == before


def test_compute_does_not_sample_when_it_is_made(monkeypatch):
    """`Compute()` only checks `threads` (the library makes one at import): sampling waits
    `SAMPLE_S` and happens when a run first computes."""
    from workbench.compute import Compute

    monkeypatch.setattr(environment, "sample_idle_cores",
                        lambda *a: pytest.fail("sampled when a Compute was made"))
    environment._threads_at_start.cache_clear()
    try:
        Compute(threads="auto")
    finally:
        environment._threads_at_start.cache_clear()


def test_the_cpu_model_and_its_matmul_flags_are_read(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8488C\n"
                    "flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile\n"
                    "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8488C\n")
    name, flags = cpu_info.__wrapped__(path)
    assert name == "Intel(R) Xeon(R) Platinum 8488C"
    assert flags == ("fma", "avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def test_the_environment_names_threads_device_versions_and_cpu(monkeypatch):
    from tests.helpers import tiny_model

    model = tiny_model(device="cpu")
    env = environment.environment(model, ThreadChoice(2, "2 cores idle"))
    assert env["threads"] == 2 and env["threads_reason"] == "2 cores idle"
    assert env["device"] == "cpu" and env["dtype"] == "float32" and env["gpu"] is None
    import torch
    import transformer_lens
    import transformers

    assert env["torch"] == torch.__version__ and env["transformers"] == transformers.__version__
    assert env["transformer_lens"] is not None and transformer_lens is not None
    assert env["cpu"] == cpu_info()[0] and env["cpu_flags"] == list(cpu_info()[1])
    line = environment_line(env)
    assert line.startswith("2 threads: 2 cores idle; cpu, float32; torch ")
    assert f"TransformerLens {env['transformer_lens']}" in line and "Python " in line
    assert f"CPU {env['cpu']}" in line
    gpu = environment_line({**env, "device": "cuda:0", "gpu": "NVIDIA H100 80GB HBM3"})
    assert "cuda:0 (NVIDIA H100 80GB HBM3), float32" in gpu


def test_transformerlens_4_is_refused_and_the_pin_is_pyprojects(tmp_path):
    """TransformerLens >= 4 is refused in one line naming the fix, by `check_transformer_lens`
    and by importing the workbench (a fresh interpreter that sees 4.3 installed: the refusal,
    not an ImportError from inside TransformerLens); 3.x passes; the pin is pyproject.toml's."""
    import subprocess
    import sys
    from pathlib import Path

    from workbench.environment import TRANSFORMER_LENS_PIN, check_transformer_lens

    root = Path(__file__).resolve().parent.parent
    assert f'"transformer-lens{TRANSFORMER_LENS_PIN}"' in (root / "pyproject.toml").read_text()
    for ok in ("3.9.0", "3.10.1", None, "not-a-version"):
        check_transformer_lens(ok)
    for bad in ("4.0.0", "4.3.0", "4.0.0rc1", "12.1"):
        with pytest.raises(WorkbenchError, match=r"pip install \"transformer-lens>=3.9,<4\"$"):
            check_transformer_lens(bad)
    fake = ("import importlib.metadata as m; real = m.version; "
            "m.version = lambda d: '4.3.0' if d == 'transformer_lens' else real(d); "
            "from workbench import load_model")
    run = subprocess.run([sys.executable, "-c", fake], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 1 and "ImportError" not in run.stderr
    assert last == ("workbench.errors.WorkbenchError: transformer-lens 4.3.0 is installed; "
                    "cel-workbench runs on transformer-lens>=3.9,<4: "
                    'pip install "transformer-lens>=3.9,<4"')


def test_a_stage_retakes_auto_from_the_cores_idle_then(monkeypatch):
    """`stage_threads("auto")` measures anew at each call; a fixed count or torch's setting
    is not re-decided (None); `Compute.retake_threads` sets torch to the choice on a CPU and
    leaves a GPU run alone."""
    import torch

    from workbench.compute import Compute

    choices = iter([ThreadChoice(1, "1 of 2 cores busy"), ThreadChoice(2, "2 cores idle")])
    monkeypatch.setattr(environment, "choose_threads", lambda: next(choices))
    assert environment.stage_threads("auto") == ThreadChoice(1, "1 of 2 cores busy")
    assert environment.stage_threads(3) is None and environment.stage_threads(None) is None
    before = torch.get_num_threads()
    try:
        assert Compute(threads="auto").retake_threads("cpu").record() == {
            "threads": 2, "reason": "2 cores idle"}
        assert torch.get_num_threads() == 2
        assert Compute(threads="auto").retake_threads("cuda:0") is None
        assert Compute(threads=1).retake_threads("cpu") is None
    finally:
        torch.set_num_threads(before)


def test_a_run_started_under_load_takes_the_cores_freed_later(monkeypatch, tmp_path):
    """A run whose first computing stage starts with one core busy computes it on one thread
    and the later stages, once the machine is idle, on two; `config.json` records each
    stage's choice, and the run's decisions equal those of a run on one thread throughout
    (one and two threads differ only in float rounding: `bench/thread_spread.py`)."""
    import json

    import torch

    from tests.helpers import micro_cel
    from workbench.pipeline import run_cel
    from workbench.tasks.task import load_task

    model, main, side = micro_cel(tmp_path)
    main, side = load_task(main), load_task(side)
    seen = []
    thread_choice("auto")  # the process's first choice (the header's) is made before
    busy, idle = ThreadChoice(1, "1 of 2 cores busy"), ThreadChoice(2, "2 cores idle")
    busy_then_idle = iter([busy, busy] + [idle] * 10)  # freed after the screen starts
    monkeypatch.setattr(environment, "choose_threads", lambda: next(busy_then_idle))
    import dataclasses

    import workbench.pipeline as pipeline

    screen = next(s for s in pipeline.STAGES if s.name == "screen")

    def watched(run, result, store):
        seen.append(torch.get_num_threads())
        return screen.run(run, result, store)

    monkeypatch.setattr(pipeline, "STAGES", tuple(
        dataclasses.replace(s, run=watched) if s is screen else s for s in pipeline.STAGES))
    settings = dict(max_size=2, top_m=4, n_random=30, n_boot=200, progress=False, plots=False,
                    explain=False)
    before = torch.get_num_threads()
    followed = run_cel(model, main, [side], out_dir=tmp_path / "auto", threads="auto",
                       **settings)
    assert torch.get_num_threads() == before  # the run leaves torch as it found it
    assert seen == [1]
    recorded = json.loads((tmp_path / "auto" / "config.json").read_text())["environment"]
    assert recorded["stage_threads"] == {
        "setup": busy.record(), "screen": busy.record(), "search": idle.record(),
        "confirm": idle.record(), "explain": idle.record(), "report": idle.record()}
    fixed = run_cel(model, main, [side], out_dir=tmp_path / "one", threads=1, **settings)
    assert "stage_threads" not in json.loads(
        (tmp_path / "one" / "config.json").read_text())["environment"]
    assert list(followed.heads.sort_values("head")["head"]) == \
        list(fixed.heads.sort_values("head")["head"])
    assert followed.confirmation["heads"].tolist() == fixed.confirmation["heads"].tolist()
    assert followed.best == fixed.best


def test_the_command_refuses_transformerlens_4_in_one_line(tmp_path):
    """`workbench ...` and `python -m workbench ...` under TransformerLens 4 (a distribution
    record of 4.3.0 first on the path) print the refusal as their other input errors, one
    line, exit 2, no traceback."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    record = tmp_path / "transformer_lens-4.3.0.dist-info"
    record.mkdir()
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: transformer-lens\n"
                                     "Version: 4.3.0\n")
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{root}"}
    script = Path(sys.executable).parent / "workbench"
    commands = [[sys.executable, "-m", "workbench", "cel", "--quick"]]
    if script.exists() or shutil.which("workbench"):
        commands.append([str(script) if script.exists() else "workbench", "--help"])
    for cmd in commands:
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env,
                             timeout=120)
        assert run.returncode == 2 and run.stdout == "", cmd
        assert run.stderr == ("workbench: error: transformer-lens 4.3.0 is installed; "
                              "cel-workbench runs on transformer-lens>=3.9,<4: "
                              'pip install "transformer-lens>=3.9,<4"\n'), cmd
