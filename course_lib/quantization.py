"""Fewer bytes per weight: int8 and int4 weights written by hand, and the kernels that make them fast.

Generating one token at a time multiplies every weight matrix by one vector: two operations per
weight read from memory, far too few to keep a CPU's arithmetic busy. The time of a step is then
about the bytes of the weights divided by the memory bandwidth (the *floor*), and the way to go
faster is to read fewer bytes: store each weight in 8 or 4 bits instead of 32.

- :func:`quantize_int8` is symmetric absmax quantization per output channel (one scale per row,
  ``scale = max|w| / 127``, as llama.cpp's Q8_0 per block); :func:`quantize_int4` puts each group
  of ``group_size`` inputs on 16 levels between its minimum and maximum (llama.cpp's Q4_1);
  :func:`pack_int4` puts two 4-bit numbers in a byte. Each has its ``dequantize_*`` inverse: the
  round trip shows the error.
- :class:`Int8Linear`, :class:`Int4Linear` and :class:`BF16Linear` replace ``nn.Linear`` and
  :func:`quantize_model` swaps them into a copy of a model. Each has a teaching kernel,
  ``"dequantize"`` (rebuild the float weight, then multiply: correct on every device, and *slower*
  than float32, because it writes a float copy of the weight at every call), and a fast one on a CPU:
  ``"fbgemm"`` (int8 weights and activations quantized on the fly, PyTorch's x86 int8 kernel, one
  scale for the whole input; ``"fbgemm_token"``, one per token), ``"int8pack"`` (int8 weights,
  bfloat16 activations) and ``"tinygemm"`` (int4 in groups, bfloat16 activations). Which is really
  faster is measured, not assumed (notebook 14, benchmarks/inference.py).
- A CPU-specific kernel asks first: :func:`unavailable` says why this CPU cannot run one (a laptop
  without AVX-512 cannot pack bfloat16 in oneDNN; a Mac has neither oneDNN nor fbgemm), the layers
  raise :class:`NotOnThisCPU` with that reason, and :func:`quantized_versions` builds chapter 14's rows
  (:data:`FORMATS`, :data:`KERNEL_VARIANTS`) as models or as the reason they cannot run here.
- :class:`PackedLinear` changes no number format, only the layout: float32 or bfloat16 weights
  reordered once into oneDNN's blocked layout (``kernel="onednn"`` for those modes). On a CPU the
  default product of a few rows by a weight (BLAS) packs the weight again at every call; packed once,
  a decoding step reads the weights faster and a pass over 8 tokens costs little more than over 1.
- :func:`weight_bytes` and :func:`cache_bytes` count the bytes a decoding step reads and
  :func:`read_probe` measures how fast this machine reads them: their ratio is the floor
  (:func:`copy_probe`, STREAM's copy, is what the probe is checked against).
  :func:`profile_step` says where a step's time goes instead (``torch.profiler``); on a GPU,
  :func:`gpu_kernels` counts the kernels a token launches and the time they keep the GPU busy.
"""

from __future__ import annotations

import copy
import math
import os
import warnings
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import runtime
from .evaluation import PairedDifference
from .generation import cached_pass, static_pass
from .runtime import evaluating, seconds_per_call

INT8_KERNELS = ("dequantize", "fbgemm", "fbgemm_token", "int8pack")
INT4_KERNELS = ("dequantize", "tinygemm")
# torch 2.13's CPU int8pack kernel walks the inputs in whole vectors: with in_features not a multiple of
# its vector it reads past the row, so a prompt of several tokens comes out wrong or crashes the process
# (seen at 100 and 170 on AVX2 with 8 floats a vector; AVX-512's are 16 wide). 32 covers both.
INT8PACK_IN_MULTIPLE = 32
FLOAT_KERNELS = ("aten", "onednn")
MODES = ("float32", "bfloat16", "int8", "int4")


