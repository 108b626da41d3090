"""Chapter 12's probes of a model's limits: memorisation and next-word probabilities."""

import pytest
import torch
import torch.nn.functional as F

from course_lib.limits import next_word_probabilities, verbatim_continuations


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
    with pytest.raises(ValueError, match="need at least"):
        verbatim_continuations(parrot, text[:10], n=5, prefix_length=8, length=8)


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
