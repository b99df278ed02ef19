"""What a run ran on: the threads it chose and why, and the machine, versions and device.

**Threads.** `--threads auto` (the default) takes the cores that are idle when the run
starts. The 1-minute load average lags by a minute and more: right after `scripts/setup.sh`
it stood at 1.1 on an idle 2-core machine and gave one thread, which ran SmolLM2's forward at
4.4 s instead of 2.5 s. So `auto` measures instead: it reads every usable core's idle and
busy ticks from `/proc/stat` twice, `SAMPLE_S` apart, and counts the idle share of those
cores over that window, adding back this process's own CPU time (its own work is not another
job's). The cores idle to the nearest whole core are the threads, at least 1: a machine
that has just become idle gets every core whatever its load average, and cores that other
jobs keep busy are left to them (measured on a 2-core machine with other jobs on it, two
threads ran the embedded main job 6x slower than one: `bench/threads.py`). Where
`/proc/stat` cannot be read (macOS, Windows) the load average stands in. `OMP_NUM_THREADS`,
where it is set, wins (torchrun sets 1 per rank; the test suite sets 1). The choice is made
when the process first asks (the header, the model's load) and again when each stage of a run
starts (`stage_threads`), so a run follows the machine: started while another job held the
cores, it takes them up once they are free. A different count moves no number beyond float
rounding (`bench/thread_spread.py`). Each choice says why (`ThreadChoice.line`:
`"2 threads: 2 cores idle"`); a run's `config.json` records each stage's under
`environment.stage_threads`.

**The environment** (`environment`): the threads and why, device, dtype, the versions of
Python, torch, TransformerLens and transformers, the CPU model with the flags that decide
its matmul speed (`CPU_FLAGS`: AVX2, AVX-512, AVX-512 BF16, AMX, FMA) and torch's CPU kernel
level, and the GPU's name where there is one. `workbench cel` prints it in its header and
a results folder keeps it in `config.json` (`environment`, beside the config, not in it: a
rerun on another machine still resumes) and in `report.md` beside the timings.

Importing this module imports no torch (the command line resolves threads before torch
loads); `environment` imports it only to read a model's device and a GPU's name.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel

DEFAULT_THREADS = "auto"
SAMPLE_S = 0.3  # the window over which idle cores are measured: 30 ticks of each core
# the CPU flags that decide a CPU forward's speed: float32 FMA and vector width, and the
# bfloat16 paths (AVX-512 BF16, AMX tiles)
CPU_FLAGS = ("fma", "avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
# the packages whose versions a run records, under the names printed
PACKAGES = (("torch", "torch"), ("transformer_lens", "TransformerLens"),
            ("transformers", "transformers"))
# the TransformerLens releases the workbench runs on (pyproject.toml's `dependencies`)
TRANSFORMER_LENS_PIN = ">=3.9,<4"

# per core: (idle ticks, all ticks) since boot; None where the counters cannot be read
CpuTimes = dict[int, tuple[int, int]]


@dataclass(frozen=True)
class ThreadChoice:
    """How many threads torch computes on, and why.

    Attributes:
        threads: the thread count (None: torch's own setting is left alone).
        reason: why, in a few words (`"2 cores idle"`, `"OMP_NUM_THREADS=1"`,
            `"1 of 2 cores busy"`, `"set by threads=3"`).
    """

    threads: int | None
    reason: str

    def record(self) -> dict:
        """As JSON values: `{"threads": ..., "reason": ...}`."""
        return {"threads": self.threads, "reason": self.reason}

    def line(self, actual: int | None = None) -> str:
        """`"2 threads: 2 cores idle"`; `actual`: the count where `threads` is None."""
        n = self.threads if self.threads is not None else actual
        count = "threads" if n is None else f"{n} thread{'' if n == 1 else 's'}"
        return f"{count}: {self.reason}"


def read_cpu_times(path: str | Path = "/proc/stat") -> CpuTimes | None:
    """Every core's `(idle, total)` ticks since boot from `/proc/stat` (idle counts iowait;
    total leaves out guest time, which user time already holds); None where unreadable."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    times = {}
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or not name[3:].isdigit():
            continue
        ticks = [int(f) for f in fields[:8]]
        times[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks))
    return times or None


def own_ticks() -> float:
    """This process's CPU time (all its threads, user and system) in clock ticks."""
    t = os.times()
    return (t.user + t.system) * os.sysconf("SC_CLK_TCK")


