"""Chapter 12's probes of a model's limits: memorisation and next-word probabilities."""

import pytest
import torch
import torch.nn.functional as F

from course_lib.limits import Verbatim, next_word_probabilities, verbatim_continuations


def test_a_model_that_memorised_its_text_reproduces_it(course, tiny_gpt):
    model, tokenizer, _ = course
    torch.manual_seed(0)
    text = torch.randint(0, 40, (300,))
    parrot = tiny_gpt(context_length=64, d_model=16, positional="rope")
    optimizer = torch.optim.AdamW(parrot.parameters(), lr=1e-2)
    for _ in range(150):  # overfit a 300-token text
        x = torch.stack([text[s : s + 48] for s in range(0, 250, 10)])
        y = torch.stack([text[s + 1 : s + 49] for s in range(0, 250, 10)])
        loss = F.cross_entropy(parrot(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    seen = verbatim_continuations(parrot, text, n=20, prefix_length=24, length=8)
    unseen = verbatim_continuations(parrot, torch.randint(0, 40, (300,)), n=20, prefix_length=24, length=8)
    assert seen.exact > 0.8 and unseen.exact == 0.0 and seen.mean_tokens > unseen.mean_tokens
    assert len(seen.leading) == 20 and sum(seen.leading) / 20 == pytest.approx(seen.mean_tokens)
    low, high = unseen.mean_tokens_interval()
    assert low <= unseen.mean_tokens <= high
    with pytest.raises(ValueError, match="need at least"):
        verbatim_continuations(parrot, text[:10], n=5, prefix_length=8, length=8)


def test_the_interval_of_the_mean_count_is_mean_plus_minus_1_96_sd_over_root_n():
    counts = Verbatim(exact=0.0, mean_tokens=1.0, n=2, leading=[0, 2])  # sd √2, √n √2
    assert counts.mean_tokens_interval() == pytest.approx((1 - 1.96, 1 + 1.96))
    four = Verbatim(exact=0.0, mean_tokens=2.0, n=4, leading=[1, 1, 3, 3])  # sd 2/√3, √n 2
    assert four.mean_tokens_interval() == pytest.approx((2 - 1.96 / 3**0.5, 2 + 1.96 / 3**0.5))
    with pytest.raises(ValueError, match="at least 2"):
        Verbatim(exact=0.0, mean_tokens=0.0, n=1, leading=[0]).mean_tokens_interval()


def test_next_word_probabilities_are_the_softmax_entries(course):
    model, tokenizer, _ = course
    probs = next_word_probabilities(model, tokenizer, ["The function returns", "The class"], [" a", " the"])
    with torch.no_grad():
        full = torch.softmax(model(torch.tensor([tokenizer.encode("The class")]))[0, -1], dim=-1)
    assert probs.shape == (2, 2) and torch.allclose(
        probs[1], full[[tokenizer.encode(" a")[0], tokenizer.encode(" the")[0]]]
    )
    with pytest.raises(ValueError, match="must be a single token"):
        next_word_probabilities(model, tokenizer, ["x"], [" extraordinarily"])
