"""A calculator the model can call (chapter 12): a safe arithmetic evaluator and the tool loop.

Language models are unreliable at arithmetic, and a calculator is not. GSM8K's solutions carry
calculator annotations, ``48/2 = <<48/2=24>>24`` (Cobbe et al., 2021), and a model taught that
format can hand the arithmetic over: when it has written ``<<48/2=``, generation pauses, the
expression is evaluated, ``24>>`` is written into the sequence as if the model had written it,
and generation resumes. nanochat's engine does the same with its own tool tokens.

- :func:`calculate` evaluates an arithmetic expression exactly (numbers, ``+ - * / // % **``,
  parentheses, unary minus) with a small recursive-descent parser. Model text is never given to
  Python's ``eval``: anything that is not arithmetic is an error that names it, and so is a
  result too large to be worth computing (``9**9**9``);
- :func:`calculator` is the tool: the expression's value as text, ``"24"`` or ``"0.3333333333"``;
- :class:`Reply` generates text from a :class:`~course_lib.generation.Session`, piece by piece,
  running a tool whenever the model closes a call (:class:`ToolMarkers`);
  :func:`answer_with_tools` is the one-call version for a prompt.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from fractions import Fraction

import torch

from .generation import Session
from .model import GPT

MAX_LENGTH = 300  # characters of an expression
MAX_DEPTH = 40  # nested parentheses and signs
MAX_BITS = 4000  # of a numerator or denominator: about 1,200 digits


class CalculatorError(ValueError):
    """An expression the calculator refuses: not arithmetic, or too large to compute."""


_TOKEN = re.compile(r"\s*(?:(?P<number>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.?\d*|\.\d+)|(?P<op>\*\*|//|[-+*/%()]))")
_SYNONYMS = str.maketrans({"×": "*", "÷": "/", "−": "-", "–": "-"})  # what a model may write instead


def _tokens(expression: str) -> list[str | Fraction]:
    """Numbers (as exact fractions: 0.1 is 1/10) and operators; anything else is an error."""
    text = expression.translate(_SYNONYMS)
    tokens: list[str | Fraction] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None:
            bad = text[position:].lstrip()[0]
            raise CalculatorError(
                f"unexpected {bad!r} in {expression!r}: the calculator knows numbers, + - * / // % ** and parentheses"
            )
        if match["number"] is not None:
            tokens.append(Fraction(match["number"].replace(",", "")))
        else:
            tokens.append(match["op"])
        position = match.end()
    return tokens


class _Parser:
    """Recursive descent over Python's precedence:

    sum     := product (("+" | "-") product)*
    product := signed (("*" | "/" | "//" | "%") signed)*
    signed  := ("+" | "-") signed | power
    power   := atom ("**" signed)?          (right to left: 2**3**2 = 2**9; -2**2 = -4)
    atom    := number | "(" sum ")"
    """

    def __init__(self, tokens: list[str | Fraction], expression: str):
        self.tokens, self.expression, self.at, self.depth = tokens, expression, 0, 0

    def peek(self) -> str | Fraction | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> str | Fraction | None:
        token = self.peek()
        self.at += 1
        return token

    def error(self, what: str) -> CalculatorError:
        return CalculatorError(f"{what} in {self.expression!r}")

    def parse(self) -> Fraction:
        if not self.tokens:
            raise CalculatorError("the expression is empty")
        value = self.sum()
        if self.peek() is not None:
            raise self.error(f"unexpected {self.peek()!r}")
        return value

    def sum(self) -> Fraction:
        value = self.product()
        while self.peek() in ("+", "-"):
            op = self.take()
            right = self.product()
            value = _checked(value + right if op == "+" else value - right, self.expression)
        return value

    def product(self) -> Fraction:
        value = self.signed()
        while self.peek() in ("*", "/", "//", "%"):
            op = self.take()
            right = self.signed()
            if op != "*" and right == 0:
                raise self.error("division by zero")
            if op == "*":
                value = value * right
            elif op == "/":
                value = value / right
            elif op == "//":
                value = Fraction(value // right)
            else:
                value = value % right
            value = _checked(value, self.expression)
        return value

    def signed(self) -> Fraction:
        if self.peek() in ("+", "-"):
            op = self.take()
            with self.deeper():
                value = self.signed()
            return -value if op == "-" else value
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() != "**":
            return base
        self.take()
        with self.deeper():
            exponent = self.signed()
        return _power(base, exponent, self.expression)

    def atom(self) -> Fraction:
        token = self.take()
        if isinstance(token, Fraction):
            return token
        if token == "(":
            with self.deeper():
                value = self.sum()
            if self.take() != ")":
                raise self.error("a '(' is never closed")
            return value
        raise self.error("the expression ends too early" if token is None else f"unexpected {token!r}")

    @contextmanager
    def deeper(self) -> Iterator[None]:
        """One level of nesting: a bound keeps "((((...))))" from exhausting Python's stack."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"more than {MAX_DEPTH} nested parentheses or signs")
        try:
            yield
        finally:
            self.depth -= 1


