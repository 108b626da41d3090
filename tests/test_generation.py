import pytest
import torch

from course_lib.generation import Session, cached_pass, filter_logits, generate, sample_next, stream, stream_text
from course_lib.model import GPT, GPTConfig
from course_lib.tokenization import BPETokenizer


@pytest.fixture
def model(tiny_gpt):
    return tiny_gpt(vocab_size=50, context_length=8, n_layers=1, d_model=16)


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


# --------------------------------------------------------------------------------------
# KV cache: exactly the tokens of recomputing from scratch
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("positional", ["learned", "rope", "sinusoidal", "alibi", "none"])
@pytest.mark.parametrize("fast", [True, False])
def test_kv_cache_gives_the_same_tokens_as_recomputing(positional, fast):
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=60, context_length=12, n_layers=2, n_heads=2, d_model=32, positional=positional, fast=fast)
    )
    start = torch.randint(0, 60, (3, 5))
    # 25 new tokens: the window slides past the context of 12, so the cache is refilled too
    for options in [dict(greedy=True), dict(top_k=8, temperature=1.3), dict(top_p=0.8)]:
        with_cache = generate(model, start, 25, generator=torch.Generator().manual_seed(3), use_cache=True, **options)
        without = generate(model, start, 25, generator=torch.Generator().manual_seed(3), use_cache=False, **options)
        assert torch.equal(with_cache, without), (positional, fast, options)


@pytest.mark.parametrize("positional, n_kv_heads", [("learned", None), ("rope", None), ("rope", 2)])
def test_cached_logits_match_the_full_forward_pass(positional, n_kv_heads):
    torch.manual_seed(1)
    config = GPTConfig(
        vocab_size=30,
        context_length=16,
        n_layers=3,
        n_heads=4,
        n_kv_heads=n_kv_heads,
        d_model=32,
        positional=positional,
    )
    model = GPT(config).eval()
    ids = torch.randint(0, 30, (2, 16))
    full = model(ids)  # (B, T, V)
    cache = model.new_cache()
    pieces = [model(ids[:, :7], cache=cache)]  # a prompt of 7 tokens, then one at a time
    pieces += [model(ids[:, t : t + 1], cache=cache) for t in range(7, 16)]
    assert cache.length == 16
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="holds at most 16 positions|stop at 15"):
        model(ids[:, :1], cache=cache)  # a full cache says so instead of going wrong


def test_cache_rejects_more_than_it_holds():
    from course_lib.attention import LayerKV

    layer = LayerKV(4)
    layer.append(torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8))
    with pytest.raises(ValueError, match="holds at most 4 positions"):
        layer.append(torch.zeros(1, 2, 2, 8), torch.zeros(1, 2, 2, 8))


# --------------------------------------------------------------------------------------
# top-k, top-p, end of text, streaming
# --------------------------------------------------------------------------------------


def test_top_k_keeps_the_k_largest():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    kept = filter_logits(logits, top_k=2)
    assert torch.equal(torch.isfinite(kept), torch.tensor([[False, True, False, True, False]]))
    assert torch.equal(filter_logits(logits, top_k=99), logits)


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.05, 0.5, 0.3, 0.15]])
    logits = probs.log()
    keep = lambda p: torch.isfinite(filter_logits(logits, top_p=p))[0].tolist()  # noqa: E731
    assert keep(0.5) == [False, True, False, False]  # 0.5 alone reaches 0.5
    assert keep(0.6) == [False, True, True, False]
    assert keep(0.95) == [False, True, True, True]  # 0.5 + 0.3 + 0.15 = 0.95
    assert keep(1.0) == [True, True, True, True]
    assert keep(0.01) == [False, True, False, False]  # always at least the most likely token


def test_top_p_matches_a_brute_force_definition():
    torch.manual_seed(0)
    logits = torch.randn(6, 40) * 2
    for p in (0.1, 0.5, 0.9):
        kept = torch.isfinite(filter_logits(logits, top_p=p))
        for row, mask in zip(logits, kept):
            probs, order = torch.softmax(row, -1).sort(descending=True)
            n = int((probs.cumsum(0) < p).sum()) + 1  # smallest prefix whose sum reaches p
            assert set(order[:n].tolist()) == set(mask.nonzero().flatten().tolist())


