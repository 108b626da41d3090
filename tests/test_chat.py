"""A conversation with a model: templates, turns over one KV cache, streaming, stopping."""

import pytest
import torch

from course_lib.chat import Chat, course_chat_prompt
from course_lib.generation import generate
from course_lib.instruct import ASSISTANT, USER, format_prompt
from course_lib.model import GPT, GPTConfig
from course_lib.tokenization import ENDOFTEXT, train_bpe

# A template shaped like SmolLM2's (a default system turn, <|im_start|>role ... <|im_end|>)
TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nBe helpful.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = [ENDOFTEXT, USER, ASSISTANT, "<|im_start|>", "<|im_end|>"]


@pytest.fixture(scope="module")
def chatty():
    """(model, tokenizer): a small random GPT whose vocabulary has both chat formats' tokens."""
    tokenizer = train_bpe("the cat sat on the mat. what is a cat? a cat is a pet. " * 20, 300, special_tokens=SPECIALS)
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, context_length=96, n_layers=2, n_heads=2, d_model=32)
    model = GPT(config).eval()
    with torch.no_grad():  # an untied, sharper head: replies that wander instead of repeating
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight) * 0.5)
        model.config.tie_weights = False
    return model, tokenizer


def test_the_course_format_is_chapter_11s_prompt_turn_after_turn():
    one = [{"role": "user", "content": " What is a cat? "}]
    assert course_chat_prompt(one) == format_prompt({"instruction": "What is a cat?"}, "chat")
    two = one + [{"role": "assistant", "content": "a pet"}, {"role": "user", "content": "and a dog?"}]
    assert course_chat_prompt(two) == f"{USER}What is a cat?{ASSISTANT}a pet{ENDOFTEXT}{USER}and a dog?{ASSISTANT}"
    short = course_chat_prompt(two, "short")
    assert short.startswith(format_prompt({"instruction": "What is a cat?"}, "short") + f"a pet{ENDOFTEXT}")
    assert short.endswith(format_prompt({"instruction": "and a dog?"}, "short"))
    with pytest.raises(ValueError, match="user and assistant turns only, got 'system'"):
        course_chat_prompt([{"role": "system", "content": "x"}])
    with pytest.raises(ValueError, match="unknown prompt style 'long'"):
        course_chat_prompt(one, "long")
    with pytest.raises(ValueError, match="must answer a user turn"):
        course_chat_prompt([{"role": "assistant", "content": "x"}])


@pytest.mark.parametrize("template", [None, "short", TEMPLATE])
def test_each_reply_is_what_generate_writes_after_the_rendered_conversation(chatty, template):
    model, tokenizer = chatty
    eos = tokenizer.special_tokens["<|im_end|>" if template == TEMPLATE else ENDOFTEXT]
    chat = Chat(model, tokenizer, template, eos_id=eos, max_new_tokens=12)
    seen = []
    for message in ("what is a cat?", "the mat?", "a pet"):  # three turns over one session
        prompt = tokenizer.encode(_rendered(chat, message), allowed_special="all")
        pieces = list(chat.send(message))
        seen.append(pieces)
        out = generate(model, torch.tensor([prompt]), 12, greedy=True, eos_id=eos)[0, len(prompt) :].tolist()
        expected = tokenizer.decode([t for t in out if t != eos])
        assert "".join(pieces) == expected == chat.messages[-1]["content"]
    assert [m["role"] for m in chat.messages] == ["user", "assistant"] * 3
    assert all(len(p) >= 1 for p in seen)  # streamed, piece by piece


def _rendered(chat: Chat, message: str) -> str:
    """The prompt the chat will render once ``message`` is added."""
    chat.messages.append({"role": "user", "content": message})
    try:
        return chat.render()
    finally:
        chat.messages.pop()


def test_a_new_turn_runs_only_the_tokens_the_conversation_gained(chatty):
    model, tokenizer = chatty
    chat = Chat(model, tokenizer, TEMPLATE, eos_id=tokenizer.special_tokens["<|im_end|>"], max_new_tokens=8)
    first = tokenizer.encode(_rendered(chat, "what is a cat?"), allowed_special="all")
    chat.say("what is a cat?")
    now = tokenizer.encode(_rendered(chat, "a pet"), allowed_special="all")
    ran = []
    hook = model.transformer.wte.register_forward_hook(lambda module, args, out: ran.append(args[0].shape[1]))
    try:
        chat.say("a pet")
    finally:
        hook.remove()
    # the first turn's prompt comes from the cache; the reply's tokens may run again where the
    # rendered text encodes differently from what the model sampled
    assert ran[0] <= len(now) - len(first) and ran[1:] == [1] * (len(ran) - 1)


def test_stop_ends_the_reply_and_the_next_turn_goes_on(chatty):
    model, tokenizer = chatty
    chat = Chat(model, tokenizer, eos_id=tokenizer.special_tokens["<|im_end|>"], max_new_tokens=40)
    pieces = []
    for piece in chat.send("what is a cat?"):
        pieces.append(piece)
        if len(pieces) == 3:
            chat.stop()  # as the Stop button does, from another thread
    assert len(pieces) == 3 and chat.last_end == "stopped" and chat.last_tokens < 40
    assert chat.messages[-1] == {"role": "assistant", "content": "".join(pieces)}
    assert chat.say("the mat?") and chat.last_end in ("end of turn", "token limit")
    assert chat.tokens_per_second > 0
    chat.reset()
    assert chat.messages == []


def test_temperature_and_seed(chatty):
    model, tokenizer = chatty
    eos = tokenizer.special_tokens["<|im_end|>"]
    replies = [
        Chat(model, tokenizer, eos_id=eos, max_new_tokens=10, temperature=1.0, seed=s).say("a cat") for s in (0, 0, 1)
    ]
    assert replies[0] == replies[1] != replies[2]


def test_bad_chats_name_the_problem(chatty):
    model, tokenizer = chatty
    with pytest.raises(ValueError, match="the message is empty"):
        next(Chat(model, tokenizer).send("  "))
    plain = train_bpe("the cat sat on the mat " * 10, 270, special_tokens=[ENDOFTEXT])
    with pytest.raises(ValueError, match="needs the role tokens <\\|user\\|> and <\\|assistant\\|>.*template='short'"):
        Chat(model, plain)
    assert Chat(model, plain, "short").render() == ""
    with pytest.raises(ValueError, match="user and assistant turns only"):
        Chat(model, tokenizer, system="be nice")
    assert (
        Chat(model, tokenizer, TEMPLATE, eos_id=1, system="be nice").render().startswith("<|im_start|>system\nbe nice")
    )