def _checked(value: Fraction, expression: str) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_BITS:
        raise CalculatorError(f"a number in {expression!r} grows beyond about 1,200 digits: too large to compute")
    return value


def _power(base: Fraction, exponent: Fraction, expression: str) -> Fraction:
    if exponent.denominator != 1:
        raise CalculatorError(f"only whole-number exponents are computed exactly, got {exponent} in {expression!r}")
    e = exponent.numerator
    if base == 0 and e < 0:
        raise CalculatorError(f"division by zero: 0 to a negative power in {expression!r}")
    if base in (0, 1, -1):
        return base**e  # never grows
    bits = abs(e) * max(math.log2(abs(base.numerator)), math.log2(base.denominator))
    if bits > MAX_BITS:  # estimated before computing: 9**9**9 would take minutes and gigabytes
        digits = int(abs(e) * max(math.log10(abs(base.numerator)), math.log10(base.denominator))) + 1
        raise CalculatorError(f"{base}**{e} in {expression!r} would have about {digits:,} digits")
    return _checked(base**e, expression)


def calculate(expression: str) -> Fraction:
    """The exact value of an arithmetic expression: numbers (``12``, ``3.5``, ``1,250``),
    ``+ - * / // % **``, parentheses and signs, with Python's precedence. A
    :class:`CalculatorError` says what is wrong with anything else."""
    if not isinstance(expression, str):
        raise TypeError(f"the expression must be text, got {type(expression).__name__}")
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(f"the expression has {len(expression)} characters; the calculator takes {MAX_LENGTH}")
    return _Parser(_tokens(expression), expression).parse()


def format_number(value: Fraction, digits: int = 10) -> str:
    """A whole number exactly (``24``); anything else as a decimal of ``digits`` significant
    digits, trailing zeros dropped (``0.3333333333``, ``2.5``)."""
    if value.denominator == 1:
        return str(value.numerator)
    with localcontext() as context:
        context.prec = digits
        decimal = Decimal(value.numerator) / Decimal(value.denominator)
        return format(decimal.normalize(), "f")


def calculator(expression: str) -> str:
    """The calculator tool: the value of ``expression`` as text (see :func:`calculate`)."""
    return format_number(calculate(expression))


# --------------------------------------------------------------------------------------
# The tool loop
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolMarkers:
    """How a call looks in the text: the model writes ``open`` + expression + ``close``; the tool's
    result and ``end`` are then written for it. GSM8K's annotations by default: ``<<48/2=24>>``."""

    open: str = "<<"
    close: str = "="
    end: str = ">>"

    def find(self, text: str) -> tuple[int, int] | None:
        """``(start, stop)`` of the first closed call's expression in ``text``, or None."""
        start = text.find(self.open)
        if start < 0:
            return None
        stop = text.find(self.close, start + len(self.open))
        return None if stop < 0 else (start + len(self.open), stop)


@dataclass
class ToolCall:
    """One call: the expression the model wrote, the tool's answer (or its error), and the text
    written into the sequence for the model (``""`` after an error: the model goes on alone)."""

    expression: str
    result: str | None
    error: str | None
    inserted: str


