"""int8 and int4 weights: by-hand values, round trips, torchao's quantization as the reference,
every kernel against the teaching path, whole models, bytes read, and bad input."""

import copy
import math
import re
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_lib import runtime
from course_lib.generation import decode_step, generate, generate_batch
from course_lib.quantization import (
    FORMATS,
    KERNEL_VARIANTS,
    QUALITY_MARGIN,
    BF16Linear,
    Int4Linear,
    Int8Linear,
    NotOnThisCPU,
    PackedLinear,
    cache_bytes,
    copy_probe,
    dequantize_int4,
    dequantize_int8,
    gpu_kernels,
    kernel_family,
    pack_int4,
    profile_step,
    quantize_int4,
    quantize_int8,
    quantize_model,
    quantized_versions,
    read_probe,
    relative_error,
    unavailable,
    unpack_int4,
    weight_bytes,
    within_margin,
)

FBGEMM = unavailable("int8", "fbgemm")  # None where this CPU runs fbgemm, else why not
PACKED = {dtype: unavailable(str(dtype).removeprefix("torch."), "onednn") for dtype in (torch.float32, torch.bfloat16)}


@pytest.fixture
def linear(generator):
    """A (48, 64) layer with a bias and weights of a trained model's size (N(0, 0.02))."""
    layer = nn.Linear(64, 48)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(48, 64, generator=generator) * 0.02)
        layer.bias.copy_(torch.randn(48, generator=generator) * 0.01)
    return layer


