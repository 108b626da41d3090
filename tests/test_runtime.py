import pytest
import torch

from course_lib import runtime


def test_device_is_cuda_when_present_else_the_cpu_and_mps_only_when_asked(monkeypatch):
    """A Mac's CPU runs the course's small models faster than MPS, so MPS is never picked by itself."""
    monkeypatch.delenv(runtime.DEVICE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert runtime.get_device() == torch.device("cpu")
    monkeypatch.setenv(runtime.DEVICE_ENV, "mps")
    assert runtime.get_device() == torch.device("mps", 0)  # what an MPS tensor's .device says
    monkeypatch.delenv(runtime.DEVICE_ENV)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert runtime.get_device() == torch.device("cuda", 0)


def test_a_gpu_device_compares_equal_to_its_tensors_device(monkeypatch):
    """A CUDA tensor's device carries its index, and torch.device("cuda") != torch.device("cuda:0"):
    notebooks 07 and 08 assert that a generated output is on ``device``, which failed on a GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)  # the GPU torch.cuda.set_device chose
    for forced in ("", "cuda"):
        monkeypatch.setenv(runtime.DEVICE_ENV, forced)
        device = runtime.get_device()
        assert device.index == 1 and device == torch.device("cuda:1") != torch.device("cuda")


def test_seed_everything_makes_draws_repeat():
    g = runtime.seed_everything(7)
    a, b = torch.rand(3), torch.rand(3, generator=g)
    g = runtime.seed_everything(7)
    assert torch.equal(a, torch.rand(3)) and torch.equal(b, torch.rand(3, generator=g))


def test_budget_switch(monkeypatch):
    monkeypatch.delenv(runtime.BUDGET_ENV, raising=False)
    assert runtime.budget() == "full" and runtime.by_budget(1000, 10) == 1000
    monkeypatch.setenv(runtime.BUDGET_ENV, "CI")
    assert runtime.budget() == "ci" and runtime.by_budget(1000, 10) == 10
    monkeypatch.setenv(runtime.BUDGET_ENV, "tiny")
    with pytest.raises(ValueError, match="COURSE_BUDGET='tiny' is not a known budget; use one of full, ci"):
        runtime.budget()


def test_threads(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv(runtime.THREADS_ENV, "1")
        assert runtime.configure_threads() == 1
        monkeypatch.setenv(runtime.THREADS_ENV, "zero")
        with pytest.raises(ValueError, match="positive integer"):
            runtime.configure_threads()
    finally:
        torch.set_num_threads(before)


def test_start_prints_one_line(monkeypatch, capsys):
    monkeypatch.setenv(runtime.BUDGET_ENV, "ci")
    monkeypatch.delenv(runtime.THREADS_ENV, raising=False)
    runtime.start(3)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "budget: ci" in out and "seed: 3" in out


def test_progress_switch(monkeypatch):
    monkeypatch.delenv(runtime.PROGRESS_ENV, raising=False)
    assert runtime.show_progress()
    monkeypatch.setenv(runtime.PROGRESS_ENV, "0")
    assert not runtime.show_progress()


def test_course_device_forces_a_device_and_says_what_is_wrong(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv(runtime.DEVICE_ENV, "cpu")
    assert runtime.get_device().type == "cpu"  # a GPU is present, the CPU was asked for
    monkeypatch.setenv(runtime.DEVICE_ENV, " CUDA ")
    assert runtime.get_device().type == "cuda"
    monkeypatch.setenv(runtime.DEVICE_ENV, "gpu")
    with pytest.raises(ValueError, match="COURSE_DEVICE='gpu' is not a device; use one of cpu, cuda, mps"):
        runtime.get_device()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(runtime.DEVICE_ENV, "cuda")
    with pytest.raises(RuntimeError, match="COURSE_DEVICE='cuda' but this machine has no CUDA device"):
        runtime.get_device()
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setenv(runtime.DEVICE_ENV, "mps")
    with pytest.raises(RuntimeError, match="has no MPS device"):
        runtime.get_device()


def test_evaluating_restores_the_mode_it_found_also_after_an_error():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    for training in (True, False):
        model.train(training)
        with runtime.evaluating(model) as inside:
            assert inside is model and not model.training and not model[1].training
        assert model.training == training and model[1].training == training
        with pytest.raises(KeyError, match="boom"):
            with runtime.evaluating(model):
                assert not model.training
                raise KeyError("boom")
        assert model.training == training and model[1].training == training


def test_model_device_is_where_the_parameters_live():
    assert runtime.model_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert runtime.model_device(torch.nn.Linear(2, 2, device="meta")) == torch.device("meta")


def test_seconds_per_call_is_the_median_of_repeated_timings(monkeypatch):
    """A fake clock that advances 0.01 s per call and 1 s once: the median ignores the outlier."""
    now, calls = [0.0], [0]

    def fn():
        calls[0] += 1
        now[0] += 1.0 if calls[0] == 10 else 0.01  # one disturbed call, inside the third timing

    monkeypatch.setattr(runtime.time, "perf_counter", lambda: now[0])
    assert runtime.seconds_per_call(fn, timings=7, at_least=0.05) == pytest.approx(0.01)
    assert calls[0] == 2 + 7 * 5  # warm-up, one to size the repeats, then 7 timings of 5 calls
    with pytest.raises(ValueError, match="timings >= 1"):
        runtime.seconds_per_call(fn, timings=0)


def fake_cpu(monkeypatch, *features):
    """This process's CPU as an x86 one with only ``features`` (the names of torch.cpu's probes)."""
    monkeypatch.setattr(runtime.platform, "machine", lambda: "x86_64")
    for name in ("avx2", "avx512", "avx512_bf16", "amx_tile"):
        monkeypatch.setattr(torch.cpu, f"_is_{name}_supported", lambda name=name: name in features, raising=False)


def test_capabilities_come_from_the_hardware_and_the_libraries(monkeypatch):
    has = runtime.cpu_capabilities()
    assert set(has) == {"avx2", "avx512", "avx512_bf16", "amx", "onednn", "onednn_bf16", "native_bf16", "fbgemm"}
    assert has["native_bf16"] == ((has["avx512_bf16"] or has["amx"]) and has["onednn_bf16"])
    assert runtime.native_bf16(torch.device("cpu")) == has["native_bf16"]
    fake_cpu(monkeypatch, "avx2")  # a laptop: no AVX-512, so no native bfloat16 whatever oneDNN says
    has = runtime.cpu_capabilities()
    assert has["avx2"] and not has["avx512"] and not has["native_bf16"]
    assert not runtime.native_bf16(torch.device("cpu"))


def test_a_variable_asking_for_kernels_the_cpu_lacks_is_refused(monkeypatch):
    """torch takes ATEN_CPU_CAPABILITY=avx512 on trust and reports AVX512 on an AVX2 laptop, then dies
    of SIGILL in the first AVX-512 kernel; the course asks the hardware and says so first."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setenv(runtime.KERNELS_ENV, "avx512")
    fake_cpu(monkeypatch, "avx2")
    with pytest.raises(RuntimeError, match="asks for AVX-512 kernels on a CPU without AVX-512"):
        runtime.aten_kernels()
    with pytest.raises(RuntimeError, match="without AVX-512"):
        runtime.start()
    fake_cpu(monkeypatch, "avx2", "avx512")
    assert runtime.aten_kernels() == "avx512"


