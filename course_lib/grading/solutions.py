"""Reference solutions for instructors: one plain solution per exercise, written as a student would.

``python3 course.py solutions`` lists the exercises, ``python3 course.py solutions NAME...`` prints
the solutions of those (``python -m course_lib.grading.solutions``). The checker does not use this file:
an exercise is answered by its cases' expected values or by a tested course_lib function
(:mod:`course_lib.exercises`), so a course handed to a graded class may leave this file out, as it
may ``hidden_cases.py``. The demo set of hidden cases answers its cases with these solutions where an
exercise has no course_lib reference; ``tests/test_exercises.py`` checks each one with the checker.

An exercise without a solution here (one added later) is shown by its reference, when it has one.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections import Counter
from collections.abc import Callable

import torch
import torch.nn.functional as F

SOLUTIONS: dict[str, Callable] = {}  # exercise name -> a correct solution, in the course's order


def solution(name: str) -> Callable[[Callable], Callable]:
    """Register the solution of exercise ``name``."""

    def register(fn: Callable) -> Callable:
        if name in SOLUTIONS:
            raise ValueError(f"the solution of {name!r} is defined twice")
        SOLUTIONS[name] = fn
        return fn

    return register


# == 00 · Language models and PyTorch ======================================================


@solution("trigram-counts")
def trigram_counts(ids: list[int], vocab_size: int) -> torch.Tensor:
    counts = torch.zeros(vocab_size, vocab_size, vocab_size, dtype=torch.long)  # (V, V, V)
    for a, b, c in zip(ids, ids[1:], ids[2:]):
        counts[a, b, c] += 1
    return counts


@solution("interpolated-bigram")
def interpolated_bigram(counts: torch.Tensor, lam: float) -> torch.Tensor:
    counts = counts.double()
    rows = counts.sum(dim=1, keepdim=True)  # (V, 1): how often each token came first
    unigram = counts.sum(dim=0) / counts.sum()  # (V,): how often each token came second
    bigram = torch.where(rows > 0, counts / rows.clamp_min(1), unigram)  # (V, V): unseen rows, the unigram
    return (lam * bigram + (1 - lam) * unigram).float()  # (V, V)


@solution("accumulated-grad")
def accumulated_grad(x: float, times: int) -> float:
    return times * (3 * x**2 - 2)  # backward() adds to .grad: without zero_grad() the gradients pile up


@solution("logsumexp")
def logsumexp(x: torch.Tensor) -> torch.Tensor:
    m = x.max(dim=-1, keepdim=True).values  # (..., 1): each row's own maximum, not the whole tensor's
    m = torch.where(m == float("-inf"), 0.0, m)  # a row of -inf only: exp gives 0s, log 0 = -inf, not nan
    return (m + (x - m).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)


# == 01 · Tokenization =====================================================================


@solution("chunk-pair-counts")
def chunk_pair_counts(chunks: dict[tuple[int, ...], int]) -> dict[tuple[int, int], int]:
    counts: dict[tuple[int, int], int] = {}
    for chunk, n in chunks.items():
        for pair in zip(chunk, chunk[1:]):  # pairs inside the chunk only, overlapping
            counts[pair] = counts.get(pair, 0) + n
    return counts


@solution("encode-with-special")
def encode_with_special(text: str, special_id: int) -> list[int]:
    ids: list[int] = []
    for k, piece in enumerate(text.split("<|endoftext|>")):
        if k > 0:
            ids.append(special_id)  # one marker between two pieces
        ids += list(piece.encode("utf-8"))
    return ids


@solution("longest-match")
def longest_match(text: str, vocab: set[str]) -> list[str]:
    tokens, i = [], 0
    while i < len(text):
        length = next((n for n in range(len(text) - i, 0, -1) if text[i : i + n] in vocab), 1)
        tokens.append(text[i : i + length])
        i += length
    return tokens


@solution("unk-rate")
def unk_rate(train_words: list[str], val_words: list[str], min_count: int) -> float:
    counts = Counter(train_words)
    vocab = {w for w, n in counts.items() if n >= min_count}
    return sum(w not in vocab for w in val_words) / len(val_words)


# == 02 · Embeddings and training data =====================================================


@solution("padded-windows")
def padded_windows(ids: list[int], context_length: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    T = context_length
    n = math.ceil((len(ids) - 1) / T)  # every token after the first is a target once
    inputs = torch.full((n, T), pad_id)  # (N, T)
    targets = torch.full((n, T), -100)  # (N, T): -100 is skipped by cross-entropy
    for i in range(n):
        x, y = ids[i * T : i * T + T], ids[i * T + 1 : i * T + T + 1]
        inputs[i, : len(x)] = torch.tensor(x)
        targets[i, : len(y)] = torch.tensor(y)
    return inputs, targets


@solution("embedding-grad")
def embedding_grad(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    counts = torch.bincount(ids.flatten(), minlength=weight.shape[0])  # (V,): lookups per row
    return 2 * counts[:, None] * weight  # (V, C): d(row ** 2)/d(row) = 2 row, once per lookup


@solution("split-windows")
def split_windows(
    ids: torch.Tensor, context_length: int, stride: int, val_fraction: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    cut = int(len(ids) * (1 - val_fraction))  # split the tokens first: no window crosses it

    def windows(part: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        starts = range(0, len(part) - context_length, stride)
        x = [part[s : s + context_length] for s in starts]
        y = [part[s + 1 : s + context_length + 1] for s in starts]
        empty = torch.zeros(0, context_length, dtype=part.dtype)
        return (torch.stack(x), torch.stack(y)) if x else (empty, empty)

    return (*windows(ids[:cut]), *windows(ids[cut:]))


@solution("nearest-tokens")
def nearest_tokens(weight: torch.Tensor, token: int, k: int) -> list[int]:
    unit = weight / weight.norm(dim=1, keepdim=True)  # (V, C): directions only
    similarity = unit @ unit[token]  # (V,)
    similarity[token] = float("-inf")  # not itself
    return similarity.topk(k).indices.tolist()


# == 03 · The MLP language model ===========================================================


@solution("label-smoothing")
def smoothed_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, eps: float) -> torch.Tensor:
    log_p = logits - torch.logsumexp(logits, dim=-1, keepdim=True)  # (N, V): finite for large logits
    nll = -log_p[torch.arange(len(targets)), targets]  # (N,): the true class
    uniform = -log_p.mean(dim=-1)  # (N,): eps is spread over all V classes, the true one included
    return ((1 - eps) * nll + eps * uniform).mean()


@solution("window-losses")
def window_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T): 0 at -100
    real = (targets != -100).sum(dim=1)  # (B,): each window's own number of targets
    return losses.sum(dim=1) / real


@solution("min-training-loss")
def min_training_loss(ids: list[int], c: int) -> float:
    pairs = Counter((tuple(ids[t - c : t]), ids[t]) for t in range(c, len(ids)))  # N(context, next)
    contexts = Counter()  # N(context): only where a next token follows
    for (context, _), n in pairs.items():
        contexts[context] += n
    total = sum(n * -math.log(n / contexts[context]) for (context, _), n in pairs.items())
    return total / (len(ids) - c)  # the mean over positions, in nats


@solution("bits-per-character")
def bits_per_character(token_losses: list[float], token_texts: list[str]) -> float:
    bits = sum(token_losses) / math.log(2)  # the whole text's code length
    return bits / sum(len(t) for t in token_texts)  # a ratio of sums: every character counts once


# == 04 · Self-attention ===================================================================


@solution("linear-attention")
def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1  # (..., Tq, d), (..., Tk, d): positive features
    numerator = phi_q @ (phi_k.transpose(-2, -1) @ v)  # (..., Tq, dv): (d, dv) first, linear in T
    denominator = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # (..., Tq, 1): each row's total weight
    return numerator / denominator


@solution("score-scale")
def score_scale(d: int, var_q: float, var_k: float) -> float:
    return math.sqrt(d * var_q * var_k)  # Var(q . k) = d var_q var_k for independent mean-0 entries


@solution("attention-pool")
def attention_pool(x: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    scores = x @ query / math.sqrt(x.shape[-1])  # (B, T)
    weights = torch.softmax(scores, dim=-1)  # (B, T): over the tokens of each text, not the batch
    return (weights.unsqueeze(-1) * x).sum(dim=1)  # (B, C)


@solution("attention-entropy")
def attention_entropy(weights: torch.Tensor) -> float:
    plogp = torch.where(weights > 0, weights * weights.clamp_min(1e-30).log(), 0.0)  # 0 log 0 = 0
    return -plogp.sum(dim=-1).mean().item()


# == 05 · Causal masking and multi-head attention ==========================================


@solution("local-causal-mask")
def local_causal_mask(T: int, window: int) -> torch.Tensor:
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]  # (T, 1), (1, T)
    return (j <= i) & (i - j < window)  # (T, T): the past, at most window tokens back, itself included


@solution("left-padded-mask")
def left_padded_mask(lengths: torch.Tensor, T: int) -> torch.Tensor:
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))  # (T, T)
    real = torch.arange(T) >= (T - lengths)[:, None]  # (B, T): the last lengths[b] positions
    itself = torch.eye(T, dtype=torch.bool)  # a padding query attends to itself: no empty row
    return (causal & real[:, None, :]) | itself  # (B, T, T)


@solution("mha-parameters")
def mha_parameters(d_model: int, n_heads: int) -> int:
    head_dim = d_model // n_heads
    heads = n_heads * 3 * (d_model * head_dim + head_dim)  # query, key, value of every head
    return heads + d_model * d_model + d_model  # the output projection; n_heads cancels out


@solution("previous-token-score")
def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=-1)  # (...,): mean of w[i, i - 1]


# == 06 · Positional encodings =============================================================


@solution("rope-scaling")
def scaled_rope_frequencies(head_dim: int, scale: float, method: str) -> torch.Tensor:
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim  # (D/2,): 2i / D
    if method == "linear":
        return (10000.0**-exponents / scale).float()  # every position divided by scale
    base = 10000.0 * scale ** (head_dim / (head_dim - 2))  # the last pair slowed by exactly scale
    return (base**-exponents).float()


@solution("alibi-bias")
def alibi_bias(slopes: torch.Tensor, T: int) -> torch.Tensor:
    position = torch.arange(T)
    back = position[:, None] - position[None, :]  # (T, T): query i minus key j, negative for the future
    bias = -slopes[:, None, None] * back.clamp(min=0)  # (H, T, T), in the dtype of slopes
    return bias.masked_fill(back < 0, float("-inf"))  # the causal mask in the same tensor


@solution("stretch-positions")
def stretch_positions(table: torch.Tensor, new_length: int) -> torch.Tensor:
    L = table.shape[0]
    x = torch.arange(new_length, dtype=torch.float64) * (L - 1) / (new_length - 1)  # (N,): old positions
    low = x.floor().long().clamp(max=L - 2)  # (N,): the row before; the last row mixes L - 2 and L - 1
    w = (x - low).to(table.dtype)[:, None]  # (N, 1): the share of the row after
    return (1 - w) * table[low] + w * table[low + 1]  # (N, C)


@solution("alibi-reach")
def alibi_reach(slope: float, T: int, share: float) -> int:
    weights = torch.exp(-slope * torch.arange(T, dtype=torch.float64))  # (T,): nearest key first
    mass = (weights / weights.sum()).cumsum(0)  # (T,): the weight of the r nearest keys
    return min(T, int((mass < share).sum()) + 1)  # rounding may leave the last sum a hair below 1


# == 07 · The transformer block and the GPT model ==========================================


@solution("llama-parameters")
def llama_parameters(vocab_size: int, d_model: int, n_layers: int, hidden: int) -> int:
    C = d_model
    per_layer = 4 * C * C + 3 * C * hidden + 2 * C  # q, k, v, o; SwiGLU's gate, up, down; two RMSNorms
    return 2 * vocab_size * C + n_layers * per_layer + C  # embedding and untied head, layers, final norm


@solution("rms-norm")
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x  # half-precision squares overflow
    rms = torch.sqrt(work.pow(2).mean(dim=-1, keepdim=True) + eps)  # (..., 1): over each vector's features
    return (work / rms * (1 + weight.to(work.dtype))).to(x.dtype)  # Gemma's scale: 1 + weight


@solution("residual-std")
def residual_std(n_layers: int, branch_std: float) -> float:
    return math.sqrt(1 + 2 * n_layers * branch_std**2)  # independent variances add, two branches a block


@solution("dead-fraction")
def dead_fraction(h: torch.Tensor) -> float:
    never_on = (h.reshape(-1, h.shape[-1]) <= 0).all(dim=0)  # (hidden,): <= 0 at every position
    return never_on.float().mean().item()


# == 08 · Pretraining ======================================================================


@solution("lr-from-zero")
def lr_from_zero(step: int, max_lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return max_lr * step / warmup_steps  # 0 at step 0
    if step > total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2


@solution("adamw-first-step")
def adamw_first_step(w: torch.Tensor, g: torch.Tensor, lr: float, weight_decay: float) -> torch.Tensor:
    m_hat, v_hat = g, g**2  # one gradient in each average, bias-corrected
    return w * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + 1e-8)  # decay first, then about lr


@solution("accumulated-gradient")
def accumulated_gradient(micro_grads: list[torch.Tensor], sizes: list[int]) -> torch.Tensor:
    return sum(n * g for n, g in zip(sizes, micro_grads)) / sum(sizes)  # each mean weighted by its examples


@solution("smoothed-loss")
def smoothed_loss(values: list[float], beta: float) -> list[float]:
    s, out = 0.0, []
    for t, x in enumerate(values, start=1):
        s = beta * s + (1 - beta) * x
        out.append(s / (1 - beta**t))  # the bias correction: s started at 0
    return out


# == 09 · Generating text ==================================================================


@solution("top-p-min-keep")
def top_p_min_keep(logits: torch.Tensor, p: float, min_tokens_to_keep: int) -> torch.Tensor:
    probs, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)  # (B, V) each
    before = probs.cumsum(dim=-1) - probs  # (B, V): the mass of the tokens before each
    rank = torch.arange(logits.shape[-1], device=logits.device)  # (V,)
    drop_sorted = (before >= p) & (rank >= min_tokens_to_keep)
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


@solution("min-p")
def min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    threshold = min_p * probs.max(dim=-1, keepdim=True).values  # (B, 1): scaled by each row's top token
    return logits.masked_fill(probs < threshold, float("-inf"))


@solution("repetition-penalty")
def repetition_penalty(logits: torch.Tensor, previous: list[int], penalty: float) -> torch.Tensor:
    logits = logits.clone()
    for token in set(previous):  # once per distinct token
        value = logits[token]
        logits[token] = value / penalty if value > 0 else value * penalty  # always towards less likely
    return logits


@solution("distinct-n")
def distinct_n(tokens: list[int], n: int) -> float:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams)


# == 10 · Fine-tuning for classification ===================================================


@solution("mean-pooling")
def mean_pooling(features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    real = torch.arange(features.shape[1]) < lengths[:, None]  # (B, T): True at real tokens
    total = (features * real[..., None]).sum(dim=1)  # (B, C): padding zeroed
    return total / lengths[:, None].to(features.dtype)


@solution("wilson-interval")
def wilson(correct: int, n: int) -> tuple[float, float]:
    z = 1.96

    def root(k: float, sign: int) -> float:  # a root of (k/n - p)^2 = z^2 p (1 - p) / n, collected in p
        p = k / n
        a, b, c = 1 + z * z / n, -(2 * p + z * z / n), p * p
        return (-b + sign * math.sqrt(max(b * b - 4 * a * c, 0.0))) / (2 * a)

    low = 0.0 if correct == 0 else root(correct - 0.5, -1)  # half a count towards p on each side
    high = 1.0 if correct == n else root(correct + 0.5, +1)
    return low, high


@solution("last-real-token")
def last_real_token(features: torch.Tensor, lengths: torch.Tensor, side: str) -> torch.Tensor:
    if side == "left":
        return features[:, -1]  # (B, C): left padding ends every row at the last position
    return features[torch.arange(len(lengths)), lengths.long() - 1]  # (B, C): row b ends at lengths[b] - 1


@solution("macro-f1")
def macro_f1(predictions: list[int], labels: list[int]) -> float:
    scores = []
    for k in sorted(set(labels) | set(predictions)):
        tp = sum(p == k and y == k for p, y in zip(predictions, labels))
        fp = sum(p == k and y != k for p, y in zip(predictions, labels))
        fn = sum(p != k and y == k for p, y in zip(predictions, labels))
        scores.append(2 * tp / (2 * tp + fp + fn))
    return sum(scores) / len(scores)


# == 11 · Instruction fine-tuning ==========================================================


@solution("answer-loss")
def answer_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    keep = targets != -100  # (B, T): the targets with a loss (token 0 is one of them)
    logp = torch.log_softmax(logits, dim=-1)  # (B, T, V)
    picked = logp.gather(-1, targets.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    return -(picked * keep).sum() / keep.sum()  # the mean over the kept targets of the whole batch


@solution("chat-targets")
def chat_targets(ids: list[int], assistant_id: int, eot_id: int) -> torch.Tensor:
    in_reply, is_reply = False, []
    for token in ids:
        is_reply.append(in_reply)  # the marker itself is prompt; the closing end-of-text is reply
        if token == assistant_id:
            in_reply = True
        elif token == eot_id:
            in_reply = False
    targets = torch.tensor(ids[1:], dtype=torch.long)  # (T - 1,): target t is token t + 1
    keep = torch.tensor(is_reply[1:], dtype=torch.bool)
    return targets.masked_fill(~keep, -100)


@solution("loss-share")
def loss_share(lengths: list[int], prompt_lengths: list[int], mask_instruction: bool) -> float:
    with_loss = sum(n - 1 for n in lengths)  # n tokens, n - 1 targets, the closing end-of-text included
    if mask_instruction:
        with_loss -= sum(p - 1 for p in prompt_lengths)  # a prompt of p tokens hides targets 0 .. p - 2
    return with_loss / (len(lengths) * (max(lengths) - 1))  # padded to the longest row


@solution("bradley-terry")
def bradley_terry(wins: torch.Tensor) -> torch.Tensor:
    wins = wins.double()
    games = wins + wins.T  # (M, M): n_ij, the votes between i and j
    won = wins.sum(dim=1)  # (M,): W_i
    p = torch.ones(len(wins), dtype=torch.float64)
    for _ in range(100_000):  # the MM update (Hunter, 2004): each step raises the likelihood
        new = won / (games / (p[:, None] + p[None, :])).sum(dim=1)
        new = new / new.prod() ** (1 / len(new))  # the scale is free: fix the geometric mean at 1
        if (new.log() - p.log()).abs().max() < 1e-12:
            break
        p = new
    s = new.log()
    return (s - s.mean()).float()


# == 12 · Prompting, inference-time compute, and limits ====================================


@solution("pass-at-k")
def pass_at_k(n: int, c: int, k: int) -> float:
    return 1 - math.comb(n - c, k) / math.comb(n, k)  # 1 - P(all k drawn are wrong)


@solution("mcnemar-exact")
def mcnemar_exact(a: list[int], b: list[int]) -> float:
    a_only = sum(x == 1 and y == 0 for x, y in zip(a, b))
    b_only = sum(x == 0 and y == 1 for x, y in zip(a, b))
    d = a_only + b_only  # only the disagreements say which is better
    tail = sum(math.comb(d, k) for k in range(min(a_only, b_only) + 1)) / 2**d
    return min(1.0, 2 * tail)


@solution("holm-adjusted")
def holm_adjusted(p_values: list[float]) -> list[float]:
    m = len(p_values)
    order = sorted(range(m), key=lambda k: p_values[k])
    adjusted, running = [0.0] * m, 0.0
    for rank, k in enumerate(order):
        running = max(running, 1 - (1 - p_values[k]) ** (m - rank))  # Sidak's; never below a smaller p's
        adjusted[k] = running
    return adjusted


@solution("majority-right")
def majority_right(p: float, n: int) -> float:
    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n // 2 + 1, n + 1))


# == 13 · Learning from preferences and rewards ============================================


@solution("zero-contrast-share")
def zero_contrast_share(pass_rates: list[float], G: int) -> float:
    return sum(p**G + (1 - p) ** G for p in pass_rates) / len(pass_rates)  # all right, or all wrong


@solution("answer-logprob")
def answer_logprob(logits: torch.Tensor, ids: torch.Tensor, prompt_len: int) -> torch.Tensor:
    logp = F.log_softmax(logits, dim=-1)  # (T, V): row t predicts ids[t + 1]
    answer = ids[prompt_len:]  # (T - prompt_len,)
    return logp[prompt_len - 1 : -1].gather(-1, answer[:, None]).sum()  # each token by the row before it


@solution("ipo-loss")
def ipo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta: float) -> torch.Tensor:
    h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)  # (N,): the log-ratio margin
    return ((h - 1 / (2 * beta)) ** 2).mean()  # smallest at the margin 1 / (2 beta)


@solution("addition-checker")
def addition_checker(prompt: str, answer: str) -> float:
    a, b = prompt.rstrip("=").split("+")
    return 1.0 if answer.strip() == str(int(a) + int(b))[::-1] else 0.0  # the exact string, reversed


# == 14 · Fast inference on a laptop =======================================================


@solution("int8-zero-point")
def int8_zero_point(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    w = weight.float()
    low, high = w.amin(dim=1).clamp(max=0), w.amax(dim=1).clamp(min=0)  # (N,) each: 0 in the range
    scale = torch.where(high > low, (high - low) / 255, torch.ones_like(low))  # (N,)
    zero_point = torch.round(-low / scale).long()  # (N,): the level that stands for 0.0
    q = torch.round(w / scale[:, None]) + zero_point[:, None]  # (N, K)
    return q.clamp(0, 255).to(torch.uint8), scale, zero_point


@solution("draft-acceptance")
def acceptance_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return torch.minimum(p, q).sum(dim=-1)  # q(x) min(1, p(x) / q(x)) = min(p(x), q(x)), summed over x


@solution("residual-rows")
def residual_rows(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    q = F.pad(q, (0, p.shape[-1] - q.shape[-1]))  # (..., V): the tokens the draft lacks have probability 0
    left = (p - q).clamp_min(0)  # (..., V)
    total = left.sum(dim=-1, keepdim=True)  # (..., 1): one sum per row
    return torch.where(total > 0, left / total.clamp_min(1e-30), p)  # nothing left over: p itself


# == 15 · What the model learned ===========================================================


@solution("uniform-previous-token-score")
def uniform_previous_token_score(T: int) -> float:
    return sum(1 / (t + 1) for t in range(1, T)) / (T - 1)  # weight 1/(t + 1) on t - 1, for t = 1 .. T - 1


@solution("duplicate-token-scores")
def duplicate_token_scores(attention: list[torch.Tensor], period: int) -> torch.Tensor:
    T = attention[0].shape[-1]
    queries = torch.arange(T - period, T)  # the second copy
    return torch.stack([a[:, :, queries, queries - period].mean(dim=(0, 2)) for a in attention])  # (L, H)


@solution("mean-ablate")
def mean_ablate(z: torch.Tensor, head: int) -> torch.Tensor:
    out = z.clone()
    out[:, :, head] = z[:, :, head].mean(dim=(0, 1))  # (D,): over the batch and the positions
    return out


@solution("settled-fraction")
def settled_fraction(lens: torch.Tensor, answers: torch.Tensor, k: int) -> torch.Tensor:
    index = answers[:, None, None].expand(-1, lens.shape[1], 1)  # (P, L + 1, 1)
    ranks = (lens > lens.gather(2, index)).sum(dim=2)  # (P, L + 1): logits strictly above the answer's
    stays = (ranks < k).flip(1).cumprod(dim=1).flip(1)  # (P, L + 1): within the top k here and after
    return stays.float().mean(dim=0)  # (L + 1,)


def show(name: str) -> str:
    """The source of ``name``'s solution, else of its reference, as an instructor reads it."""
    from course_lib.exercises import EXERCISES

    if name not in EXERCISES:
        raise KeyError(f"no exercise named {name!r}; known exercises: {', '.join(EXERCISES)}")
    if name in SOLUTIONS:
        return inspect.getsource(SOLUTIONS[name])
    reference = EXERCISES[name].reference
    text = f"# no solution written out; the reference that answers its cases:\n{inspect.getsource(reference)}"
    module = sys.modules[reference.__module__]
    for called in reference.__code__.co_names:  # the course_lib functions it calls, in full
        fn = getattr(module, called, None)
        if inspect.isfunction(fn) and fn.__module__.startswith("course_lib"):
            text += f"\n# {fn.__module__}.{called}:\n{inspect.getsource(fn)}"
    return text


def main(argv: list[str]) -> int:
    from course_lib.exercises import EXERCISES

    if not argv:
        print("exercises (python3 course.py solutions NAME... prints their solutions):")
        print("\n".join(f"  {name}" for name in EXERCISES))
        return 0
    unknown = [name for name in argv if name not in EXERCISES]
    if unknown:
        print(f"no exercise named {', '.join(map(repr, unknown))}; `python3 course.py solutions` lists them")
        return 2
    for name in argv:
        print(f"# == {name} ==\n{show(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