def torchao_primitives():
    """torchao (test-only) is the reference; its import prints deprecation notes we do not need."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("torchao.quantization.quant_primitives")


# == by hand ===============================================================================


def test_int8_by_hand():
    w = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [0.25, 0.1, -0.05]])
    q, scale = quantize_int8(w)
    assert torch.allclose(scale, torch.tensor([2 / 127, 1.0, 0.25 / 127]))
    # 1 / (2/127) = 63.5 rounds to the even 64; the largest magnitude is exactly -127
    assert q.tolist() == [[64, -127, 32], [0, 0, 0], [127, 51, -25]]
    assert q.dtype == torch.int8
    assert torch.equal(dequantize_int8(q, scale)[1], torch.zeros(3))  # zero stays exactly zero


def test_int4_by_hand():
    w = torch.tensor([[0.0, 1.5, 3.0, 0.2], [-1.0, -1.0, -1.0, -1.0]])
    q, scale, minimum = quantize_int4(w, group_size=4)
    assert torch.allclose(scale, torch.tensor([[0.2], [1.0]])) and torch.allclose(
        minimum, torch.tensor([[0.0], [-1.0]])
    )
    assert q.tolist() == [[0, 8, 15, 1], [0, 0, 0, 0]]  # 1.5 / 0.2 = 7.5 rounds to 8; a flat group is exact
    assert torch.allclose(dequantize_int4(q, scale, minimum), torch.tensor([[0.0, 1.6, 3.0, 0.2], [-1.0] * 4]))


def test_pack_int4_by_hand_and_round_trip(generator):
    assert pack_int4(torch.tensor([[1, 2, 15, 0]])).tolist() == [[0x21, 0x0F]]  # even column in the low bits
    q = torch.randint(0, 16, (7, 10), generator=generator, dtype=torch.uint8)
    packed = pack_int4(q)
    assert packed.shape == (7, 5) and packed.dtype == torch.uint8
    assert torch.equal(unpack_int4(packed), q)


@pytest.mark.parametrize("bits", [8, 4])
def test_round_trip_error_is_within_half_a_step(bits, generator):
    w = torch.randn(32, 128, generator=generator) * 0.02
    if bits == 8:
        q, scale = quantize_int8(w)
        step = scale[:, None].expand_as(w)
        back = dequantize_int8(q, scale)
    else:
        q, scale, minimum = quantize_int4(w, 32)
        step = scale.repeat_interleave(32, dim=1)
        back = dequantize_int4(q, scale, minimum)
    assert ((w - back).abs() <= step / 2 + 1e-7).all()
    assert relative_error(w, back) < (0.01 if bits == 8 else 0.1)


def test_int4_groups_follow_the_weights(generator):
    """One large weight flattens its own group only: with groups of 32 the other groups keep
    their resolution, with one group per row (128) every weight of the row loses it."""
    w = torch.randn(4, 128, generator=generator) * 0.02
    w[:, 0] = 1.0
    errors = {g: relative_error(w[:, 32:], dequantize_int4(*quantize_int4(w, g))[:, 32:]) for g in (32, 128)}
    assert errors[32] < errors[128] / 5


# == torchao as the reference ==============================================================


def test_int8_values_are_torchao_quantize_affine_with_our_scales(generator):
    prims = torchao_primitives()
    w = torch.randn(16, 96, generator=generator)
    q, scale = quantize_int8(w)
    theirs = prims.quantize_affine(
        w, [1, 96], scale[:, None], torch.zeros(16, 1, dtype=torch.int8), torch.int8, -127, 127
    )
    assert torch.equal(q, theirs)


def test_int4_matches_torchao_tinygemm_scheme(generator):
    """torchao's int4 for PyTorch's int4 kernel (tinygemm) is the same min-max grid: its zero is
    stored as min + 8 * scale, the kernel subtracting 8 from each value."""
    prims = torchao_primitives()
    w = torch.randn(24, 128, generator=generator) * 0.05
    q, scale, minimum = quantize_int4(w, 32)
    their_scale, their_zero = prims._choose_qparams_affine_tinygemm(
        w, prims.MappingType.ASYMMETRIC, [1, 32], torch.uint8, 0, 15, None, torch.float32, torch.float32
    )
    assert torch.allclose(scale, their_scale, rtol=1e-6) and torch.allclose(minimum + 8 * scale, their_zero, atol=1e-7)
    theirs = prims._quantize_affine_tinygemm(w, [1, 32], their_scale, their_zero, torch.uint8, 0, 15)
    assert (q.int() - theirs.int()).abs().max() <= 1  # equal but where float rounding sits on a half
    assert (q.int() != theirs.int()).float().mean() < 1e-3


def test_int8_layer_agrees_with_torchao_int8_weight_only(linear, generator):
    """torchao's int8 weight-only layer uses scale max|w| / 127.5 on [-128, 127], ours / 127 on
    [-127, 127]: both must land within one quantization step of the float layer, and near each other."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torchao = pytest.importorskip("torchao")
        from torchao.quantization import Int8WeightOnlyConfig
    x = torch.randn(5, 64, generator=generator)
    reference = linear(x)
    theirs = nn.Linear(64, 48)
    theirs.load_state_dict(linear.state_dict())
    torchao.quantization.quantize_(theirs, Int8WeightOnlyConfig())
    ours = Int8Linear(linear, kernel="dequantize")
    bound = (x.abs().sum(dim=1, keepdim=True) * ours.scale[None, :] / 2).max()  # |x| · step / 2
    with torch.no_grad():
        assert (ours(x) - reference).abs().max() <= bound
        assert (theirs(x) - reference).abs().max() <= bound
        assert (ours(x) - theirs(x)).abs().max() <= 2 * bound


# == the kernels compute what the teaching path computes ===================================


def test_int8_kernels_agree(linear, generator):
    x = torch.randn(3, 7, 64, generator=generator)
    teaching = Int8Linear(linear, kernel="dequantize")
    int8pack = Int8Linear(linear, kernel="int8pack")
    assert torch.equal(int8pack.weight, teaching.weight) and int8pack.kernel == "int8pack"
    with torch.no_grad():
        expected = teaching(x)
        assert expected.shape == (3, 7, 48)
        assert (int8pack(x) - expected).abs().max() < 0.01 * expected.abs().max()  # bfloat16 inputs and outputs
        if FBGEMM is None:  # the input quantized too (7 bits per row): a looser match
            fbgemm = Int8Linear(linear, kernel="fbgemm")
            assert (fbgemm(x[0, :1]) - expected[0, :1]).abs().max() < 0.03 * expected.abs().max()


