"""Chapter 12's prompting tools: few-shot prompts, likelihood classification with a shared prefix, voting."""

import pytest

from course_lib.evaluation import option_scores
from course_lib.prompting import best_of_n, classify_by_likelihood, extract_number, few_shot_prompt, majority_vote


def test_few_shot_prompts():
    shots = [("Open a socket.", "networking")]
    assert few_shot_prompt(shots, " Parse a date. ", "Name the area.") == (
        "Name the area.\n\nSentence: Open a socket.\nArea: networking\n\nSentence: Parse a date.\nArea:"
    )
    assert few_shot_prompt([], "x") == "Sentence: x\nArea:"


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
