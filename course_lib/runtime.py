"""Where the course meets the machine: device, seeds, threads and the training budget.

Everything that depends on the environment is read here and nowhere else, so a notebook
starts with one call, :func:`start`, and prints what it got.
"""

from __future__ import annotations

import logging
import math
import os
import platform
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

BUDGET_ENV = "COURSE_BUDGET"
"""Environment variable choosing the training budget: ``full`` (default) or ``ci``."""

THREADS_ENV = "COURSE_THREADS"
"""Environment variable fixing torch's CPU thread count (stored outputs use 2)."""

PROGRESS_ENV = "COURSE_PROGRESS"
"""Set to ``0`` to hide progress bars (the execution script does, for stored outputs)."""

DEVICE_ENV = "COURSE_DEVICE"
"""Force a device: ``cpu``, ``cuda`` or ``mps`` (the tests and the execution script use ``cpu``)."""

DEVICES = ("cpu", "cuda", "mps")

BUDGETS = ("full", "ci")

KERNELS_ENV = "ATEN_CPU_CAPABILITY"
"""PyTorch's own variable: which of its CPU kernels to run (an x86 CPU with AVX-512 can also run the
AVX2 and the plain ones). It limits ATen's kernels only, and torch believes it without asking the CPU
(``avx512`` on a CPU without AVX-512 crashes at the first AVX-512 instruction)."""

KERNEL_PATHS = ("default", "avx2", "avx512")

CPU_PROFILES: dict[str, dict[str, str]] = {
    "native": {},
    "laptop": {  # most students' laptops: AVX2, no AVX-512 (Intel Core 12th-14th gen, AMD Zen 2/3)
        KERNELS_ENV: "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
    },
    "default": {  # an old CPU: ATen's plain kernels, oneDNN and MKL at SSE4 (fbgemm has no lower level)
        KERNELS_ENV: "default",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
    },
}
"""The CPUs the portability check makes this one behave as, each an environment for a fresh process.
Each library that picks its own kernels reads its own limit: ``ATEN_CPU_CAPABILITY`` alone would leave
oneDNN (bfloat16 and packed products), MKL (float32 matrix products) and fbgemm (int8) on this CPU's
AVX-512. A limit only lowers what a library uses; no variable adds what the hardware lacks."""


def _hardware(name: str) -> bool:
    probe = getattr(torch.cpu, f"_is_{name}_supported", None)  # asks the CPU itself (cpuinfo)
    return bool(probe and probe())


def _onednn_bf16() -> bool:
    if not torch.backends.mkldnn.is_available():
        return False
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())  # oneDNN's own check, within its ISA limit


def cpu_capabilities() -> dict[str, bool]:
    """What this process can run on its CPU, asked of the hardware and of each library, never of a
    variable: the instruction sets the CPU reports (``avx2``, ``avx512``, ``avx512_bf16``, ``amx``),
    whether oneDNN is built in and will multiply bfloat16 here (``onednn``, ``onednn_bf16``: it asks the
    CPU itself, within its own limit), and whether PyTorch's x86 int8 engine is (``fbgemm``: listed only
    on a CPU it supports; a Mac has only qnnpack). ``native_bf16``: bfloat16 products in hardware and a
    library that uses them; elsewhere bfloat16 is emulated, slower than float32."""
    onednn_bf16 = _onednn_bf16()
    native = (_hardware("avx512_bf16") or _hardware("amx_tile")) and onednn_bf16
    return {
        "avx2": _hardware("avx2"),
        "avx512": _hardware("avx512"),
        "avx512_bf16": _hardware("avx512_bf16"),
        "amx": _hardware("amx_tile"),
        "onednn": torch.backends.mkldnn.is_available(),
        "onednn_bf16": onednn_bf16,
        "native_bf16": native,
        "fbgemm": "fbgemm" in torch.backends.quantized.supported_engines,
    }


