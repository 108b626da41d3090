"""Chapter 12's tools: few-shot prompts, likelihood classification with a shared prefix, voting,
memorisation and next-word probes."""

import pytest
import torch
import torch.nn.functional as F

from course_lib.evaluation import option_scores
from course_lib.limits import next_word_probabilities, verbatim_continuations
from course_lib.model import GPT, GPTConfig
from course_lib.pretrained import load_pretrained
from course_lib.prompting import best_of_n, classify_by_likelihood, extract_number, few_shot_prompt, majority_vote


@pytest.fixture(scope="module")
def course():
    return load_pretrained()


def tiny(positional="rope"):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=40, context_length=64, n_layers=2, n_heads=2, d_model=16, positional=positional))


def test_few_shot_prompts():
    shots = [("Open a socket.", "networking")]
    assert few_shot_prompt(shots, " Parse a date. ", "Name the area.") == (
        "Name the area.\n\nSentence: Open a socket.\nArea: networking\n\nSentence: Parse a date.\nArea:"
    )
    assert few_shot_prompt([], "x") == "Sentence: x\nArea:"


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_scores_from_a_cached_prefix_equal_scoring_everything_at_once(positional):
    model = tiny(positional).eval()
    prefix, prompt, options = [1, 2, 3, 4, 5], [6, 7], [[8], [9, 10, 11], [12, 13]]
    for per_token in (True, False):
        expected = option_scores(model, prefix + prompt, options, per_token)
        cache = model.new_cache()
        model(torch.tensor([prefix]), cache=cache)
        got = option_scores(model, prompt, options, per_token, cache=cache)
        assert got == pytest.approx(expected, abs=1e-5) and cache.length == len(prefix)  # the cache is left as it was
        assert option_scores(model, prompt, options, per_token, cache=cache) == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="cannot truncate a cache of 5 positions to 9"):
        cache.truncate(9)


def test_classify_by_likelihood_picks_the_most_likely_label(course):
    model, tokenizer, _ = course
    prefix = few_shot_prompt([("Return the sine of x.", "maths")], "").rsplit("Sentence:", 1)[0]
    queries = ["Sentence: Return the cosine of x.\nArea:", "Sentence: Open a file.\nArea:"]
    labels = ["maths", "files"]
    choices = classify_by_likelihood(model, tokenizer, prefix, queries, labels)
    for query, choice in zip(queries, choices):
        scores = option_scores(
            model, tokenizer.encode(prefix + query), [tokenizer.encode(" " + label) for label in labels]
        )
        assert choice == max(range(2), key=scores.__getitem__)


def test_voting_and_reading_answers():
    assert majority_vote([71, 81, 81, None, None, None]) == 81
    assert majority_vote([9, 5, 6, 6, 5]) == 5 and majority_vote([None]) is None
    assert best_of_n(["a", "b", "c"], [0.1, 0.9, 0.9]) == "b"
    with pytest.raises(ValueError, match="one score per candidate"):
        best_of_n(["a"], [])
    assert extract_number("so 23 + 58 = 81.") == 81 and extract_number("1,024 tokens") == 1024
    assert extract_number("minus -3") == -3 and extract_number("no digits") is None


def test_a_model_that_memorised_its_text_reproduces_it(course):
    model, tokenizer, _ = course
    torch.manual_seed(0)
    text = torch.randint(0, 40, (300,))
    parrot = tiny()
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