@dataclass
class Reply:
    """A reply generated from ``session`` (which already holds the prompt): iterate it for its
    pieces, text (``str``) as the model writes it and a :class:`ToolCall` whenever a tool ran.
    Afterwards ``text`` is the whole reply (results included), ``calls`` the calls, ``stopped``
    whether the model ended it with ``eos_id``, ``tokens`` how many tokens it sampled.

    ``tool=None`` generates plain text. ``should_stop()`` is asked before every token (a chat's
    stop button). After a call the text since the previous call is encoded again with the
    result: the model's own tokens may split it differently, and a token that ran past the
    ``close`` marker (``"=2"``) is cut there.
    """

    session: Session
    tokenizer: object
    max_new_tokens: int
    tool: Callable[[str], str] | None = calculator
    markers: ToolMarkers = field(default_factory=ToolMarkers)
    eos_id: int | None = None
    should_stop: Callable[[], bool] | None = None
    sampling: dict = field(default_factory=dict)
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    stopped: bool = False
    tokens: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be 0 or more, got {self.max_new_tokens}")
        unknown = set(self.sampling) - {"temperature", "greedy", "generator", "top_k", "top_p"}
        if unknown:
            raise TypeError(f"unknown sampling options {sorted(unknown)}")

    def _encode(self, text: str) -> list[int]:
        try:
            return self.tokenizer.encode(text, allowed_special="all")
        except TypeError:  # a tokenizer without special tokens
            return self.tokenizer.encode(text)

    def __iter__(self) -> Iterator[str | ToolCall]:
        session = self.session
        since = len(session.ids)  # the model's tokens since the last call start here
        shown = ""  # their text already given out
        for _ in range(self.max_new_tokens):
            if self.should_stop is not None and self.should_stop():
                break
            token = session.sample(**self.sampling)
            self.tokens += 1
            if token == self.eos_id:
                self.stopped = True
                break
            text = self.tokenizer.decode(session.ids[since:])
            if text.endswith("\ufffd"):  # half a UTF-8 character: wait for the rest
                continue
            call = self.markers.find(text) if self.tool is not None else None
            if call is None:
                self.text += text[len(shown) :]
                yield text[len(shown) :]
                shown = text
                continue
            start, stop = call
            kept = text[: stop + len(self.markers.close)]  # up to the close marker, nothing after it
            if len(kept) > len(shown):
                self.text += kept[len(shown) :]
                yield kept[len(shown) :]
            done = self._run(text[start:stop])
            self.calls.append(done)
            self.text += done.inserted
            yield done
            session.truncate(since)  # the model's text again, cut at the marker, and the result after it
            session.extend(self._encode(kept + done.inserted))
            since, shown = len(session.ids), ""
        end = len(session.ids) - (1 if self.stopped else 0)  # the end-of-text token is not text
        rest = self.tokenizer.decode(session.ids[since:end])[len(shown) :]
        if rest:  # what waited for a character that never completed
            self.text += rest
            yield rest

    def _run(self, expression: str) -> ToolCall:
        try:
            result = self.tool(expression)
        except (ValueError, ArithmeticError) as error:  # CalculatorError is a ValueError
            return ToolCall(expression, None, str(error), "")
        return ToolCall(expression, result, None, result + self.markers.end)


def answer_with_tools(
    model: GPT,
    tokenizer,
    prompt: str,
    max_new_tokens: int = 64,
    eos_id: int | None = None,
    tool: Callable[[str], str] | None = calculator,
    markers: ToolMarkers | None = None,
    *,
    greedy: bool = True,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> Reply:
    """The reply to ``prompt`` (greedy by default, as :func:`~course_lib.instruct.answer`), with
    ``tool`` run on every call the model closes: read ``.text``, ``.calls`` and ``.stopped``."""
    session = Session(model, tokenizer.encode(prompt, allowed_special="all"))
    sampling = dict(greedy=greedy, temperature=temperature, generator=generator)
    reply = Reply(session, tokenizer, max_new_tokens, tool, markers or ToolMarkers(), eos_id, sampling=sampling)
    for _ in reply:
        pass
    return reply