def test_sampling_never_leaves_the_filtered_set():
    torch.manual_seed(0)
    logits = torch.randn(1, 50).repeat(2000, 1)
    allowed = set(torch.topk(logits[0], 5).indices.tolist())
    drawn = sample_next(logits, top_k=5, generator=torch.Generator().manual_seed(0))
    assert set(drawn.flatten().tolist()) == allowed  # all 5 appear in 2,000 draws, nothing else


def test_bad_filters():
    with pytest.raises(ValueError, match="top_k must be a positive"):
        filter_logits(torch.zeros(1, 3), top_k=0)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        filter_logits(torch.zeros(1, 3), top_p=1.5)


def test_generation_stops_at_end_of_text(model):
    start = torch.tensor([[1, 2, 3], [4, 5, 6]])
    greedy = generate(model, start, 10, greedy=True)
    eos = int(greedy[0, 5])  # the third new token of row 0 becomes "end of text"
    out = generate(model, start, 10, greedy=True, eos_id=eos)
    first = (out[0, 3:] == eos).nonzero()[0].item()
    assert torch.equal(out[0, : 3 + first + 1], greedy[0, : 3 + first + 1])
    assert (out[0, 3 + first :] == eos).all()  # a finished row only repeats the end token
    row1_ends = (out[1, 3:] == eos).any()
    assert out.shape[1] == 13 or row1_ends  # it stops early only once every row ended


def test_stream_yields_what_generate_returns(model):
    start = torch.tensor([[3, 1, 4]])
    pieces = list(stream(model, start, 9, greedy=True))
    assert all(p.shape == (1, 1) for p in pieces)
    assert torch.equal(torch.cat([start, *pieces], dim=1), generate(model, start, 9, greedy=True))


def test_stream_text_waits_for_whole_characters():
    tok = BPETokenizer.from_merges([])  # bytes only: token i is byte i, so "ï" arrives in two halves
    text = "naïve café → ok"
    script = list(text.encode("utf-8"))

    class Scripted(torch.nn.Module):
        """Predicts the next byte of ``text``, whatever it is shown."""

        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def forward(self, idx):  # (1, T) -> (1, T, 256)
            logits = torch.full((1, idx.shape[1], 256), -1e9)
            logits[0, -1, script[min(idx.shape[1] - 1, len(script) - 1)]] = 0.0
            return logits

    pieces = list(stream_text(Scripted(), tok.encode, tok.decode, "x", len(script), greedy=True, context_length=64))
    assert "".join(pieces) == text
    assert "\ufffd" not in "".join(pieces) and "ï" in pieces and "→" in pieces  # never half a character
    assert pieces[:3] == ["n", "a", "ï"]


# --------------------------------------------------------------------------------------
# bad input, and a model on another device than its prompt or its generator
# --------------------------------------------------------------------------------------


def test_bad_token_ids_get_errors_that_name_the_problem():
    model = GPT(GPTConfig(vocab_size=50, context_length=16, n_layers=1, n_heads=2, d_model=16)).eval()
    with pytest.raises(ValueError, match=r"token id 50 is outside this model's vocabulary of 50 .*tokenizer"):
        model(torch.tensor([[1, 2, 50]]))
    with pytest.raises(ValueError, match="token id -1 is outside"):
        model(torch.tensor([[1, -1]]))
    with pytest.raises(TypeError, match="must be integers .*torch.float32"):
        model(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"shape \(batch, tokens\), got \(3,\) \(add a batch dimension"):
        model(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="the sequence is empty"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="max_new_tokens must be 0 or more, got -1"):
        generate(model, torch.tensor([[1, 2]]), -1)
    assert generate(model, torch.tensor([[1, 2]]), 0).tolist() == [[1, 2]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_prompts_and_cpu_generators_follow_the_model():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, context_length=16, n_layers=1, n_heads=2, d_model=16)).eval()
    prompt = torch.tensor([[1, 2, 3]])  # made on the CPU, as a student would
    on_cpu = generate(model, prompt, 20, generator=torch.Generator().manual_seed(0), top_k=10)
    model.cuda()
    on_gpu = generate(model, prompt, 20, generator=torch.Generator().manual_seed(0), top_k=10)
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), on_cpu)
    pieces = list(stream_text(model, lambda s: [1, 2], lambda ids: str(ids), "x", 5, generator=torch.Generator()))
    assert pieces


# --------------------------------------------------------------------------------------
# generate_batch: many prompts at once, each row exactly what it gets alone
# --------------------------------------------------------------------------------------


