"""Fixtures shared by the test files: corpora and tokenizers, the shipped model, small GPTs,
random tensors, and a local HTTP server for download tests."""

import http.server
import os
import threading
from pathlib import Path

import mac_build
import pytest
import torch
from hypothesis import settings

from course_lib.data import stdlib_docs_text
from course_lib.model import GPT, GPTConfig
from course_lib.pretrained import load_pretrained
from course_lib.runtime import threads
from course_lib.tasks import docs_instructions
from course_lib.tokenization import gpt2_encoding, gpt2_tokenizer

# No timing-based failures on a shared machine, no example database left behind, and in CI
# the same examples every run (they were explored at 25,000 examples when written).
settings.register_profile("course", deadline=None, database=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("course")

if mac_build.requested():  # COURSE_SIMULATE=mac: this run, and every Python it starts, on a Mac's build of torch
    mac_build.apply()
    simulate = str(Path(__file__).resolve().parent / "simulate")  # its sitecustomize applies it at start-up
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [simulate, os.environ.get("PYTHONPATH")]))


@pytest.fixture
def on_a_mac(monkeypatch):
    """This test on a Mac's build of PyTorch (no oneDNN, MKL or fbgemm; MPS present; tests/mac_build.py),
    this machine's torch restored after it."""
    mac_build.apply(monkeypatch.setattr)


@pytest.fixture(scope="session")
def corpus() -> str:
    return stdlib_docs_text()


@pytest.fixture(scope="session")
def tiktoken_gpt2():
    return gpt2_encoding()


@pytest.fixture(scope="session")
def course_gpt2():
    return gpt2_tokenizer()


@pytest.fixture(scope="session")
def course():
    """The model that ships with course_lib: (model, tokenizer, notes). Shared, so a test must not
    change it: one that trains or grows a model loads a copy of its own with load_pretrained()."""
    return load_pretrained()


@pytest.fixture(scope="session")
def instructions():
    """Chapter 11's docs-assistant instruction set."""
    return docs_instructions()


TINY = dict(vocab_size=40, context_length=16, n_layers=2, n_heads=2, d_model=32)


@pytest.fixture(scope="session")
def tiny_gpt():
    """A factory of small GPTs: ``tiny_gpt(seed, **config)`` seeds torch with ``seed``, then builds a
    GPT of vocabulary 40, context 16, 2 layers, 2 heads and width 32, ``config`` overriding."""

    def make(seed: int = 0, **config) -> GPT:
        torch.manual_seed(seed)
        return GPT(GPTConfig(**{**TINY, **config}))

    return make


@pytest.fixture(scope="session")
def fresh_model(tiny_gpt):
    """The trainer's and the checkpoints' model: seed 1 and dropout on, so that an exact resume
    has to restore the random state too."""

    def make(seed: int = 1, **config) -> GPT:
        return tiny_gpt(seed, **{"dropout": 0.1, **config})

    return make


@pytest.fixture(scope="session")
def same_weights():
    """Whether two models hold equal tensors, to the bit."""

    def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
        return all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))

    return same


@pytest.fixture
def random_ids():
    """3,000 random token ids below 40, split 2,500 / 500 into training and validation."""
    torch.manual_seed(0)
    ids = torch.randint(0, 40, (3000,))
    return ids[:2500], ids[2500:]


@pytest.fixture
def generator():
    """A torch generator seeded 0 afresh for each test: the same numbers in any order of tests."""
    return torch.Generator().manual_seed(0)


@pytest.fixture
def randn(generator):
    """torch.randn drawing from this test's ``generator``."""
    return lambda *shape: torch.randn(*shape, generator=generator)


@pytest.fixture
def server(tmp_path):
    """A throwaway HTTP server on localhost serving tmp_path/served."""
    served = tmp_path / "served"
    served.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(served), **kwargs)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def one_thread():
    """Tiny models on a busy 2-core machine: a second OpenMP thread only waits."""
    with threads(1):
        yield