@pytest.mark.skipif(FBGEMM is not None, reason=str(FBGEMM))
def test_fbgemm_per_token_keeps_each_token_apart(linear, generator):
    """One token with activations 1000 times larger (an outlier, as real models have): with one
    scale for the whole input the other tokens round to almost nothing; with a scale per token
    each is as accurate as it is alone, and alone both kernels are the same call."""
    x = torch.randn(6, 64, generator=generator)
    x[2] *= 1000
    exact = F.linear(x, dequantize_int8(*quantize_int8(linear.weight))) + linear.bias  # (6, 48)
    whole, per_token = Int8Linear(linear, kernel="fbgemm"), Int8Linear(linear, kernel="fbgemm_token")
    others = [0, 1, 3, 4, 5]
    with torch.no_grad():
        err = lambda y: ((y - exact)[others].norm() / exact[others].norm()).item()  # noqa: E731
        assert err(per_token(x)) < 0.02 < 0.5 < err(whole(x))
        assert torch.equal(per_token(x[:1]), whole(x[:1]))  # one token: one scale either way
        alone = torch.cat([whole(x[i : i + 1]) for i in range(6)])
        assert torch.equal(per_token(x.reshape(2, 3, 64)), alone.reshape(2, 3, 48))


def test_int8_default_kernel_is_weight_only_on_a_cpu(linear):
    assert Int8Linear(linear).kernel == "int8pack" and Int4Linear(linear).kernel == "tinygemm"
    odd = nn.Linear(64, 40)  # 40 outputs: not in the int4 kernel's tiles of 16
    assert Int4Linear(odd).kernel == "dequantize"
    with pytest.raises(ValueError, match="divisible by 16"):
        Int4Linear(odd, kernel="tinygemm")


def test_int8_weight_only_kernel_is_kept_off_the_widths_it_reads_past(generator):
    """PyTorch's int8pack kernel reads its inputs in whole vectors and does not check the width: with
    in_features 100 a prompt of several tokens came out wrong or crashed the process. Such a layer
    takes the teaching path by default (the same numbers), and asking for the kernel says why not."""
    odd = nn.Linear(100, 64)
    layer = Int8Linear(odd)
    assert layer.kernel == "dequantize" and Int8Linear(nn.Linear(96, 64)).kernel == "int8pack"
    x = torch.randn(3, 100, generator=generator)
    with torch.no_grad():
        expected = F.linear(x, dequantize_int8(*quantize_int8(odd.weight)), odd.bias)
        assert torch.allclose(layer(x), expected, atol=1e-5)
    with pytest.raises(ValueError, match="int8pack kernel needs in_features divisible by 32, got 100"):
        Int8Linear(odd, kernel="int8pack")


def test_int4_kernels_agree(linear, generator):
    x = torch.randn(2, 5, 64, generator=generator)
    teaching, fast = Int4Linear(linear, 32, "dequantize"), Int4Linear(linear, 32, "tinygemm")
    with torch.no_grad():
        assert (fast(x) - teaching(x)).abs().max() < 0.01 * teaching(x).abs().max()  # bfloat16
        assert torch.allclose(fast.dequantized(), teaching.dequantized(), rtol=0.01, atol=1e-3)
    assert teaching.weight.shape == (48, 32)  # two 4-bit weights per byte


