import pytest
import torch

from course_lib.generation import generate
from course_lib.model import GPT, GPTConfig


@pytest.fixture
def model():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, context_length=8, n_layers=1, n_heads=2, d_model=16))


def test_greedy_is_the_argmax_loop_with_cropping(model):
    start = torch.tensor([[1, 2, 3]])
    out = generate(model, start, 12, context_length=8, greedy=True)
    assert out.shape == (1, 15) and torch.equal(out[:, :3], start)
    ids = start
    for _ in range(12):  # the loop written out; positions beyond 8 need cropping
        ids = torch.cat([ids, model(ids[:, -8:])[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ids)


def test_sampling_is_reproducible_with_a_generator(model):
    start = torch.tensor([[1, 2], [3, 4]])
    a = generate(model, start, 5, 8, generator=torch.Generator().manual_seed(0))
    b = generate(model, start, 5, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == (2, 7)


def test_low_temperature_approaches_greedy(model):
    start = torch.tensor([[5, 6, 7]])
    greedy = generate(model, start, 6, 8, greedy=True)
    cold = generate(model, start, 6, 8, temperature=1e-4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(greedy, cold)


def test_bad_temperature(model):
    with pytest.raises(ValueError, match="temperature must be positive"):
        generate(model, torch.tensor([[1]]), 1, 8, temperature=0)