def usable_cores() -> set[int]:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def idle_cores(before: CpuTimes, after: CpuTimes, cores: set[int], own: float = 0.0) -> float:
    """How many of `cores` were idle between two `read_cpu_times` samples, as a fraction of
    cores (0 to `len(cores)`); `own`: this process's ticks in between, counted as idle (its
    own work is not another job's)."""
    idle = total = 0
    for c in cores:
        if c in before and c in after:
            idle += after[c][0] - before[c][0]
            total += after[c][1] - before[c][1]
    n = len([c for c in cores if c in before and c in after])
    if total <= 0 or n == 0:
        return float(len(cores))  # no tick passed: nothing says a core is busy
    per_core = total / n
    return min(float(n), max(0.0, (idle + own) / per_core))


def sample_idle_cores(seconds: float = SAMPLE_S) -> tuple[float, int] | None:
    """`(idle cores, usable cores)` measured over `seconds` now; None without `/proc/stat`."""
    cores = usable_cores()
    before, mine = read_cpu_times(), own_ticks()
    if before is None:
        return None
    time.sleep(seconds)
    after = read_cpu_times()
    if after is None:
        return None
    return idle_cores(before, after, cores, own_ticks() - mine), len(cores)


def idle_threads(cores: int, idle: float) -> ThreadChoice:
    """The threads for `cores` usable cores of which `idle` (a fraction of cores) are idle:
    the idle ones to the nearest whole core, at least 1."""
    threads = max(1, min(cores, int(idle + 0.5)))
    if threads == cores:
        return ThreadChoice(threads, f"{cores} core{'' if cores == 1 else 's'} idle")
    busy = cores - int(idle + 0.5)
    return ThreadChoice(threads, f"{busy} of {cores} cores busy")


def auto_threads(cores: int, load: float) -> int:
    """Threads for `cores` usable cores when other jobs keep `load` of them busy (the
    1-minute load average): the idle ones, at least 1. The stand-in where idle cores cannot
    be measured (`choose_threads`)."""
    return max(1, min(cores, cores - int(load)))


def choose_threads(sample: Callable[[], tuple[float, int] | None] = sample_idle_cores,
                   environ=None) -> ThreadChoice:
    """What `--threads auto` takes (module docstring): `OMP_NUM_THREADS` where set, else the
    cores idle now (`sample`), else the cores less the load average."""
    environ = os.environ if environ is None else environ
    omp = environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) >= 1:  # set by the user, or by torchrun for each rank
        return ThreadChoice(int(omp), f"OMP_NUM_THREADS={int(omp)}")
    measured = sample()
    if measured is not None:
        return idle_threads(measured[1], measured[0])
    cores = len(usable_cores())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return ThreadChoice(auto_threads(cores, load),
                        f"{cores} cores, 1-minute load average {load:.1f}")


@functools.cache
def _threads_at_start() -> ThreadChoice:
    return choose_threads()


def check_threads(threads) -> None:
    """Raise `WorkbenchError` unless `threads` is an integer >= 1, `"auto"` or None."""
    if threads == "auto" or threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise WorkbenchError(f"threads must be an integer >= 1 or 'auto'; got {threads!r}")


def thread_choice(threads: int | str | None) -> ThreadChoice:
    """`threads` as torch takes it, with why: an integer >= 1 as it is, None (torch's
    setting) as it is, `"auto"` as `choose_threads` decided when the process first asked
    (the header, the model's load; a run asks again at each stage's start, `stage_threads`)."""
    check_threads(threads)
    if threads == "auto":
        return _threads_at_start()
    if threads is None:
        return ThreadChoice(None, "torch's setting")
    return ThreadChoice(threads, f"set by threads={threads}")


def stage_threads(threads: int | str | None) -> ThreadChoice | None:
    """The threads a run's stage computes on, decided when the stage starts: for `"auto"`
    the cores idle then (`choose_threads`, which counts this process's own work as idle), so
    that a run started while other jobs held the cores takes them up once they are free, and
    one whose machine filled up leaves them. None for a fixed count or torch's setting, which
    hold for the whole run. One and two threads moved no decision and no number beyond float
    rounding on the real models (`bench/thread_spread.py`, docs/speed.md)."""
    check_threads(threads)
    return choose_threads() if threads == "auto" else None


def resolve_threads(threads: int | str | None) -> int | None:
    """The thread count of `thread_choice` (None: leave torch's setting alone)."""
    return thread_choice(threads).threads


# ---- the machine ------------------------------------------------------------------------


