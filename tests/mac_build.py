"""A Mac's build of PyTorch, imitated on this machine: the macOS arm64 wheel of torch 2.13 has no oneDNN,
no MKL and no fbgemm (qnnpack is its only int8 engine), an ARM CPU (none of x86's instruction sets), and
MPS. Each probe course_lib or torch asks says so, and the kernels that build lacks raise when called,
as they do there, so a kernel that course_lib calls without asking first fails here too.

Three ways in:

- the ``on_a_mac`` fixture (tests/conftest.py): one test, everything restored after it;
- ``COURSE_SIMULATE=mac`` for a whole run (``COURSE_SIMULATE=mac python -m pytest tests/test_quantization.py``):
  tests/conftest.py applies it for the session and puts tests/simulate on ``PYTHONPATH``, whose
  ``sitecustomize`` applies it in every Python the run starts (a notebook's kernel under nbval, a
  test's subprocess);
- ``apply()`` from your own code.

What it cannot imitate: the kernels this machine runs are still its own (ATen's x86 paths, MKL's
float32 products), so numbers keep this machine's last digits; only oneDNN is really switched off
(``torch.backends.mkldnn.enabled``, which ATen obeys). MPS is announced, not present: work asked of it
(``COURSE_DEVICE=mps``) fails; its random state is a stand-in tensor.
"""

from __future__ import annotations

import os
import platform

import torch

ENV = "COURSE_SIMULATE"
"""``COURSE_SIMULATE=mac``: the whole run (and every process it starts) on the Mac build."""

QNNPACK = 2  # c10::QEngine's number for qnnpack (torch/backends/quantized: _get_qengine_id)
MPS_STATE = torch.zeros(44, dtype=torch.uint8)  # a stand-in for torch.mps.get_rng_state() (a uint8 tensor there too)


class MissingOp:
    """``torch.ops.mkldnn`` of a build without oneDNN, and each operator in it: calling one raises. (There
    no operator is registered under mkldnn; torch's own code that lists the registered ones still finds
    this machine's, so looking them up works, running them does not.)"""

    def __init__(self, name: str = "mkldnn"):
        self.name = name

    def __getattr__(self, name: str) -> MissingOp:
        if name.startswith("__"):
            raise AttributeError(name)
        return MissingOp(f"mkldnn::{name}") if "::" not in self.name else self  # an operator, then its overloads

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.name}: no such operator, this PyTorch is built without oneDNN")


def _not_compiled(name: str):
    def refuse(*args, **kwargs):
        raise RuntimeError(f"{name}: ATen not compiled with MKLDNN support")

    return refuse


def _set_qengine(engine: int) -> None:
    if engine != QNNPACK:
        raise RuntimeError(f"quantized engine {engine} is not supported here: this build has qnnpack only")


def patches() -> list[tuple[object, str, object]]:
    """``(object, attribute, value)``, applied in order (undone in reverse): the Mac build's answers."""
    return [
        # oneDNN: not built in; ATen's own switch off, so matrix products take the paths a Mac takes
        (torch.backends.mkldnn, "enabled", False),
        (torch._C, "_has_mkldnn", False),
        (torch.backends.mkldnn, "is_available", lambda: False),
        (torch.ops, "mkldnn", MissingOp()),
        *((torch._C._nn, name, _not_compiled(name)) for name in dir(torch._C._nn) if name.startswith("mkldnn_")),
        # MKL: not built in
        (torch._C, "has_mkl", False),
        (torch.backends.mkl, "is_available", lambda: False),
        # int8: qnnpack is the only engine, selected, and no other can be
        (torch.backends.quantized, "engine", "qnnpack"),
        (torch._C, "_supported_qengines", lambda: [QNNPACK]),
        (torch._C, "_set_qengine", _set_qengine),
        # an ARM CPU: none of x86's instruction sets, ATen's plain kernel path
        *((torch.cpu, name, lambda: False) for name in dir(torch.cpu) if name.endswith("_supported")),
        (torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT"),  # or "NO AVX": runtime reads both as plain
        (platform, "machine", lambda: "arm64"),
        # MPS: present (the course still trains on the CPU unless COURSE_DEVICE=mps)
        (torch.backends.mps, "is_built", lambda: True),
        (torch.backends.mps, "is_available", lambda: True),
        (torch.mps, "get_rng_state", lambda device="mps": MPS_STATE.clone()),
        (torch.mps, "set_rng_state", lambda new_state, device="mps": None),
    ]


def apply(setattr=setattr) -> None:
    """Make this process a Mac build (``setattr``: pytest's ``monkeypatch.setattr`` to undo it later)."""
    for target, name, value in patches():
        setattr(target, name, value)


def requested() -> bool:
    value = os.environ.get(ENV, "").strip().lower()
    if value not in ("", "mac"):
        raise ValueError(f"{ENV}={value!r}: the only build simulated is 'mac' (or unset it)")
    return value == "mac"