def _check_weight(weight: torch.Tensor) -> None:
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"a weight matrix must be a 2-D (out_features, in_features) tensor, got {shape}")
    if not weight.dtype.is_floating_point:
        raise TypeError(f"only float weights can be quantized, got {weight.dtype}")


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) float weight -> (N, K) int8 values and (N,) float32 scales, one per output channel:
    ``scale = max|w_row| / 127`` and ``q = round(w / scale)``, so the largest weight of each row
    becomes ±127 and 0 stays exactly 0. A row of zeros gets scale 1 (all its q are 0)."""
    _check_weight(weight)
    absmax = weight.detach().abs().amax(dim=1).float()  # (N,)
    scale = torch.where(absmax > 0, absmax / 127, torch.ones_like(absmax))  # (N,)
    q = torch.round(weight.detach().float() / scale[:, None]).clamp(-127, 127).to(torch.int8)  # (N, K)
    return q, scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(N, K) int8 and (N,) scales -> the (N, K) float32 weight they stand for."""
    return q.float() * scale[:, None]  # (N, K)


def _groups(weight: torch.Tensor, group_size: int) -> torch.Tensor:
    N, K = weight.shape
    if group_size < 1 or K % group_size:
        raise ValueError(
            f"in_features={K} is not a multiple of group_size={group_size}: each group of consecutive inputs "
            "shares a scale, so choose a group size that divides it (32 and 64 are usual)"
        )
    return weight.reshape(N, K // group_size, group_size)  # (N, K/G, G)


def quantize_int4(weight: torch.Tensor, group_size: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N, K) float weight -> (N, K) uint8 values in 0..15, and (N, K / group_size) float32 scales and
    minima: every ``group_size`` consecutive inputs of a row share a grid of 16 levels from their
    smallest to their largest weight, ``scale = (max - min) / 15`` and ``q = round((w - min) / scale)``.
    Sixteen levels are too few for a whole row (one large weight would flatten the rest), so the grid
    follows the weights group by group; it need not be symmetric, so all 16 levels are used (llama.cpp's
    Q4_1 and PyTorch's int4 kernel store weights this way)."""
    _check_weight(weight)
    groups = _groups(weight.detach().float(), group_size)  # (N, K/G, G)
    low, high = groups.amin(dim=2), groups.amax(dim=2)  # (N, K/G) each
    scale = torch.where(high > low, (high - low) / 15, torch.ones_like(low))  # (N, K/G): a flat group gets 1
    q = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.uint8)  # (N, K/G, G)
    return q.reshape(weight.shape), scale, low


def dequantize_int4(q: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor) -> torch.Tensor:
    """(N, K) values in 0..15 with (N, K / G) scales and minima -> the (N, K) float32 weight."""
    N, K = q.shape
    if scale.ndim != 2 or scale.shape[0] != N or K % scale.shape[1] or minimum.shape != scale.shape:
        raise ValueError(
            f"scales {tuple(scale.shape)} and minima {tuple(minimum.shape)} do not fit 4-bit values of shape {(N, K)}"
        )
    groups = q.float().reshape(N, scale.shape[1], -1)  # (N, K/G, G)
    return (groups * scale[..., None] + minimum[..., None]).reshape(N, K)  # (N, K)


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """(N, K) values in 0..15 -> (N, K / 2) uint8, two per byte: the even column in the low four bits,
    the odd one in the high four. Half a byte per weight is what makes int4 pay."""
    if q.ndim != 2 or q.shape[1] % 2:
        raise ValueError(f"pack_int4 needs a 2-D tensor with an even number of columns, got {tuple(q.shape)}")
    if q.device.type != "meta" and (q.min() < 0 or q.max() > 15):
        raise ValueError("4-bit values must lie in 0..15")
    q = q.to(torch.uint8)
    return q[:, 0::2] | (q[:, 1::2] << 4)  # (N, K/2)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """(N, K / 2) uint8 from :func:`pack_int4` -> the (N, K) uint8 values in 0..15."""
    low, high = packed & 0x0F, packed >> 4  # (N, K/2) each: the even and the odd columns
    return torch.stack([low, high], dim=-1).reshape(packed.shape[0], -1)  # (N, K)


def relative_error(weight: torch.Tensor, approximation: torch.Tensor) -> float:
    """||w - ŵ|| / ||w||: the size of the round-trip error relative to the weight (Frobenius norms)."""
    return ((weight.float() - approximation.float()).norm() / weight.float().norm()).item()


# --------------------------------------------------------------------------------------
# Linear layers with fewer bytes per weight
# --------------------------------------------------------------------------------------


class NotOnThisCPU(RuntimeError):
    """A kernel this CPU (or this build of PyTorch) cannot run; the message says what it lacks."""


CPU_ONLY = ("fbgemm", "fbgemm_token", "int8pack", "tinygemm", "onednn")
"""The kernels written for a CPU (every other kernel runs on any device)."""


def unavailable(mode: str, kernel: str, device: torch.device | str = "cpu") -> str | None:
    """Why ``kernel`` cannot run ``mode`` on ``device`` here, in words; None when it can. Asked of the
    hardware and of the libraries (:func:`runtime.cpu_capabilities`), never assumed: oneDNN packs
    bfloat16 weights only on a CPU with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT, fbgemm needs an x86
    CPU with AVX2, and a Mac's PyTorch has neither oneDNN nor fbgemm. The int8 weight-only and int4
    kernels (``int8pack``, ``tinygemm``) have a plain path for any CPU."""
    device = torch.device(device)
    if kernel in CPU_ONLY and device.type != "cpu":
        return f"the {kernel} kernel runs on a CPU only; the model is on {device.type}"
    if device.type != "cpu":
        return None
    has = runtime.cpu_capabilities()
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA")
    limited = f" (ONEDNN_MAX_CPU_ISA={limit} keeps it from more)" if limit else ""
    if kernel == "onednn" and not has["onednn"]:
        return "this PyTorch is built without oneDNN (as a Mac's is): use kernel='aten'"
    if kernel == "onednn" and mode == "bfloat16" and not has["onednn_bf16"]:
        return (
            "oneDNN packs bfloat16 weights only on a CPU with AVX-512 (BW, VL and DQ) or AVX-NE-CONVERT, "
            f"and finds neither here{limited}"
        )
    if kernel.startswith("fbgemm") and not has["fbgemm"]:
        engines = ", ".join(torch.backends.quantized.supported_engines) or "none"
        return f"PyTorch's x86 int8 engine (fbgemm) needs an x86 CPU with AVX2; this one offers {engines}"
    if kernel.startswith("fbgemm") and torch.backends.quantized.engine not in ("x86", "fbgemm"):
        return f"the quantized engine selected is {torch.backends.quantized.engine!r}, not x86/fbgemm"
    return None


def _require(mode: str, kernel: str, device: torch.device) -> None:
    why = unavailable(mode, kernel, device)
    if why is not None:
        error = ValueError if device.type != "cpu" else NotOnThisCPU  # a wrong device is the caller's choice
        raise error(why)


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])  # (B*T, K): the kernels take matrices