@functools.cache
def cpu_info(path: str | Path = "/proc/cpuinfo") -> tuple[str, tuple[str, ...]]:
    """`(model name, the flags of CPU_FLAGS it has)`; the flags are empty where unknown."""
    try:
        text = Path(path).read_text()
    except OSError:
        return platform.processor() or platform.machine(), ()
    name, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not name:
            name = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return name or platform.machine(), tuple(f for f in CPU_FLAGS if f in flags)


def package_versions() -> dict[str, str | None]:
    """The versions of the packages in `PACKAGES` (None: not installed), without importing
    them."""
    out = {}
    for dist, _ in PACKAGES:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def check_transformer_lens(version: str | None = None) -> None:
    """Refuse TransformerLens 4 or later, in one line naming the fix: the workbench runs on
    TransformerLens 3 (`TRANSFORMER_LENS_PIN`, pyproject.toml's pin), and 4 moved names it
    imports. `version`: the installed one (None: read from its metadata, without importing it;
    not installed: nothing to refuse here, its import says so)."""
    if version is None:
        version = package_versions().get("transformer_lens")
    major = re.match(r"\d+", version or "")
    if major is not None and int(major.group()) >= 4:
        raise WorkbenchError(
            f"transformer-lens {version} is installed; cel-workbench runs on transformer-lens"
            f"{TRANSFORMER_LENS_PIN}: pip install \"transformer-lens{TRANSFORMER_LENS_PIN}\"")


def environment(model: HookedModel=None, choice: ThreadChoice | None = None) -> dict:
    """What a run ran on, as JSON values (module docstring): `threads`, `threads_reason`,
    `device`, `dtype`, `gpu` (None on a CPU), `python`, the `PACKAGES`' versions, `cpu`,
    `cpu_flags`, `cpu_capability` (torch's kernel level), `cores` (usable by this process)."""
    env: dict = {}
    threads = None
    if "torch" in sys.modules or model is not None:
        import torch

        threads = torch.get_num_threads()
        env["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    if choice is not None:
        env["threads"] = choice.threads if choice.threads is not None else threads
        env["threads_reason"] = choice.reason
    elif threads is not None:
        env["threads"], env["threads_reason"] = threads, "torch's setting"
    if model is not None:
        import torch

        device = torch.device(model.cfg.device)
        env["device"] = str(device)
        env["dtype"] = str(model.cfg.dtype).removeprefix("torch.")
        env["gpu"] = (torch.cuda.get_device_name(device) if device.type == "cuda" else None)
    cpu, flags = cpu_info()
    env.update({"python": platform.python_version(), **package_versions(), "cpu": cpu,
                "cpu_flags": list(flags), "cores": len(usable_cores())})
    return env


def run_environment(model: HookedModel, threads, previous: dict | None) -> dict:
    """What a run computes on (`environment`, with its `threads` setting's choice); a run
    resumed on another machine or setup keeps the ones it resumed from under `earlier`
    (`previous`: the results folder's `config.json`, or None)."""
    env = environment(model, thread_choice(threads))
    before = dict((previous or {}).get("environment") or {})
    earlier = before.pop("earlier", [])
    before.pop("stage_threads", None)  # each stage's own (`Compute.retake_threads`)
    if before and before != env:
        earlier = [*earlier, before]
    return {**env, "earlier": earlier} if earlier else env


def environment_line(env: dict) -> str:
    """The environment in one line: `"2 threads: 2 cores idle; cpu, float32; torch 2.13.0,
    TransformerLens 3.9.0, transformers 5.25.0, Python 3.11.9; CPU AMD EPYC (fma, avx2,
    avx512f, avx512_bf16; torch kernels AVX512)"`."""
    parts = []
    if "threads" in env:
        parts.append(ThreadChoice(env["threads"], env.get("threads_reason", "")).line())
    if "device" in env:
        where = env["device"] + (f" ({env['gpu']})" if env.get("gpu") else "")
        parts.append(f"{where}, {env.get('dtype')}")
    versions = [f"{label} {env[dist]}" for dist, label in PACKAGES if env.get(dist)]
    parts.append(", ".join([*versions, f"Python {env.get('python')}"]))
    inside = [*env.get("cpu_flags", [])]
    if env.get("cpu_capability"):
        inside.append(f"torch kernels {env['cpu_capability']}")
    cpu = f"CPU {env.get('cpu')}" + (f" ({', '.join(inside)})" if inside else "")
    parts.append(cpu + (f", {env['cores']} cores" if env.get("cores") else ""))
    return "; ".join(parts)