def aten_kernels() -> str:
    """The ATen kernel path this process runs (``default``, ``avx2`` or ``avx512``): what torch reports,
    checked against the hardware (torch takes ``ATEN_CPU_CAPABILITY`` on trust)."""
    picked = torch.backends.cpu.get_cpu_capability().lower()
    if picked not in KERNEL_PATHS:  # another architecture's names (NEON, SVE): its plain path for us
        return "default"
    if picked == "avx512" and not _hardware("avx512"):
        raise RuntimeError(
            f"{KERNELS_ENV}={os.environ.get(KERNELS_ENV)!r} asks for AVX-512 kernels on a CPU without AVX-512: "
            "unset it (torch does not check, and would crash at the first AVX-512 instruction)"
        )
    return picked


def cpu_profiles() -> list[str]:
    """The profiles of :data:`CPU_PROFILES` this machine can act as: ``native`` always; ``laptop`` where
    the CPU has AVX2 and AVX-512 (with AVX2 alone it already is one); ``default`` on an x86 CPU."""
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")  # ARM's plain path says "default" too
    has = {"native": True, "laptop": _hardware("avx2") and _hardware("avx512"), "default": x86}
    return [name for name in CPU_PROFILES if has[name]]


def _available(kind: str) -> bool:
    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        return mps is not None and mps.is_available()
    return kind == "cpu"


def get_device() -> torch.device:
    """The device to train and generate on: ``COURSE_DEVICE`` if set, else a CUDA GPU if torch sees
    one, else the CPU. Apple's MPS only when asked for (``COURSE_DEVICE=mps``, untested): each of its
    operations costs tens of microseconds to launch, so the course's small models run faster on the
    Mac's CPU. A GPU comes with its index (``cuda:0``), as a tensor's device does, so the two compare
    equal (``torch.device("cuda") != torch.device("cuda:0")``)."""
    forced = os.environ.get(DEVICE_ENV, "").strip().lower()
    if forced:
        if forced not in DEVICES:
            raise ValueError(f"{DEVICE_ENV}={forced!r} is not a device; use one of {', '.join(DEVICES)} (or unset it)")
        if not _available(forced):
            raise RuntimeError(
                f"{DEVICE_ENV}={forced!r} but this machine has no {forced.upper()} device that torch "
                f"{torch.__version__} can use; unset {DEVICE_ENV} to pick the best one present"
            )
        return _indexed(forced)
    return _indexed("cuda" if _available("cuda") else "cpu")


def _indexed(kind: str) -> torch.device:
    if kind == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    if kind == "mps":
        return torch.device("mps", 0)  # MPS has one device; its tensors say mps:0
    return torch.device(kind)


def model_device(model: nn.Module) -> torch.device:
    """Where a model's parameters live: its inputs must be built there (or moved there)."""
    return next(model.parameters()).device


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Run a block with ``model`` in eval mode (no dropout), then restore the mode it was in,
    also when the block raises."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices natively (then about 2x faster than
    float32): CUDA GPUs from Ampere on, CPUs with AVX-512 BF16 or AMX whose oneDNN uses them
    (:func:`cpu_capabilities`). Elsewhere bfloat16 is emulated and slower, so training stays in float32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return cpu_capabilities()["native_bf16"]
    return False


