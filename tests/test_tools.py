"""The calculator tool: a safe arithmetic evaluator, and the loop that pauses generation for it."""

from fractions import Fraction

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from course_lib.generation import Session, stream_text
from course_lib.model import GPT, GPTConfig
from course_lib.tokenization import BPETokenizer, train_bpe
from course_lib.tools import (
    CalculatorError,
    Reply,
    ToolMarkers,
    answer_with_tools,
    calculate,
    calculator,
    format_number,
)

# -- the evaluator ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, value",
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("10 - 4 - 3", "3"),  # left to right
        ("2 ** 3 ** 2", "512"),  # right to left, as in Python
        ("-2 ** 2", "-4"),  # the power binds tighter than the sign
        ("2 ** -1", "0.5"),
        ("--3", "3"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),  # floor, as in Python
        ("-7 % 3", "2"),
        ("48/2", "24"),
        ("10 / 4", "2.5"),
        ("1 / 3", "0.3333333333"),
        ("0.1 + 0.2", "0.3"),  # exact: no 0.30000000000000004
        ("1,250 * 2", "2500"),
        ("12 × 3 ÷ 4", "9"),  # what a model may write for * and /
        (".5 * 4", "2"),
        ("(-1) ** 1000000001", "-1"),
        ("3 ** 40", "12157665459056928801"),
    ],
)
def test_the_calculator_knows_arithmetic(expression, value):
    assert calculator(expression) == value