@pytest.mark.parametrize(
    "features, profiles",
    [
        (("avx2", "avx512"), ["native", "laptop", "default"]),
        (("avx2",), ["native", "default"]),  # a laptop: native already is the laptop profile
        ((), ["native", "default"]),
    ],
)
def test_profiles_offered_are_those_the_hardware_can_act_as(monkeypatch, features, profiles):
    fake_cpu(monkeypatch, *features)
    assert runtime.cpu_profiles() == profiles


def test_a_mac_is_seen_as_a_mac(on_a_mac, monkeypatch):
    """On a Mac's build of PyTorch (tests/mac_build.py): no x86 instruction set, oneDNN or fbgemm, no
    profile but its own (ATen's plain path on ARM is called "default" as an x86 one is), the CPU to work
    on though MPS is there, and a random state of the CPU alone: the tensors of notebook 08's
    checkpoint are those of any other machine."""
    monkeypatch.delenv(runtime.DEVICE_ENV, raising=False)
    assert not any(runtime.cpu_capabilities().values())
    assert runtime.aten_kernels() == "default" and runtime.cpu_profiles() == ["native"]
    assert runtime.get_device() == torch.device("cpu") and list(runtime.rng_state()) == ["cpu"]
    monkeypatch.setenv(runtime.DEVICE_ENV, "mps")
    assert runtime.get_device() == torch.device("mps", 0) and list(runtime.rng_state()) == ["cpu", "mps"]


def test_the_laptop_profile_limits_every_library_that_picks_its_own_kernels():
    laptop = runtime.CPU_PROFILES["laptop"]
    assert laptop == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
    }
    assert runtime.CPU_PROFILES["native"] == {} and set(runtime.CPU_PROFILES["default"]) == set(laptop)


def test_threads_sets_and_restores_the_count():
    before = torch.get_num_threads()
    with runtime.threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), runtime.threads(1):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="at least one thread"), runtime.threads(0):
        pass


def test_a_started_notebook_imports_peft_without_warnings_on_stderr():
    """nbval fails a cell on any stderr: with torchao installed (a test requirement), peft's import
    warned about torchao's CUDA-only extensions in chapter 10 until ``start`` quieted them."""
    pytest.importorskip("peft")
    import subprocess
    import sys

    code = "from course_lib.runtime import start; start(0); import peft"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_a_started_notebook_profiles_without_the_profilers_log_lines():
    """torch.profiler (chapter 14) writes its start and stop as log lines into a cell's output
    unless ``start`` has quieted them before its first use."""
    import subprocess
    import sys

    code = (
        "import torch; from course_lib.runtime import start; start(0)\n"
        "with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]): torch.ones(3).sum()"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "profiler_start" not in result.stdout + result.stderr, result.stderr
