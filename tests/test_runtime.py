import pytest
import torch

from course_lib import runtime


def test_device_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.delenv(runtime.DEVICE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert runtime.get_device().type == "cpu"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert runtime.get_device().type == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runtime.get_device().type == "cuda"


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


def test_kernel_paths_are_those_torch_reports(monkeypatch):
    picked = {"default": "DEFAULT", "avx2": "AVX2", "avx512": "AVX2"}  # no AVX-512: falls back

    def fake_run(args, env, **kwargs):
        class Done:
            stdout = picked[env[runtime.KERNELS_ENV]] + "\n"

        return Done()

    monkeypatch.setattr(runtime.subprocess, "run", fake_run)
    assert runtime.cpu_kernel_paths() == ["default", "avx2"]


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
