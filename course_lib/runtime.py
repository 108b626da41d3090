"""Where the course meets the machine: device, seeds, threads and the training budget.

Everything that depends on the environment is read here and nowhere else, so a notebook
starts with one call, :func:`start`, and prints what it got.
"""

from __future__ import annotations

import os
import random

import torch

BUDGET_ENV = "COURSE_BUDGET"
"""Environment variable choosing the training budget: ``full`` (default) or ``ci``."""

THREADS_ENV = "COURSE_THREADS"
"""Environment variable fixing torch's CPU thread count (stored outputs use 2)."""

PROGRESS_ENV = "COURSE_PROGRESS"
"""Set to ``0`` to hide progress bars (the execution script does, for stored outputs)."""

BUDGETS = ("full", "ci")


def get_device() -> torch.device:
    """The fastest device present: CUDA, then Apple's MPS, then the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices natively (then about 2x faster than
    float32): CUDA GPUs from Ampere on, CPUs with AVX-512 BF16 or AMX. Elsewhere bfloat16
    is emulated and slower, so training stays in float32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        return any(check() for check in checks if check is not None)
    return False


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
        raise ValueError(
            f"{BUDGET_ENV}={value!r} is not a known budget; use one of {', '.join(BUDGETS)}"
        )
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


def start(seed: int = 1337) -> None:
    """Set up a notebook: threads, seeds, and one line saying what was chosen."""
    threads = configure_threads()
    seed_everything(seed)
    print(
        f"torch {torch.__version__} | device: {get_device().type} | "
        f"budget: {budget()} | seed: {seed}"
        + (f" | threads: {threads}" if os.environ.get(THREADS_ENV) else "")
    )