def sharp_model(positional: str = "learned", **config) -> GPT:
    """A random model whose greedy continuations wander (untied head, weights x8): with the
    default initialisation a tied random model only repeats its last token."""
    torch.manual_seed(0)
    base = dict(vocab_size=60, context_length=12, n_layers=2, n_heads=4, d_model=32, tie_weights=False)
    model = GPT(GPTConfig(**{**base, "positional": positional, **config})).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(8)
    return model


def prompts_of(*lengths: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 60, (n,), generator=g).tolist() for n in lengths]


def alone(model, prompt, n, **options) -> list[int]:
    """The trusted reference: one prompt through generate()."""
    return generate(model, torch.tensor([prompt]), n, **options)[0, len(prompt) :].tolist()


def end_token(rows: list[list[int]]) -> int:
    """A token that two rows first write at different steps: as end-of-text, rows stop apart."""
    for token in sorted({t for row in rows for t in row}):
        firsts = {row.index(token) for row in rows if token in row}
        if len(firsts) >= 2:
            return token
    raise AssertionError(f"no token to stop at in {rows}")


@pytest.mark.parametrize(
    "positional, config",
    [
        ("learned", {}),
        ("learned", {"fast": False}),
        ("rope", {}),
        ("rope", {"n_kv_heads": 2, "fast": False}),
        ("sinusoidal", {}),
        ("alibi", {}),
        ("none", {}),
    ],
)
def test_generate_batch_gives_every_row_the_tokens_it_gets_alone(positional, config, one_thread):
    from course_lib.generation import generate_batch

    model = sharp_model(positional, **config)
    prompts = prompts_of(1, 5, 12, 3)  # 12 = the whole context: that row's window slides at once
    greedy = generate_batch(model, prompts, 20, greedy=True)  # 20 new tokens: every row passes the context
    assert greedy == [alone(model, p, 20, greedy=True) for p in prompts]
    eos = end_token(greedy)
    stopped = generate_batch(model, prompts, 20, greedy=True, eos_id=eos)
    assert stopped == [alone(model, p, 20, greedy=True, eos_id=eos) for p in prompts]
    ends = [len(row) for row in stopped if row[-1] == eos]
    assert len(set(ends)) >= 2, stopped  # rows stopped at their own steps
    gens = lambda: [torch.Generator().manual_seed(10 + k) for k in range(len(prompts))]  # noqa: E731
    options = dict(top_k=10, temperature=1.3, eos_id=eos)
    sampled = generate_batch(model, prompts, 20, generator=gens(), **options)
    assert sampled == [alone(model, p, 20, generator=g, **options) for p, g in zip(prompts, gens())]


def test_one_generator_draws_for_the_batch_as_generate_does():
    from course_lib.generation import generate_batch

    model = sharp_model("rope")
    prompts = prompts_of(4, 4, 4)  # equal lengths: generate() takes them as one tensor
    new = generate_batch(model, prompts, 10, generator=torch.Generator().manual_seed(0), top_p=0.9)
    out = generate(model, torch.tensor(prompts), 10, generator=torch.Generator().manual_seed(0), top_p=0.9)
    assert new == out[:, 4:].tolist()


def test_generate_batch_on_bad_input_names_the_problem():
    from course_lib.generation import generate_batch

    model = sharp_model()
    with pytest.raises(ValueError, match="prompts is empty"):
        generate_batch(model, [], 5)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        generate_batch(model, [[1, 2], []], 5)
    with pytest.raises(ValueError, match=r"prompt 0 has 13 tokens, more than the context of 12: .*prompt\[-12:\]"):
        generate_batch(model, [list(range(13))], 5)
    with pytest.raises(TypeError, match="list of token-id lists"):
        generate_batch(model, torch.tensor([[1, 2]]), 5)
    with pytest.raises(TypeError, match="prompt 0 must be a list of token ids"):
        generate_batch(model, ["hello"], 5)
    with pytest.raises(ValueError, match="token id 60 is outside"):
        generate_batch(model, [[1, 60]], 5)
    with pytest.raises(ValueError, match="one generator per prompt: 2 prompts, 1 generators"):
        generate_batch(model, [[1], [2]], 5, generator=[torch.Generator()])
    with pytest.raises(ValueError, match="max_new_tokens must be 0 or more"):
        generate_batch(model, [[1]], -1)
    with pytest.raises(ValueError, match="temperature must be positive"):
        generate_batch(model, [[1]], 3, temperature=0)
    with pytest.raises(TypeError, match="needs a course_lib GPT"):
        generate_batch(torch.nn.Linear(2, 2), [[1]], 3)
    assert generate_batch(model, [[1, 2], [3]], 0) == [[], []]