@pytest.mark.parametrize(
    "expression, message",
    [
        ("", "the expression is empty"),
        ("2 +", "ends too early"),
        ("(1 + 2", "'\\(' is never closed"),
        ("1 + 2)", "unexpected '\\)'"),
        ("1 / 0", "division by zero"),
        ("5 % (2 - 2)", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("2 ** 0.5", "only whole-number exponents"),
        ("9 ** 9 ** 9", "9\\*\\*387420489 .* would have about 369,693,100 digits"),
        ("10 ** 5000", "would have about 5,001 digits"),
        ("(10 ** 700) * (10 ** 700)", "beyond about 1,200 digits"),
        ("__import__('os').system('ls')", "unexpected '_'.*knows numbers"),
        ("x + 1", "unexpected 'x'"),
        ("1e3", "unexpected 'e'"),
        ("(" * 50 + "1" + ")" * 50, "more than 40 nested"),
        ("1" * 400, "400 characters"),
    ],
)
def test_anything_else_is_refused_with_a_reason(expression, message):
    with pytest.raises(CalculatorError, match=message):
        calculate(expression)


def test_not_text_is_a_type_error():
    with pytest.raises(TypeError, match="must be text"):
        calculate(12)


# An expression tree, printed with parentheses, and its value computed directly: the parser
# must agree with Python's own arithmetic on exact fractions.
numbers = st.integers(0, 10**6).map(Fraction) | st.decimals(0, 1000, places=3).map(Fraction)
trees = st.recursive(
    numbers,
    lambda inner: st.tuples(st.sampled_from(["+", "-", "*", "/", "//", "%", "neg"]), inner, inner),
    max_leaves=12,
)


def render(tree) -> str:
    if isinstance(tree, Fraction):
        return str(tree.numerator) if tree.denominator == 1 else format(float(tree), ".3f")
    op, a, b = tree
    return f"-({render(a)})" if op == "neg" else f"({render(a)}) {op} ({render(b)})"


def value(tree) -> Fraction:
    if isinstance(tree, Fraction):
        return tree
    op, a, b = tree
    x = value(a)
    if op == "neg":
        return -x
    y = value(b)
    if op in ("/", "//", "%") and y == 0:
        raise ZeroDivisionError
    return {
        "+": x + y,
        "-": x - y,
        "*": x * y,
        "/": x / y if y else 0,
        "//": x // y if y else 0,
        "%": x % y if y else 0,
    }[op]


@given(trees)
def test_the_parser_agrees_with_exact_arithmetic(tree):
    try:
        expected = value(tree)
    except ZeroDivisionError:
        with pytest.raises(CalculatorError, match="division by zero"):
            calculate(render(tree))
        return
    assert calculate(render(tree)) == expected


def test_numbers_are_written_exactly_or_to_ten_digits():
    assert format_number(Fraction(24)) == "24"
    assert format_number(Fraction(-1, 8)) == "-0.125"
    assert format_number(Fraction(2, 3)) == "0.6666666667"
    assert format_number(Fraction(10**30)) == "1" + "0" * 30


# -- the tool loop ---------------------------------------------------------------------------------

PROMPT = "Q: what is 6*7?\nA: "
BYTES = BPETokenizer.from_merges([(ord("="), ord("9"))], special_tokens={"<|endoftext|>": 257})  # 256 is "=9"
EOS = 257


class Scripted(torch.nn.Module):
    """A fake model that writes ``It is <<6*7=`` and then, if the calculator wrote ``42>>``
    after it, `` so 42.``; left alone it guesses ``41.``. ``overshoot``: it writes the ``=``
    as the token ``=9``, running past the marker."""

    def __init__(self, overshoot: bool = False):
        super().__init__()
        self.overshoot = overshoot
        self.weight = torch.nn.Parameter(torch.zeros(1))  # a device to be on

    def forward(self, idx):  # (1, T) -> (1, T, 258)
        written = BYTES.decode(idx[0].tolist())[len(PROMPT) :]
        target = "It is <<6*7=42>> so 42." if "42>>" in written else "It is <<6*7=41."
        if written == target:
            token = EOS
        elif self.overshoot and target[len(written) :].startswith("=4"):
            token = 256
        else:
            token = target.encode()[len(written.encode())]
        logits = torch.full((1, idx.shape[1], 258), -1e9)
        logits[0, -1, token] = 0.0
        return logits


def reply_of(model, **options) -> Reply:
    session = Session(model, BYTES.encode(PROMPT), context_length=256)
    reply = Reply(session, BYTES, 40, eos_id=EOS, sampling={"greedy": True}, **options)
    reply.pieces = list(reply)
    return reply


@pytest.mark.parametrize("overshoot", [False, True])
def test_generation_pauses_for_the_calculator_and_resumes(overshoot):
    reply = reply_of(Scripted(overshoot))
    assert reply.text == "It is <<6*7=42>> so 42." and reply.stopped
    assert [(c.expression, c.result, c.error, c.inserted) for c in reply.calls] == [("6*7", "42", None, "42>>")]
    assert "".join(p if isinstance(p, str) else p.inserted for p in reply.pieces) == reply.text
    assert "=9" not in BYTES.decode(reply.session.ids)  # the token that ran past the marker was cut
    assert reply.session.ids[-1] == EOS


def test_a_failing_tool_leaves_the_model_to_go_on_alone():
    def broken(expression: str) -> str:
        raise CalculatorError(f"cannot do {expression}")

    reply = reply_of(Scripted(), tool=broken)
    assert reply.text == "It is <<6*7=41." and reply.stopped
    assert reply.calls[0].error == "cannot do 6*7" and reply.calls[0].inserted == ""


def test_without_a_tool_or_when_asked_to_stop_the_text_is_the_models_own():
    assert reply_of(Scripted(), tool=None).text == "It is <<6*7=41."
    asked = []
    reply = reply_of(Scripted(), should_stop=lambda: len(asked.append(1) or asked) > 5)
    assert reply.text == "It is" and not reply.stopped and reply.tokens == 5


def test_other_markers_work_the_same():
    class Tagged(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def forward(self, idx):
            written = BYTES.decode(idx[0].tolist())[len(PROMPT) :]
            target = "<calc>2+3</calc>5</out> ok" if "</out>" in written else "<calc>2+3</calc>?"
            token = EOS if written == target else target.encode()[len(written.encode())]
            logits = torch.full((1, idx.shape[1], 258), -1e9)
            logits[0, -1, token] = 0.0
            return logits

    reply = reply_of(Tagged(), markers=ToolMarkers("<calc>", "</calc>", "</out>"))
    assert reply.text == "<calc>2+3</calc>5</out> ok"


def test_the_loop_without_calls_writes_what_stream_text_writes(tiny_gpt):
    tokenizer = train_bpe("the cat sat on the mat. " * 30, 280, special_tokens=["<|endoftext|>"])
    model = tiny_gpt(vocab_size=tokenizer.vocab_size)
    expected = "".join(stream_text(model, tokenizer.encode, tokenizer.decode, "the ", 30, greedy=True))
    reply = answer_with_tools(model, tokenizer, "the ", 30)
    assert reply.text == expected and reply.tokens == 30 and not reply.calls


def test_bad_loop_options():
    session = Session(Scripted(), BYTES.encode(PROMPT), context_length=256)
    with pytest.raises(ValueError, match="max_new_tokens must be 0 or more"):
        Reply(session, BYTES, -1)
    with pytest.raises(TypeError, match=r"unknown sampling options \['temp'\]"):
        Reply(session, BYTES, 5, sampling={"temp": 0.5})


def test_the_tool_loop_with_a_real_model_and_a_real_calculator():
    """The loop on a course GPT: the expression the model writes is evaluated and fed back."""
    tokenizer = BPETokenizer.from_merges([], special_tokens={"<|endoftext|>": 256})
    target = "<<12*3=36>>!"
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=257, context_length=64, n_layers=1, n_heads=2, d_model=32))
    ids = torch.tensor([tokenizer.encode("x" + target)])  # teach it the whole line by heart
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        loss = torch.nn.functional.cross_entropy(model(ids[:, :-1])[0], ids[0, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    reply = answer_with_tools(model.eval(), tokenizer, "x", 12)
    assert reply.calls and reply.calls[0].expression == "12*3" and reply.calls[0].result == "36"
    assert reply.text.startswith("<<12*3=36>>")