def test_bf16_layer_is_a_bfloat16_product(linear, generator):
    x = torch.randn(4, 64, generator=generator)
    layer = BF16Linear(linear)
    assert layer.weight.dtype == torch.bfloat16
    with torch.no_grad():
        expected = F.linear(x.bfloat16(), linear.weight.bfloat16()).float() + linear.bias
        assert torch.allclose(layer(x), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_layer_changes_the_layout_not_the_numbers(linear, generator, dtype):
    """oneDNN's packed weight gives the product F.linear gives with the same weight, for one row
    (decoding) and for several (a speculative check), with and without a bias; where oneDNN cannot pack
    it (bfloat16 on a laptop without AVX-512; anything on a Mac, whose PyTorch has no oneDNN), the layer
    refuses, saying why."""
    if PACKED[dtype] is not None:
        with pytest.raises(NotOnThisCPU, match=re.escape(PACKED[dtype])):
            PackedLinear(linear, dtype)
        return
    layer = PackedLinear(linear, dtype)
    assert layer.weight.dtype == dtype and layer.bias.dtype == torch.float32
    with torch.no_grad():
        for x in (torch.randn(1, 64, generator=generator), torch.randn(2, 7, 64, generator=generator)):
            expected = F.linear(x.to(dtype), linear.weight.to(dtype)).float() + linear.bias
            got = layer(x)
            assert got.shape == (*x.shape[:-1], 48) and got.dtype == torch.float32
            assert torch.allclose(got, expected, rtol=1e-5 if dtype == torch.float32 else 1e-2, atol=1e-6)
    unbiased = nn.Linear(64, 48, bias=False)
    with torch.no_grad():
        assert torch.allclose(PackedLinear(unbiased)(x), unbiased(x), atol=1e-6)


@pytest.mark.skipif(PACKED[torch.float32] is not None, reason=str(PACKED[torch.float32]))
def test_packed_layer_copies_and_counts_its_weight_once(linear, generator):
    layer = PackedLinear(linear)
    twin = copy.deepcopy(layer)  # packs its own weight: an opaque oneDNN tensor cannot be copied
    x = torch.randn(3, 64, generator=generator)
    with torch.no_grad():
        assert torch.equal(twin(x), layer(x)) and twin.weight.data_ptr() != layer.weight.data_ptr()
    assert set(layer.state_dict()) == {"weight", "bias"}  # the packed copy is never saved
    assert weight_bytes(layer) == 4 * (48 * 64 + 48)  # the plain weight, not twice


# == whole models ==========================================================================


@pytest.mark.parametrize("mode, tolerance", [("bfloat16", 0.02), ("int8", 0.03), ("int4", 0.3)])
def test_quantized_model_stays_close_and_generates(tiny_gpt, mode, tolerance, one_thread):
    model = tiny_gpt(0).eval()
    quantized = quantize_model(model, mode)
    kinds = {type(m) for m in quantized.modules()}
    assert nn.Linear not in kinds and {"bfloat16": BF16Linear, "int8": Int8Linear, "int4": Int4Linear}[mode] in kinds
    assert type(model.lm_head) is nn.Linear  # the original is left as it was
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference, logits = model(ids), quantized(ids)
    assert (logits - reference).abs().max() < tolerance * reference.abs().max()
    out = generate(quantized, ids[:1], 5, greedy=True)
    assert out.shape == (1, 17)


def test_float32_mode_is_an_equal_copy(tiny_gpt, same_weights):
    model = tiny_gpt(0)
    copy = quantize_model(model, "float32")
    assert copy is not model and same_weights(copy, model) and not copy.training
    assert copy.lm_head.weight is copy.transformer.wte.weight  # still tied


@pytest.mark.parametrize("mode", ["float32", "bfloat16"])
def test_packed_model_decodes_as_the_plain_one(tiny_gpt, mode, one_thread):
    model = tiny_gpt(0).eval()
    if unavailable(mode, "onednn") is not None:
        with pytest.raises(NotOnThisCPU, match=re.escape(unavailable(mode, "onednn"))):
            quantize_model(model, mode, kernel="onednn")
        return
    plain, packed = quantize_model(model, mode), quantize_model(model, mode, kernel="onednn")
    assert all(type(m) is not nn.Linear for m in packed.modules())
    assert isinstance(packed.lm_head, PackedLinear) and packed.lm_head.dtype == getattr(torch, mode)
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(packed(ids), plain(ids), rtol=1e-4 if mode == "float32" else 1e-2, atol=1e-4)
    if mode == "float32":
        assert torch.equal(generate(packed, ids[:1], 8, greedy=True), generate(plain, ids[:1], 8, greedy=True))


def test_the_head_can_keep_more_bits(tiny_gpt):
    quantized = quantize_model(tiny_gpt(0), "int4", head="int8")
    assert isinstance(quantized.lm_head, Int8Linear) and isinstance(quantized.transformer.h[0].mlp.c_fc, Int4Linear)
    assert isinstance(quantized.transformer.wte, nn.Embedding)  # the table the head was tied to stays float


def test_weight_bytes_counts_what_a_step_reads(tiny_gpt):
    model = tiny_gpt(0)  # vocabulary 40, width 32, 2 layers, tied head, biases
    matrices = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    biases = sum(m.bias.numel() for m in model.modules() if isinstance(m, nn.Linear) and m.bias is not None)
    assert weight_bytes(model) == 4 * (matrices + biases)
    int8 = quantize_model(model, "int8")
    rows = sum(m.out_features for m in int8.modules() if isinstance(m, Int8Linear))
    assert weight_bytes(int8) == matrices + 4 * rows + 4 * biases  # 1 byte a weight, a float scale a row
    int4 = quantize_model(model, "int4", kernel="dequantize")
    assert weight_bytes(int4) == matrices // 2 + 2 * 4 * matrices // 32 + 4 * biases  # scale and minimum a group
    assert weight_bytes(quantize_model(model, "bfloat16")) == 2 * matrices + 4 * biases


def test_quantized_model_runs_on_the_meta_device(tiny_gpt):
    """Every tensor the layers build follows their weights: on the meta device (shapes only) the
    teaching kernels run, and the CPU kernels refuse clearly."""
    with torch.device("meta"):
        model = tiny_gpt(0)
    ids = torch.zeros(1, 5, dtype=torch.long, device="meta")
    for mode in ("bfloat16", "int8", "int4"):
        quantized = quantize_model(model, mode)
        logits = quantized(ids)
        assert logits.device.type == "meta" and logits.shape == (1, 5, 40)
    with pytest.raises(ValueError, match="int8pack kernel runs on a CPU only; the model is on meta"):
        quantize_model(model, "int8", kernel="int8pack")
    with pytest.raises(ValueError, match="tinygemm kernel runs on a CPU only"):
        quantize_model(model, "int4", kernel="tinygemm")
    with pytest.raises(ValueError, match="onednn kernel runs on a CPU only"):
        quantize_model(model, "float32", kernel="onednn")


# == what each CPU can run =================================================================


@pytest.mark.parametrize(
    "machine, refused",
    [
        ("laptop", {"bfloat16, oneDNN packed": "AVX-512"}),
        (
            "mac",
            {
                "bfloat16, oneDNN packed": "without oneDNN",
                "float32, oneDNN packed": "without oneDNN",
                "int8, fbgemm": "x86 int8 engine (fbgemm)",
            },
        ),
    ],
)
def test_every_row_of_chapter_14_runs_or_says_why_not(tiny_gpt, monkeypatch, request, machine, refused, one_thread):
    """Chapter 14's rows on a CPU without what its fast kernels need: an AVX2 laptop (the probes patched:
    oneDNN packs no bfloat16 there) and a Mac (its build of PyTorch imitated, tests/mac_build.py: the probes
    say what it lacks and those kernels raise). Each row is a model that computes nearly what float32
    computes and generates, or the reason it cannot run here. The next unguarded kernel fails this test
    on any machine."""
    if machine == "mac":
        request.getfixturevalue("on_a_mac")
    else:
        has = runtime.cpu_capabilities()
        if not (has["onednn"] and has["fbgemm"]):
            pytest.skip("a laptop's x86 build of PyTorch has oneDNN and fbgemm; this one has not")
        monkeypatch.setattr(runtime, "cpu_capabilities", lambda: {**has, "onednn_bf16": False, "native_bf16": False})
    model = tiny_gpt(0, d_model=64).eval()
    versions = quantized_versions(model, {**FORMATS, **KERNEL_VARIANTS})
    assert list(versions) == [*FORMATS, *KERNEL_VARIANTS]
    assert {name for name, v in versions.items() if isinstance(v, str)} == set(refused)
    assert all(why in versions[name] for name, why in refused.items())
    ids = torch.randint(0, 40, (1, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(ids)
        for name, version in versions.items():
            if isinstance(version, str):
                mode, kernel, _ = {**FORMATS, **KERNEL_VARIANTS}[name]
                with pytest.raises(NotOnThisCPU, match=re.escape(version)):
                    quantize_model(model, mode, kernel=kernel)
                continue
            gap = (version(ids) - reference).abs().max() / reference.abs().max()
            assert gap < (0.3 if name.startswith("int4") else 0.05), name
            assert generate(version, ids, 3, greedy=True).shape == (1, 13)


def test_the_laptop_profile_reproduces_the_laptops_refusal():
    """Under the laptop profile (ATen, oneDNN, MKL and fbgemm held to AVX2), an AVX-512 machine refuses
    to pack bfloat16 as an AVX2 laptop does, and counts no native bfloat16."""
    if "laptop" not in runtime.cpu_profiles():
        pytest.skip("this CPU has no AVX-512 to hold back: it is a laptop already, or no x86")
    probe = (
        "from course_lib import quantization as q, runtime\n"
        "print(runtime.aten_kernels(), runtime.cpu_capabilities()['native_bf16'])\n"
        "print(q.unavailable('bfloat16', 'onednn'))\n"
        "import torch; q.PackedLinear(torch.nn.Linear(64, 64), torch.bfloat16)"
    )
    env = {**runtime.os.environ, **runtime.CPU_PROFILES["laptop"]}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert out.stdout.splitlines()[0] == "avx2 False"
    assert "AVX-512 (BW, VL and DQ) or AVX-NE-CONVERT" in out.stdout and "ONEDNN_MAX_CPU_ISA=AVX2" in out.stdout
    assert out.returncode == 1 and "NotOnThisCPU" in out.stderr


FORMATS_AND_KERNELS = [("float32", "auto"), ("float32", "onednn"), ("int8", "auto"), ("int4", "auto")]


@pytest.mark.parametrize("mode, kernel", FORMATS_AND_KERNELS)
def test_profile_step_finds_every_formats_matrix_products(tiny_gpt, mode, kernel, one_thread):
    """Each format's kernel is among the operators counted as matrix products (a renamed kernel
    would silently move its time to "other operators")."""
    if unavailable(mode, kernel) is not None:
        pytest.skip(unavailable(mode, kernel))
    model = quantize_model(tiny_gpt(0, d_model=64), mode, kernel=kernel)
    for step in (None, decode_step):  # generate's step over the teaching cache, generate_batch's over the static
        parts = profile_step(model, [1, 2, 3], steps=2, step=step)
        assert list(parts) == ["matrix products", "attention", "other operators", "outside operators"]
        assert all(ms >= 0 for ms in parts.values()) and parts["matrix products"] > 0


# kernels an H200 ran for SmolLM2's compiled step (torch 2.11, CUDA 13), cut short
H200_KERNELS = {
    "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float": "matrix products",
    "nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN": "matrix products",
    "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 10, 11, false, cublasGemvTensorStridedBatched<": "matrix products",
    "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cut": "attention",
    "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_cga1x1x1_": "attention",
    "triton_poi_fused__scaled_dot_product_efficient_attention__unsafe_view_add_bitwise_and": "generated (Triton)",
    "triton_per_fused__fused_rms_norm__unsafe_view_add_12": "generated (Triton)",
    "Memcpy DtoD (Device -> Device)": "copies",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<f": "other",
}


@pytest.mark.parametrize("name", H200_KERNELS)
def test_each_gpu_kernel_is_counted_in_its_family(name):
    """A generated kernel named after the attention it prepares is Triton's, not attention's."""
    assert kernel_family(name) == H200_KERNELS[name]


def test_gpu_kernels_asks_for_a_gpu(tiny_gpt):
    with pytest.raises(ValueError, match="counts CUDA kernels; cpu has none"):
        gpu_kernels(lambda: None, 8, "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_kernels_are_counted_per_token(tiny_gpt):
    model = tiny_gpt(0, d_model=64).cuda()
    use = gpu_kernels(lambda: generate_batch(model, [[1, 2, 3]], 8, greedy=True), 8, "cuda")
    assert use["kernels"] >= model.config.n_layers  # at least one kernel a layer, every token
    assert use["busy"] > 0 and use["wall"] > 0
    assert sum(n for n, _ in use["families"].values()) == use["kernels"]


def sharp(tiny_gpt) -> nn.Module:
    """A tiny model whose greedy continuations wander (untied head, weights x8), with every layer's
    output features a multiple of 16, so that int4's fast kernel (tinygemm) takes the head too."""
    model = tiny_gpt(0, d_model=64, n_heads=4, n_kv_heads=2, vocab_size=64, tie_weights=False, positional="rope")
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(8)
    return model.eval()


@pytest.mark.parametrize("mode, kernel", [("int8", "int8pack"), ("int4", "tinygemm")])
def test_the_compiled_step_calls_the_quantized_kernels_and_decodes_as_the_eager_one(tiny_gpt, mode, kernel, one_thread):
    """torch.compile (inductor: generated C++) over the whole decoding step of a quantized model: one
    graph for every step, the int8 or int4 kernel called inside it, and greedy tokens exactly the eager
    step's. A machine without a C++ compiler says why and skips."""
    from torch._dynamo.utils import counters

    from course_lib.generation import compile_unavailable, compiled_step, generate_batch

    if compile_unavailable() is not None:
        pytest.skip(compile_unavailable())
    model = quantize_model(sharp(tiny_gpt), mode)
    assert {m.kernel for m in model.modules() if isinstance(m, (Int8Linear, Int4Linear))} == {kernel}
    prompts = [[1, 5, 9, 2, 7], [3, 3, 8]]
    eager = generate_batch(model, prompts, 10, greedy=True)
    assert len({tuple(row) for row in eager}) == 2 and len(set(eager[0])) > 2  # the tokens wander
    torch._dynamo.reset()
    counters.clear()
    with torch.profiler.profile() as profiler:
        compiled = generate_batch(model, prompts, 10, greedy=True, step=compiled_step())
    assert compiled == eager
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    called = {event.key for event in profiler.key_averages()}
    assert {"aten::_weight_int8pack_mm" if mode == "int8" else "aten::_weight_int4pack_mm_for_cpu"} <= called


def test_the_quality_rule_judges_the_intervals_upper_end():
    """Chapter 14's one rule (the notebook's choice, the benchmark's goal): a point estimate inside the
    1% margin with an interval reaching past it is not within it."""
    from course_lib.evaluation import PairedDifference

    point_inside = PairedDifference(math.log(1.009), math.log(1.003), math.log(1.015), 0.02, 8)
    assert math.exp(point_inside.difference) < QUALITY_MARGIN == 1.01
    assert not within_margin(point_inside)
    assert within_margin(PairedDifference(math.log(1.003), -0.001, math.log(1.0067), 0.06, 8))


def test_cache_bytes(tiny_gpt):
    model = tiny_gpt(0, n_kv_heads=1)  # 2 layers, 1 key/value head of 16 dimensions
    assert cache_bytes(model, 10) == 2 * 2 * 1 * 16 * 10 * 4


def reads_and_writes(run):
    """Every operator ``run`` calls, with the bytes of the tensors it reads and of those it writes."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            read = written = 0
            for argument, value in zip(func._schema.arguments, args):
                if isinstance(value, torch.Tensor):
                    size = value.numel() * value.element_size()
                    if argument.alias_info is not None and argument.alias_info.is_write:
                        written += size
                    else:
                        read += size
            self.calls.append((func.__name__, read, written))
            return func(*args, **(kwargs or {}))

    with Record() as record:
        run()
    return record.calls


@pytest.mark.parametrize("faster", ["sum", "mv"])
def test_the_read_probe_reads_its_working_set_once_whatever_the_timings(monkeypatch, faster):
    """One probe, defined once: a call reads every byte of a float32 buffer of the working set asked
    for (at least 4 MiB), once, with the same kernel on every machine. It never picks a kernel by
    timing (two benchmarks on one machine once read 25.4 and 6.8 GB/s for one working set): the
    timings are patched here to favour either kernel, and the probe does not change."""
    from course_lib import quantization

    monkeypatch.setattr(
        quantization, "seconds_per_call", lambda run, **_: 1.0 if (faster == "sum") != (run.__name__ == "sum") else 0.1
    )
    for nbytes in (2**20, 3 * 2**22):
        run, counted = read_probe(nbytes)
        assert counted == max(nbytes, 2**22)
        assert reads_and_writes(run) == [("sum.default", counted, 0)]  # one pass over the buffer, no writes
    with torch.device("meta"):  # off the CPU: the same probe, nothing timed
        run, counted = read_probe(2**23, "meta")
        assert reads_and_writes(run) == [("sum.default", counted, 0)]


def test_the_copy_probe_is_streams_copy():
    """STREAM's copy, counted as STREAM counts it: a buffer read and another of the same size written."""
    run, counted = copy_probe(2**22)
    assert counted == 2 * 2**22
    [(name, read, written)] = reads_and_writes(run)
    assert name == "copy_.default" and read == written == 2**22


# == bad input =============================================================================


def test_bad_input_is_named(tiny_gpt, linear):
    with pytest.raises(ValueError, match="2-D"):
        quantize_int8(torch.ones(3))
    with pytest.raises(TypeError, match="only float weights"):
        quantize_int8(torch.ones(2, 2, dtype=torch.int8))
    with pytest.raises(ValueError, match="not a multiple of group_size=48"):
        quantize_int4(torch.ones(2, 64), 48)
    with pytest.raises(ValueError, match="unknown mode 'int2'"):
        quantize_model(tiny_gpt(0), "int2")
    with pytest.raises(ValueError, match="unknown int8 kernel 'cuda'"):
        Int8Linear(linear, kernel="cuda")
    with pytest.raises(ValueError, match="unknown int4 kernel"):
        Int4Linear(linear, kernel="fbgemm")
    with pytest.raises(ValueError, match="'tinygemm' is for int8 or int4"):
        quantize_model(tiny_gpt(0), "float32", kernel="tinygemm")
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        PackedLinear(linear, torch.float16)
    with pytest.raises(ValueError, match="must lie in 0..15"):
        pack_int4(torch.tensor([[16, 0]]))
    with pytest.raises(ValueError, match="even number of columns"):
        pack_int4(torch.zeros(2, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="do not fit"):
        dequantize_int4(torch.zeros(2, 64, dtype=torch.uint8), torch.ones(2, 3), torch.ones(2, 3))
    assert math.isclose(relative_error(torch.ones(4), torch.ones(4)), 0.0)