# --------------------------------------------------------------------------------------
# the static cache: the same logits as the teaching cache, through torch.compile too
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("positional, n_kv_heads", [("learned", None), ("rope", 2), ("alibi", None)])
def test_static_cache_logits_match_each_row_alone(positional, n_kv_heads):
    """Left-padded rows, prefilled together then fed one token at a time, give every row the
    logits of its own full forward pass."""
    model = sharp_model(positional, context_length=16, n_kv_heads=n_kv_heads)
    rows = prompts_of(16, 16, 16)
    lengths = [8, 3, 1]  # row b's prompt: its first 8, 3 and 1 tokens, padded on the left
    T = max(lengths)
    pad = torch.tensor([T - n for n in lengths])
    ids = torch.zeros(3, T, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, T - n :] = torch.tensor(rows[b][:n])
    cache = model.new_static_cache(pad, 16)
    with pytest.raises(RuntimeError, match=r"for generating, not training: run under torch.no_grad\(\)"):
        model(ids, cache=cache)
    with torch.no_grad():
        pieces = static_pieces(model, rows, lengths, cache, ids)
    for b, n in enumerate(lengths):
        full = model(torch.tensor([rows[b][: n + 6]]))[0]  # (n + 6, V): the row alone, no cache
        got = torch.cat([pieces[0][b, T - n :], *[p[b] for p in pieces[1:]]])
        torch.testing.assert_close(got, full, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="holds 3 rows, but 2 were given"), torch.no_grad():
        model(ids[:2, :1], cache=cache)


def static_pieces(model, rows, lengths, cache, ids):
    pieces = [model(ids, cache=cache)]  # (3, T, V)
    for t in range(6):  # then one token per row per step
        pieces.append(model(torch.tensor([[rows[b][n + t]] for b, n in enumerate(lengths)]), cache=cache))
    return pieces


def test_every_tensor_a_decoding_step_writes_is_a_static_address():
    """A CUDA graph replays a step at fixed addresses, so inductor records one only if every tensor
    the step mutates is marked static; one unmarked write (each layer writes through a view of the
    cache, and a view does not carry its base's mark) and it skips the graph for the whole step.
    Every in-place write of a prefill and a decoding step is recorded here, on the CPU."""
    from torch._dynamo.utils import get_static_address_type
    from torch.utils._python_dispatch import TorchDispatchMode

    from course_lib.generation import decode_step

    class Writes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.written = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            for argument, value in zip(func._schema.arguments, args):
                if argument.alias_info is not None and argument.alias_info.is_write:
                    self.written.append((func.__name__, value))
            return func(*args, **kwargs)

    model = sharp_model("rope", n_kv_heads=2)
    cache = model.new_static_cache(torch.tensor([2, 0]), 12)
    with torch.no_grad(), Writes() as writes:
        model(torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]]), cache=cache)  # the prompt
        decode_step(model, cache, torch.tensor([[11], [12]]))  # one step
    names = {name for name, _ in writes.written}
    assert {"index_copy_.default", "add_.Tensor"} <= names  # the layers' keys and values, the slot
    assert len(writes.written) == 2 * (2 * len(model.transformer.h) + 1)
    unmarked = [name for name, tensor in writes.written if get_static_address_type(tensor) is None]
    assert unmarked == []


def test_the_compiled_step_generates_the_same_tokens(one_thread):
    from torch._dynamo.utils import counters

    from course_lib.generation import compiled_step, generate_batch

    torch._dynamo.reset()
    counters.clear()
    model = sharp_model("rope", n_kv_heads=2)
    prompts = prompts_of(2, 7, 4)
    eager = generate_batch(model, prompts, 16, greedy=True)
    for _ in range(2):  # the same shapes again: the compiled step is reused, never recompiled
        assert generate_batch(model, prompts, 16, greedy=True, step=compiled_step("aot_eager")) == eager
    assert counters["stats"]["unique_graphs"] == 1  # one graph for 30 steps: the slot is a tensor
    assert eager == [alone(model, p, 16, greedy=True) for p in prompts]