def rng_state(device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """Every random state that work on ``device`` (default :func:`get_device`) draws from: the CPU's,
    and the GPU's own generators when ``device`` is one (dropout on CUDA draws from them, so a
    checkpoint needs them to resume exactly): each CUDA GPU's, or MPS's. A GPU the course does not use
    adds nothing, so a checkpoint of the CPU's training holds the same tensors on a Mac or a GPU server."""
    kind = torch.device(device).type if device is not None else get_device().type
    state = {"cpu": torch.get_rng_state()}
    if kind == "cuda":
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            state[f"cuda.{i}"] = s
    elif kind == "mps":
        state["mps"] = torch.mps.get_rng_state()
    return state


def set_rng_state(state: dict[str, torch.Tensor]) -> None:
    """Restore what :func:`rng_state` returned (GPU states only where that GPU exists)."""
    torch.set_rng_state(state["cpu"])
    for key, s in state.items():
        if key.startswith("cuda.") and int(key[5:]) < (torch.cuda.device_count() if torch.cuda.is_available() else 0):
            torch.cuda.set_rng_state(s, int(key[5:]))
        elif key == "mps" and _available("mps"):
            torch.mps.set_rng_state(s)


def seed_everything(seed: int = 1337) -> torch.Generator:
    """Seed Python's and torch's generators; return a CPU generator seeded the same way.

    Passing the returned generator explicitly (to a DataLoader, to ``torch.multinomial``)
    keeps a result reproducible even when other cells draw random numbers in between.
    """
    random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def budget() -> str:
    """The training budget: ``"full"`` for students, ``"ci"`` for a quick check run."""
    value = os.environ.get(BUDGET_ENV, "full").strip().lower() or "full"
    if value not in BUDGETS:
        raise ValueError(f"{BUDGET_ENV}={value!r} is not a known budget; use one of {', '.join(BUDGETS)}")
    return value


def by_budget(full, ci):
    """Pick ``full`` or ``ci`` according to :func:`budget` (e.g. a number of steps)."""
    return full if budget() == "full" else ci


def show_progress() -> bool:
    """Whether long loops show a progress bar (yes, unless ``COURSE_PROGRESS=0``)."""
    return os.environ.get(PROGRESS_ENV, "1") != "0"


def configure_threads() -> int:
    """Apply ``COURSE_THREADS`` if set; return the number of threads torch will use."""
    value = os.environ.get(THREADS_ENV)
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{THREADS_ENV}={value!r} must be a positive integer")
        torch.set_num_threads(int(value))
    return torch.get_num_threads()


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Run a block on ``n`` CPU threads, then restore the count, also when the block raises. Time on
    one thread when the machine may be busy: with another process on a core, two threads wait on
    each other (chapter 14 times its kernels this way)."""
    if n < 1:
        raise ValueError(f"need at least one thread, got {n}")
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


QUIET_LOGGERS = ("torchao", "torch.utils._pytree")
"""Loggers ``start`` quiets to errors: where torchao is installed (the tests' reference for chapter
14), importing it (peft does, in chapter 10) warns that its CUDA-only extensions did not load."""


def start(seed: int = 1337) -> None:
    """Set up a notebook: threads, seeds, the course's colour-blind-safe plot style, and one
    line saying what was chosen."""
    from .plotting import use_course_style  # matplotlib only where a notebook starts

    use_course_style()
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # torch.profiler: no start/stop log lines (read at first use)
    for name in QUIET_LOGGERS:  # their warnings would land in the notebook's outputs
        logging.getLogger(name).setLevel(logging.ERROR)
    aten_kernels()  # a variable asking for kernels this CPU lacks: a clear error now, not a crash later
    threads = configure_threads()
    seed_everything(seed)
    print(
        f"torch {torch.__version__} | device: {get_device().type} | "
        f"budget: {budget()} | seed: {seed}" + (f" | threads: {threads}" if os.environ.get(THREADS_ENV) else "")
    )


def seconds_per_call(fn: Callable[[], object], timings: int = 7, at_least: float = 0.05) -> float:
    """The median time of one call of ``fn``, measured as notebook 04 teaches: a warm-up call, then
    ``timings`` timings, each repeating ``fn`` until it lasts ``at_least`` seconds (so the clock's
    resolution and Python's overhead are negligible), and the median of them (one disturbed timing
    cannot move it far). For a number to print, never to assert: it depends on the machine and its
    load. Time on one thread (``torch.set_num_threads(1)``) when the machine may be busy."""
    if timings < 1 or at_least <= 0:
        raise ValueError(f"need timings >= 1 and at_least > 0, got {timings} and {at_least}")
    fn()  # warm-up
    started = time.perf_counter()
    fn()
    once = time.perf_counter() - started
    calls = max(1, math.ceil(at_least / once)) if once > 0 else 1000
    per_call = []
    for _ in range(timings):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - started) / calls)
    return statistics.median(per_call)