class BF16Linear(nn.Module):
    """``nn.Linear`` with its weight stored in bfloat16 (2 bytes): the input is rounded to bfloat16
    for the product, the output returned in the input's dtype."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight", linear.weight.detach().to(torch.bfloat16))  # (N, K)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x.to(torch.bfloat16), self.weight).to(x.dtype)  # (..., N)
        return y if self.bias is None else y + self.bias


class PackedLinear(nn.Module):
    """``nn.Linear`` whose float32 or bfloat16 weight is reordered once into oneDNN's blocked
    layout. ``torch.compile`` with freezing prepacks a CPU's linear layers too, but not always like
    this (torch 2.13, ``_inductor/fx_passes/mkldnn_fusion.py``): bfloat16 and float16 weights get this
    oneDNN layout, while float32 on an x86 CPU with MKL gets MKL's packed matrix product for the
    traced batch size (``mkl._mkl_linear``), oneDNN only when that size is dynamic or the graph is
    compiled ahead of time. The numbers are those of the weight in ``dtype``; only the order in
    memory changes, so that the product streams the weight once, whether it meets one row
    (decoding) or a few (a speculative check). The plain
    weight stays as the ``weight`` buffer (the state dict, :func:`weight_bytes`); the packed copy is
    an opaque oneDNN tensor beside it, made at construction, never saved."""

    def __init__(self, linear: nn.Linear, dtype: torch.dtype = torch.float32):
        super().__init__()
        weight = linear.weight
        if dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"oneDNN's packed layout is used here for float32 or bfloat16, got {dtype}")
        _require("bfloat16" if dtype == torch.bfloat16 else "float32", "onednn", weight.device)
        self.in_features, self.out_features, self.dtype = linear.in_features, linear.out_features, dtype
        self.register_buffer("weight", weight.detach().to(dtype).clone())  # (N, K)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())
        self._packed = torch.ops.mkldnn._reorder_linear_weight(self.weight, 1)  # (N, K), blocked, opaque

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.mkldnn._linear_pointwise(_flat(x).to(self.dtype), self._packed, None, "none", [], "")  # (M, N)
        y = y.reshape(*x.shape[:-1], -1).to(x.dtype)
        return y if self.bias is None else y + self.bias

    def __deepcopy__(self, memo: dict) -> PackedLinear:
        """A copy packs its own weight: the opaque oneDNN tensor cannot be copied."""
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device="meta")
        linear.weight = nn.Parameter(self.weight.clone(), requires_grad=False)
        if self.bias is not None:
            linear.bias = nn.Parameter(self.bias.clone(), requires_grad=False)
        return PackedLinear(linear, self.dtype).train(self.training)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, dtype={self.dtype}, kernel=onednn"


class Int8Linear(nn.Module):
    """``nn.Linear`` with int8 weights, one scale per output channel (:func:`quantize_int8`).

    Kernels: ``"dequantize"`` rebuilds the float weight and multiplies (any device; the teaching
    path); ``"fbgemm"`` quantizes the input too, the whole input with one scale and zero point, to 7-bit
    unsigned integers, and multiplies int8 by uint8 in PyTorch's x86 kernel (the weights packed once,
    at construction); ``"fbgemm_token"`` is the same kernel called token by token, so that each token
    has its own scale (as serving engines quantize activations); ``"int8pack"`` keeps the input in
    bfloat16 and multiplies it by the int8 weight (weight-only; in_features a multiple of
    ``INT8PACK_IN_MULTIPLE``, which PyTorch's kernel does not check). ``"auto"``: int8pack on a CPU
    where it fits, else dequantize. fbgemm is faster, but its one scale for the whole input is one scale per token only
    when decoding; over a prompt, a few huge activations flatten the rest (notebook 14 measures both).
    """

    def __init__(self, linear: nn.Linear, kernel: str = "auto"):
        super().__init__()
        weight = linear.weight
        fits = weight.shape[1] % INT8PACK_IN_MULTIPLE == 0
        if kernel == "auto":
            kernel = "int8pack" if weight.device.type == "cpu" and fits else "dequantize"
        if kernel not in INT8_KERNELS:
            raise ValueError(f"unknown int8 kernel {kernel!r}; choose one of auto, {', '.join(INT8_KERNELS)}")
        _require("int8", kernel, weight.device)
        if kernel == "int8pack" and not fits:
            raise ValueError(
                f"the int8pack kernel needs in_features divisible by {INT8PACK_IN_MULTIPLE}, got {weight.shape[1]}"
            )
        self.in_features, self.out_features, self.kernel = linear.in_features, linear.out_features, kernel
        q, scale = quantize_int8(weight)
        self.register_buffer("weight", q)  # (N, K) int8
        self.register_buffer("scale", scale)  # (N,)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())
        self._packed = None
        if kernel.startswith("fbgemm"):  # the same int8 numbers, laid out for fbgemm's kernel once
            zero_points = torch.zeros(q.shape[0], dtype=torch.long)
            with warnings.catch_warnings():  # torch 2.13 deprecates quantized tensors (torchao succeeds them)
                warnings.simplefilter("ignore", UserWarning)
                qtensor = torch._make_per_channel_quantized_tensor(q, scale.double(), zero_points, 0)
                self._packed = torch.ops.quantized.linear_prepack(qtensor, self.bias)
        elif kernel == "int8pack":
            self.register_buffer("scale_bf16", scale.to(torch.bfloat16), persistent=False)  # (N,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel.startswith("fbgemm"):
            rows = _flat(x).float()  # (M, K)
            if self.kernel == "fbgemm_token" and rows.shape[0] > 1:  # one scale per token: a call per row
                y = torch.cat([torch.ops.quantized.linear_dynamic(row[None], self._packed, True) for row in rows])
            else:
                y = torch.ops.quantized.linear_dynamic(rows, self._packed, True)  # (M, N), bias included
            return y.reshape(*x.shape[:-1], -1).to(x.dtype)
        if self.kernel == "int8pack":
            y = torch._weight_int8pack_mm(_flat(x).to(torch.bfloat16), self.weight, self.scale_bf16)  # (M, N)
            y = y.reshape(*x.shape[:-1], -1).to(x.dtype)
            return y if self.bias is None else y + self.bias
        return F.linear(x, dequantize_int8(self.weight, self.scale).to(x.dtype), self.bias)  # (..., N)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, kernel={self.kernel}"


class Int4Linear(nn.Module):
    """``nn.Linear`` with 4-bit weights in groups of ``group_size`` inputs (:func:`quantize_int4`).

    Kernels: ``"dequantize"`` keeps the weights packed two per byte (:func:`pack_int4`), unpacks
    and rescales them at every call, then multiplies (any device); ``"tinygemm"`` stores them in
    the layout of PyTorch's CPU int4 kernel (``_weight_int4pack_mm_for_cpu``), which unpacks inside
    the product, with bfloat16 inputs. ``"auto"``: tinygemm on a CPU, else dequantize.
    """

    def __init__(self, linear: nn.Linear, group_size: int = 32, kernel: str = "auto"):
        super().__init__()
        weight = linear.weight
        if kernel == "auto":
            fits = weight.shape[0] % 16 == 0  # the kernel's layout takes output features in tiles of 16
            kernel = "tinygemm" if weight.device.type == "cpu" and fits else "dequantize"
        if kernel not in INT4_KERNELS:
            raise ValueError(f"unknown int4 kernel {kernel!r}; choose one of auto, {', '.join(INT4_KERNELS)}")
        _require("int4", kernel, weight.device)
        if kernel == "tinygemm" and weight.shape[0] % 16:
            raise ValueError(f"the tinygemm kernel needs out_features divisible by 16, got {weight.shape[0]}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.group_size, self.kernel = group_size, kernel
        q, scale, minimum = quantize_int4(weight, group_size)  # (N, K), (N, K/G), (N, K/G)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())
        if kernel == "tinygemm":
            # the kernel computes (q - 8) * scale + zero: our q * scale + minimum when zero = minimum + 8 * scale
            self.register_buffer("weight", torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1))
            zero = minimum + 8 * scale  # (N, K/G)
            self.register_buffer("scale", torch.stack([scale.t(), zero.t()], dim=-1).to(torch.bfloat16))  # (K/G, N, 2)
        else:
            self.register_buffer("weight", pack_int4(q))  # (N, K/2) uint8
            self.register_buffer("scale", scale)  # (N, K/G)
            self.register_buffer("minimum", minimum)  # (N, K/G)

    def _tinygemm(self, x: torch.Tensor) -> torch.Tensor:
        y = torch._weight_int4pack_mm_for_cpu(_flat(x).to(torch.bfloat16), self.weight, self.group_size, self.scale)
        return y.reshape(*x.shape[:-1], -1).to(x.dtype)  # (..., N)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel == "tinygemm":
            y = self._tinygemm(x)
            return y if self.bias is None else y + self.bias
        weight = dequantize_int4(unpack_int4(self.weight), self.scale, self.minimum)  # (N, K), at every call
        return F.linear(x, weight.to(x.dtype), self.bias)

    def dequantized(self) -> torch.Tensor:
        """The (N, K) float32 weight this layer multiplies by (either layout)."""
        if self.kernel == "tinygemm":
            eye = torch.eye(self.in_features, device=self.weight.device)  # (K, K): the product reads the weight out
            return self._tinygemm(eye).t().float()
        return dequantize_int4(unpack_int4(self.weight), self.scale, self.minimum)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"group_size={self.group_size}, kernel={self.kernel}"
        )


QUANTIZED = (BF16Linear, PackedLinear, Int8Linear, Int4Linear)


def _replacement(linear: nn.Linear, mode: str, kernel: str, group_size: int) -> nn.Module:
    if mode in ("float32", "bfloat16") and kernel == "onednn":
        return PackedLinear(linear, getattr(torch, mode))
    if mode == "float32":
        return linear
    if mode == "bfloat16":
        return BF16Linear(linear)
    if mode == "int8":
        return Int8Linear(linear, kernel)
    return Int4Linear(linear, group_size, kernel)


def quantize_model(
    model: nn.Module, mode: str, *, kernel: str = "auto", group_size: int = 32, head: str | None = None
) -> nn.Module:
    """A copy of ``model`` (in eval mode) whose ``nn.Linear`` layers store their weights in ``mode``:
    ``"float32"`` (an unchanged copy), ``"bfloat16"``, ``"int8"`` or ``"int4"`` (groups of
    ``group_size``). ``head`` gives the LM head another mode (default: the same), as llama.cpp's
    4-bit files keep the output layer in 8 bits. Embeddings, norms and everything else stay as they
    are; a head tied to the embedding becomes a layer of its own, the embedding table staying float.
    ``kernel`` picks the int8 or int4 kernel (:class:`Int8Linear`, :class:`Int4Linear`; it applies to
    the head too when that is of the same kind); for float32 and bfloat16, ``kernel="onednn"``
    keeps the numbers and packs the weights (:class:`PackedLinear`). Quantize on the device the
    model will run on: the fast kernels' layouts are made for the CPU."""
    for name, value in (("mode", mode), ("head", mode if head is None else head)):
        if value not in MODES:
            raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(MODES)}")
    if kernel not in ("auto", *FLOAT_KERNELS) and mode in ("float32", "bfloat16"):
        raise ValueError(
            f"mode {mode!r} has the kernels auto, {', '.join(FLOAT_KERNELS)}; {kernel!r} is for int8 or int4"
        )
    quantized = copy.deepcopy(model).eval()
    head_module = getattr(quantized, "lm_head", None)
    for module in list(quantized.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                this = mode if child is not head_module or head is None else head
                this_kernel = kernel if this == mode else "auto"
                setattr(module, name, _replacement(child, this, this_kernel, group_size))
    return quantized


QUALITY_MARGIN = 1.01
"""Chapter 14's margin on quality: a format may cost at most 1% in held-out perplexity."""


def within_margin(loss_gap: PairedDifference, margin: float = QUALITY_MARGIN) -> bool:
    """Chapter 14's one quality rule (the notebook's choice and benchmarks/inference.py's goal):
    ``loss_gap`` is a format's held-out loss minus float32's, paired window by window (nats per
    token, :func:`evaluation.paired_difference`); the format is within the margin when the upper end
    of its interval, as a perplexity ratio (``exp(high)``), stays below ``margin``. The upper end, not
    the point estimate: no measurement shows a loss to be 0, but one can show it below a margin set
    beforehand, and a point estimate below the margin with an interval reaching past it shows
    nothing."""
    return math.exp(loss_gap.high) < margin


FORMATS = {  # chapter 14's formats, compared on quality: name -> (mode, kernel, head)
    "float32": ("float32", "auto", None),
    "bfloat16": ("bfloat16", "auto", None),
    "int8": ("int8", "auto", None),
    "int4, int8 head": ("int4", "auto", "int8"),
    "int4 everywhere": ("int4", "auto", None),
}
KERNEL_VARIANTS = {  # and the other kernels its speed table adds
    "int8, dequantize in Python": ("int8", "dequantize", None),
    "int8, fbgemm": ("int8", "fbgemm", None),
    "float32, oneDNN packed": ("float32", "onednn", None),
    "bfloat16, oneDNN packed": ("bfloat16", "onednn", None),
}


def quantized_versions(model: nn.Module, rows: dict[str, tuple[str, str, str | None]]) -> dict[str, nn.Module | str]:
    """Each row (name -> ``(mode, kernel, head)``, as :data:`FORMATS`) as a copy of ``model`` quantized on
    its device, or, where this machine cannot run the row's kernel, the reason in words (a ``str``:
    :func:`unavailable`). Float32 with the default kernel is ``model`` itself. A table built from this
    shows every row a student's machine can run and says why of the others."""
    device = runtime.model_device(model)
    versions = {}
    for name, (mode, kernel, head) in rows.items():
        why = unavailable(mode, kernel, device)
        if why:
            versions[name] = why
        elif (mode, kernel, head) == ("float32", "auto", None):
            versions[name] = model
        else:
            versions[name] = quantize_model(model, mode, kernel=kernel, head=head)
    return versions


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the weight matrices one decoding step reads: every linear layer's weight, scales and
    bias, in whatever format it is stored (a tensor shared by two layers counted once). Embedding
    tables (a step reads one row of them), norms (a few kB) and the KV cache are not counted."""
    seen, total = set(), 0
    for module in model.modules():
        if isinstance(module, (nn.Linear, *QUANTIZED)):
            persistent = [
                b for n, b in module.named_buffers(recurse=False) if n not in module._non_persistent_buffers_set
            ]
            for tensor in [*module.parameters(recurse=False), *persistent]:  # a derived copy is not counted
                key = id(tensor) if tensor.device.type == "meta" else tensor.data_ptr()  # meta: no storage
                if key not in seen:
                    seen.add(key)
                    total += tensor.numel() * tensor.element_size()
    return total


def cache_bytes(model: nn.Module, positions: float) -> float:
    """Bytes of cached keys and values one sequence reads per step with ``positions`` tokens cached
    (every layer's keys and values, its key/value heads only, in the embedding's dtype)."""
    c = model.config
    element = model.transformer.wte.weight.element_size()
    return 2 * c.n_layers * c.kv_heads * c.head_dim * positions * element


PROBE_MIN_BYTES = 2**22
"""The smallest working set :func:`read_probe` reads (4 MiB): below that, one call is too short to time."""


def _probe_buffer(nbytes: int, device: torch.device | str) -> torch.Tensor:
    return torch.ones(max(int(nbytes), PROBE_MIN_BYTES) // 4096, 1024, device=device)  # (rows, 1024) float32


def read_probe(nbytes: int, device: torch.device | str = "cpu") -> tuple[Callable[[], torch.Tensor], int]:
    """``(run, bytes)``: the course's one read-bandwidth probe (notebook 14 and both decoding
    benchmarks use it), so that ``bytes / seconds per run`` is the read bandwidth its floors divide by.

    - *What it reads*: a float32 buffer of ``nbytes`` (whole rows of 4 KiB, at least
      :data:`PROBE_MIN_BYTES`), every byte once per run, by one ``torch.sum`` (a reduction streams its
      input and writes one number). Always the same kernel, on every device: the probe never picks
      among kernels by timing them, so two programs on one machine measure the same thing.
    - *How often*: once per run; time its runs as the decoding they bound is timed (the benchmarks:
      in the same alternating rounds, ``reference.alternate``; the notebook: ``seconds_per_call``,
      on the same threads).
    - *Which working set*: pass the bytes one decoding step reads (:func:`weight_bytes`), so that the
      probe reads from where the step reads: from memory for SmolLM2's 538 MB, from the caches for a
      model that fits in them.

    Checked against :func:`copy_probe` (STREAM's copy) in benchmarks/inference.py: a read-only probe
    that reads more slowly than a copy moves bytes would give a floor that a kernel can beat."""
    matrix = _probe_buffer(nbytes, device)
    return matrix.sum, matrix.numel() * 4


def copy_probe(nbytes: int, device: torch.device | str = "cpu") -> tuple[Callable[[], torch.Tensor], int]:
    """``(run, bytes)``: STREAM's *copy* kernel (``a[i] = b[i]``) over two float32 buffers of
    :func:`read_probe`'s size, with the bytes counted as STREAM counts them: each run reads one
    buffer and writes the other, ``2 * size``. The reference the read probe is checked against."""
    source = _probe_buffer(nbytes, device)
    target = torch.empty_like(source)
    return lambda: target.copy_(source), 2 * source.numel() * 4


MATRIX_OPS = (  # the operators that multiply by a linear layer's weight, in each format and kernel
    "aten::mm",
    "aten::addmm",
    "aten::_weight_int8pack_mm",
    "aten::_weight_int4pack_mm_for_cpu",
    "mkldnn::_linear_pointwise",
    "quantized::linear_dynamic",
)
COMPILED_WRAPPERS = (  # what torch.profiler records around a compiled graph: not operators, but Python
    "Torch-Compiled Region",
    "TorchDynamo Cache Lookup",
    "Pregraph bytecode",
    "AOTDispatcher",
)


@torch.no_grad()
def profile_step(
    model: nn.Module, prompt, steps: int = 10, step: Callable | None = None, slots: int | None = None
) -> dict[str, float]:
    """Where one decoding step goes, in milliseconds per step after ``prompt`` (token ids) is
    cached: the linear layers' matrix products (:data:`MATRIX_OPS`), attention, every other
    operator (norms, rotations, the cache, conversions; in a compiled step, the kernels inductor
    generated, one ``Call CompiledFxGraph`` event), each by ``torch.profiler``'s self time, and what
    is outside any operator (Python, modules, PyTorch's dispatch; a compiled step's guards and
    wrappers, :data:`COMPILED_WRAPPERS`): the step's wall time without the profiler, less the rest.
    The step is :func:`generate`'s over the teaching cache, or, with ``step`` (``decode_step`` or
    ``compiled_step()``), :func:`generate_batch`'s over a static cache of ``slots`` (``static_pass``).
    Numbers to print, never to assert."""
    from torch.profiler import ProfilerActivity, profile

    with evaluating(model):
        run = cached_pass(model, prompt) if step is None else static_pass(model, prompt, step, slots)
        wall = seconds_per_call(run, timings=5) * 1e3
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            for _ in range(steps):
                run()
    times = {"matrix products": 0.0, "attention": 0.0, "other operators": 0.0}
    for event in profiler.key_averages():
        if event.key.startswith(COMPILED_WRAPPERS):  # guards and wrappers around a graph: host work
            continue
        if event.key in MATRIX_OPS:
            kind = "matrix products"
        else:
            kind = "attention" if "scaled_dot_product" in event.key else "other operators"
        times[kind] += event.self_cpu_time_total / 1e3 / steps  # microseconds -> ms per step
    times["outside operators"] = max(0.0, wall - sum(times.values()))
    return times


KERNEL_FAMILIES = (  # (family, what its kernels' names contain), asked in this order; the rest is "other"
    ("generated (Triton)", ("triton_",)),  # inductor's fused kernels, named after what they fuse (attention's mask too)
    ("attention", ("fmha", "attention", "sdpa", "flash")),
    ("matrix products", ("gemv", "gemm", "nvjet", "xmma", "cublas", "cutlass")),
    ("copies", ("memcpy", "memset")),
)


def kernel_family(name: str) -> str:
    """The family of a GPU kernel, from the name ``torch.profiler`` records for it."""
    lowered = name.lower()
    for family, marks in KERNEL_FAMILIES:
        if any(mark in lowered for mark in marks):
            return family
    return "other"


def gpu_kernels(run: Callable[[], object], tokens: int, device: torch.device | str) -> dict[str, object]:
    """What a GPU does for one call of ``run`` (after a warm-up call), per token of the ``tokens`` the
    call decodes: ``wall`` (ms, measured without the profiler), ``busy`` (ms the GPU spends inside
    kernels, by ``torch.profiler``'s CUDA activity), ``kernels`` (how many, each kernel of a replayed
    CUDA graph counted) and ``families`` ({family: (kernels, ms)}, :data:`KERNEL_FAMILIES`).

    Why: a small model at batch 1 reads its weights in far less time than the GPU spends starting
    its kernels one after the other. ``wall - busy`` is the time the GPU waits: for the host (launches,
    Python, a synchronisation), or, inside a CUDA graph, between two dependent kernels. Numbers to
    print, never to assert."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"gpu_kernels counts CUDA kernels; {device} has none (use profile_step on a CPU)")
    if tokens < 1:
        raise ValueError(f"tokens must be at least 1, got {tokens}")
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    def call() -> None:
        run()
        torch.cuda.synchronize(device)

    wall = seconds_per_call(call, timings=5) * 1e3 / tokens
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        call()
    families: dict[str, tuple[int, float]] = {}
    for event in profiler.events():
        if event.device_type != DeviceType.CUDA:
            continue
        family = kernel_family(event.name)
        count, ms = families.get(family, (0, 0.0))
        families[family] = (count + 1, ms + event.time_range.elapsed_us() / 1e3)
    families = {family: (count / tokens, ms / tokens) for family, (count, ms) in families.items()}
    busy = sum(ms for _, ms in families.values())
    return {"wall": wall, "busy": busy, "kernels": sum(n for n, _ in families.values()), "families": families}