def host_syncs(run) -> int:
    """How often ``run`` makes the host wait for a tensor's value (``.item()``, ``bool(tensor)``,
    ``int(tensor)``: each reads one number through ``aten::_local_scalar_dense``), counted on the CPU;
    on a GPU each is a synchronisation."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        syncs = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                Count.syncs += 1
            return func(*args, **(kwargs or {}))

    with Count():
        run()
    return Count.syncs


def test_the_loop_asks_the_device_whether_rows_finished_every_few_tokens_only(one_thread):
    """The host waits for the device once per ``check_every`` tokens, not once per token (a step's
    synchronisation on a GPU), and the tokens are the same: a finished row writes its end token
    until every row has."""
    from torch.utils._python_dispatch import _disable_current_modes

    from course_lib.generation import decode_step, generate_batch

    model = sharp_model("rope", n_kv_heads=2, context_length=64)
    prompts = prompts_of(5, 3)
    eos = end_token(generate_batch(model, prompts, 40, greedy=True))
    every = {k: generate_batch(model, prompts, 40, greedy=True, eos_id=eos, check_every=k) for k in (1, 8)}
    assert every[8] == every[1] and any(len(row) < 40 for row in every[1])

    def step(*args):  # the step itself is not counted: the loop around it is (a compiled step checks no ids)
        with _disable_current_modes():
            return decode_step(*args)

    rows = prompts_of(5, 4)
    syncs = {
        (k, n): host_syncs(
            lambda k=k, n=n: generate_batch(model, rows, n, greedy=True, eos_id=59, check_every=k, step=step)
        )
        for k in (1, 8)
        for n in (16, 32)
    }
    assert syncs[1, 32] - syncs[1, 16] == 16  # one per token: asked every token
    assert syncs[8, 32] - syncs[8, 16] == 2  # 16 more tokens, 2 more questions


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_compiled_step_is_a_cuda_graph():
    """mode="reduce-overhead" replays the step as one CUDA graph, unless inductor skips it (an
    unmarked mutated input did: SmolLM2 decoded at 2% of the GPU's bandwidth limit)."""
    from torch._dynamo.utils import counters

    from course_lib.generation import compiled_step, generate_batch

    torch._dynamo.reset()
    counters.clear()
    model = sharp_model("rope", n_kv_heads=2).cuda()
    prompts = prompts_of(2, 7, 4)
    compiled = generate_batch(model, prompts, 16, greedy=True, step=compiled_step(mode="reduce-overhead"))
    assert [len(row) for row in compiled] == [16, 16, 16]  # fused kernels may round the last bits otherwise
    assert counters["inductor"]["cudagraph_skips"] == 0


# --------------------------------------------------------------------------------------
# Session: one sequence, extended, sampled and cut back (the tool loop and the chat use it)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_a_session_samples_what_generate_samples_and_takes_tokens_back(positional, tiny_gpt):
    model = tiny_gpt(positional=positional, tie_weights=False)
    prompt = [1, 2, 3, 4, 5]
    session = Session(model, prompt)
    tokens = [session.sample(greedy=True) for _ in range(20)]  # past the context of 16: the window slides
    assert tokens == generate(model, torch.tensor([prompt]), 20, greedy=True)[0, 5:].tolist()
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    session = Session(model, prompt)
    drawn = [session.sample(1.3, generator=g1, top_k=5) for _ in range(20)]
    assert drawn == generate(model, torch.tensor([prompt]), 20, temperature=1.3, generator=g2, top_k=5)[0, 5:].tolist()
    for keep, more in [(9, [7, 7]), (7, []), (3, [8])]:  # inside the cache, at its end, before a slide
        session = Session(model, prompt)
        for _ in range(14):
            session.sample(greedy=True)
        session.truncate(keep)
        session.extend(more)
        fresh = Session(model, session.ids)
        assert [session.sample(greedy=True) for _ in range(4)] == [fresh.sample(greedy=True) for _ in range(4)]
    with pytest.raises(ValueError, match="cannot truncate a session of 5 tokens to 6"):
        Session(model, prompt).truncate(6)
    with pytest.raises(ValueError, match="the session is empty"):
        Session(model).sample()
    with pytest.raises(ValueError, match="pass context_length"):
        Session(torch.nn.Linear(2, 2))


def test_cached_pass_forgets_what_it_ran(tiny_gpt):
    """Each call runs n tokens after the cached prompt and truncates back: two passes of 8 after 3
    tokens would overflow a 16-token context if the first were kept."""
    model = tiny_gpt(0).eval()
    with torch.no_grad():
        run = cached_pass(model, [1, 2, 3], 8)
        run()
        run()
