"""Every checker accepts the reference solution and rejects the usual mistakes.

One block per exercise, in the order of the course (as in course_lib/exercises/, one module per notebook): a correct
solution written the way a student would, then the typical mistakes the checker must reject.
"""

import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course_lib import evaluation, exercises
from course_lib.exercises import EXERCISES, BannedFunction, Case, banned, check, exercise
from course_lib.generation import filter_logits
from course_lib.grading import solutions
from course_lib.grading.solutions import (
    chunk_pair_counts,
    left_padded_mask,
    llama_parameters,
    local_causal_mask,
    lr_from_zero,
    min_p,
    nearest_tokens,
    padded_windows,
    repetition_penalty,
    smoothed_loss,
    split_windows,
    top_p_min_keep,
    trigram_counts,
    unk_rate,
)

ROOT = Path(__file__).resolve().parents[1]

SOLUTIONS = dict(solutions.SOLUTIONS)  # exercise name -> a correct solution: the shipped ones, then those below
MISTAKES = {}  # exercise name -> wrong solutions, each with the mistake it makes


# == 00 · Language models and PyTorch ======================================================


MISTAKES["trigram-counts"] = [
    lambda ids, v: trigram_counts(ids, v).permute(2, 1, 0),  # indexed (c, b, a)
    lambda ids, v: trigram_counts(ids, max(ids, default=0) + 1),  # vocabulary from the data
    lambda ids, v: trigram_counts(ids[:-1], v),  # drops the last trigram
    lambda ids, v: trigram_counts(ids[::2] + ids[1::2], v),  # tokens out of order
    lambda ids, v: trigram_counts(ids, v).float(),  # the right counts as floats: the statement says int64
]


def interpolated(counts, lam, unigram_of="next"):
    counts = counts.double()
    rows = counts.sum(1, keepdim=True)
    unigram = (counts.sum(0) if unigram_of == "next" else counts.sum(1)) / counts.sum()
    bigram = torch.where(rows > 0, counts / rows.clamp_min(1), unigram)
    return (lam * bigram + (1 - lam) * unigram).float()


MISTAKES["interpolated-bigram"] = [
    lambda c, lam: interpolated(c, lam, unigram_of="previous"),  # P(b) from the row sums
    lambda c, lam: interpolated(c, 1 - lam),  # lam weighs the unigram
    lambda c, lam: (lam * c / c.sum(1, keepdim=True) + (1 - lam) * c.sum(0) / c.sum()).float(),  # 0/0 rows
    lambda c, lam: (lam * c / c.sum(1, keepdim=True).clamp_min(1) + (1 - lam) * c.sum(0) / c.sum()).float(),
]  # the last: an unseen row keeps only (1 - lam) of the unigram and does not sum to 1

MISTAKES["accumulated-grad"] = [
    lambda x, times: 3 * x**2 - 2,  # as if backward() replaced the gradient
    lambda x, times: times * (x**3 - 2 * x),  # the value, not the derivative
    lambda x, times: (3 * x**2 - 2) ** times,  # multiplies instead of adding
]


def global_max_logsumexp(x):  # the function the exercise shows: one maximum for the whole tensor
    m = x.max()
    return m + (x - m).exp().sum(dim=-1).log()


def unguarded_logsumexp(x):  # each row's own maximum, but -inf - (-inf) = nan on a row of -inf only
    m = x.max(dim=-1, keepdim=True).values
    return (m + (x - m).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)


MISTAKES["logsumexp"] = [
    global_max_logsumexp,
    unguarded_logsumexp,
    lambda x: x.exp().sum(dim=-1).log(),  # overflows to inf
    lambda x: x.max(dim=-1).values,  # the max alone
    lambda x: torch.logsumexp(x, dim=-1),  # banned
    torch.logsumexp,  # banned, passed itself
]


# == 01 · Tokenization =====================================================================


MISTAKES["chunk-pair-counts"] = [
    lambda chunks: chunk_pair_counts(dict.fromkeys(chunks, 1)),  # each chunk once
    lambda chunks: chunk_pair_counts({sum(chunks, ()): 1}),  # one stream: pairs across chunks
    lambda chunks: {p: n for c, n in chunks.items() for p in zip(c[::2], c[1::2])},  # no overlaps, no sum
]


def buggy_encode_with_special(text, special_id):  # the function the exercise shows
    ids = []
    for piece in text.split("<|endoftext|>"):
        ids += list(piece.encode("utf-8")) + [special_id]
    return ids


MISTAKES["encode-with-special"] = [
    buggy_encode_with_special,
    lambda text, sid: buggy_encode_with_special(text, sid)[:-1] if text.endswith("<|endoftext|>") else [],
    lambda text, sid: [sid if t == "" else b for t in text.split("<|endoftext|>") for b in t.encode()],
    lambda text, sid: [ord(c) for c in text.replace("<|endoftext|>", chr(sid))],  # characters, not bytes
]


def shortest_match(text, vocab):
    tokens, i = [], 0
    while i < len(text):
        n = next((n for n in range(1, len(text) - i + 1) if text[i : i + n] in vocab), 1)
        tokens.append(text[i : i + n])
        i += n
    return tokens


MISTAKES["longest-match"] = [
    shortest_match,
    lambda text, vocab: list(text),  # characters only
    lambda text, vocab: [t for t in sorted(vocab, key=len, reverse=True) if t in text][:1] or list(text),
]

MISTAKES["unk-rate"] = [
    lambda tr, va, m: unk_rate(tr, va, m + 1),  # > min_count
    lambda tr, va, m: unk_rate(tr, sorted(set(va)), m),  # distinct validation words
    lambda tr, va, m: 1 - unk_rate(tr, va, m),  # the known share
]


# == 02 · Embeddings and training data =====================================================


def without_short_window(ids, c, pad):
    inputs, targets = padded_windows(ids, c, pad)
    return (inputs[:-1], targets[:-1]) if (len(ids) - 1) % c else (inputs, targets)


MISTAKES["padded-windows"] = [
    without_short_window,
    lambda ids, c, pad: tuple(t.masked_fill(t == -100, pad) for t in padded_windows(ids, c, pad)),  # pads targets
    lambda ids, c, pad: tuple(t.roll(-1, 0) for t in padded_windows(ids, c, pad)),  # windows out of order
]

MISTAKES["embedding-grad"] = [
    lambda w, ids: 2 * w * (torch.bincount(ids.flatten(), minlength=w.shape[0]) > 0)[:, None],  # once per row
    lambda w, ids: torch.bincount(ids.flatten(), minlength=w.shape[0])[:, None] * w,  # forgets the 2
    lambda w, ids: 2 * w,  # every row, looked up or not
]


def leaky_split(ids, c, stride, val_fraction):  # the function the exercise shows, seed 0
    starts = range(0, len(ids) - c, stride)
    x = torch.stack([ids[s : s + c] for s in starts])
    y = torch.stack([ids[s + 1 : s + c + 1] for s in starts])
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    n_val = int(len(x) * val_fraction)
    val, train = order[:n_val], order[n_val:]
    return x[train], y[train], x[val], y[val]


MISTAKES["split-windows"] = [
    leaky_split,
    lambda ids, c, s, f: split_windows(ids, c, c, f),  # ignores the stride
    lambda ids, c, s, f: split_windows(ids.flip(0), c, s, 1 - f)[2:] + split_windows(ids.flip(0), c, s, 1 - f)[:2],
]  # the last: validation first


def nearest_by_dot(weight, token, k):
    scores = weight @ weight[token]
    scores[token] = float("-inf")
    return scores.topk(k).indices.tolist()


MISTAKES["nearest-tokens"] = [
    lambda w, t, k: [t] + nearest_tokens(w, t, k)[: k - 1],
    nearest_by_dot,
    lambda w, t, k: nearest_tokens(w, t, w.shape[0] - 1)[::-1][:k],
]  # itself first; a plain dot product; the least similar


# == 03 · The MLP language model ===========================================================


def smoothed_other_classes(logits, targets, eps):  # eps / (V - 1) on every other class, none on the true one
    V = logits.shape[-1]
    q = torch.full_like(logits, eps / (V - 1)).scatter(-1, targets[:, None], 1 - eps)  # (N, V)
    return -(q * logits.log_softmax(-1)).sum(-1).mean()


def smoothed_via_softmax(logits, targets, eps):  # log of a softmax: log 0 = -inf for large logits
    q = torch.full_like(logits, eps / logits.shape[-1])
    q[torch.arange(len(targets)), targets] += 1 - eps
    return -(q * torch.softmax(logits, -1).log()).sum(-1).mean()


MISTAKES["label-smoothing"] = [
    lambda z, y, eps: SOLUTIONS["label-smoothing"](z, y, 0.0),  # no smoothing at all
    smoothed_other_classes,
    smoothed_via_softmax,
    lambda z, y, eps: SOLUTIONS["label-smoothing"](z, y, eps) * len(y),  # the sum over rows
    lambda z, y, eps: F.cross_entropy(z, y, label_smoothing=eps),  # right, but banned
]


def window_losses_as_shown(logits, targets):  # the function the exercise shows
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    return losses.mean(dim=1)


def window_losses_one_count(logits, targets):  # every window divided by the whole batch's count
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return losses.sum(dim=1) / (targets != -100).sum()


MISTAKES["window-losses"] = [
    window_losses_as_shown,
    window_losses_one_count,
    lambda z, y: F.cross_entropy(z.flatten(0, 1), y.flatten()),  # one number for the batch
    lambda z, y: SOLUTIONS["window-losses"](z, y).float(),  # float32 whatever the logits' dtype
]


def min_loss_contexts_anywhere(ids, c):  # N(context) also counts a context with no token after it
    from collections import Counter

    pairs = Counter((tuple(ids[t - c : t]), ids[t]) for t in range(c, len(ids)))
    contexts = Counter(tuple(ids[t - c : t]) for t in range(c, len(ids) + 1))
    return sum(n * -math.log(n / contexts[ctx]) for (ctx, _), n in pairs.items()) / (len(ids) - c)


def min_loss_per_context(ids, c):  # each distinct context's entropy, averaged without weights
    from collections import Counter

    pairs = Counter((tuple(ids[t - c : t]), ids[t]) for t in range(c, len(ids)))
    by_context = {}
    for (ctx, _), n in pairs.items():
        by_context.setdefault(ctx, []).append(n)
    entropies = [sum(-n / sum(ns) * math.log(n / sum(ns)) for n in ns) for ns in by_context.values()]
    return sum(entropies) / len(entropies)


def min_loss_by_ngram(ids, c):  # right (the n-gram without smoothing is that model), but banned
    from course_lib.ngram import NGramLanguageModel

    return NGramLanguageModel(order=c + 1, vocab_size=max(ids) + 1, alpha=0).fit(ids).cross_entropy(ids)


MISTAKES["min-training-loss"] = [
    min_loss_contexts_anywhere,
    lambda ids, c: SOLUTIONS["min-training-loss"](ids, c) / math.log(2),  # bits
    min_loss_per_context,
    min_loss_by_ngram,
]

MISTAKES["bits-per-character"] = [
    lambda losses, texts: sum(losses) / math.log(2) / len(losses),  # bits per token
    lambda losses, texts: sum(x / math.log(2) / len(t) for x, t in zip(losses, texts)) / len(texts),  # mean of ratios
    lambda losses, texts: sum(losses) * math.log(2) / sum(len(t) for t in texts),  # times ln 2
    lambda losses, texts: sum(losses) / math.log(2) / sum(len(t.encode()) for t in texts),  # UTF-8 bytes
]


# == 04 · Self-attention ===================================================================


def linear_weights(q, k, phi=lambda x: F.elu(x) + 1):
    w = phi(q) @ phi(k).transpose(-2, -1)
    return w / w.sum(-1, keepdim=True)


MISTAKES["linear-attention"] = [
    lambda q, k, v: (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1) @ v,  # no denominator
    lambda q, k, v: linear_weights(q, k, phi=lambda x: x.exp()) @ v,  # exp: softmax attention again
    lambda q, k, v: linear_weights(q / q.shape[-1] ** 0.25, k / q.shape[-1] ** 0.25) @ v,  # scaled as softmax's
    lambda q, k, v: linear_weights(q, k) @ (F.elu(v) + 1),  # phi on the values
    lambda q, k, v: F.scaled_dot_product_attention(q, k, v),  # banned
    lambda q, k, v: SOLUTIONS["linear-attention"](q, k, v).float(),  # float32 whatever the inputs' dtype
]

MISTAKES["score-scale"] = [
    lambda d, vq, vk: math.sqrt(d),  # ignores the variances
    lambda d, vq, vk: d * vq * vk,  # the variance, not its square root
    lambda d, vq, vk: math.sqrt(d * (vq + vk)),  # adds the variances
]


def pool_over_batch(x, query):  # the function the exercise shows
    weights = torch.softmax(x @ query / math.sqrt(x.shape[-1]), dim=0)
    return (weights.unsqueeze(-1) * x).sum(dim=1)


MISTAKES["attention-pool"] = [
    pool_over_batch,
    lambda x, query: x.mean(dim=1),  # no attention at all
    lambda x, query: (torch.softmax(x @ query, dim=-1).unsqueeze(-1) * x).sum(dim=1),  # no sqrt(d)
]

MISTAKES["attention-entropy"] = [
    lambda w: -(w * w.log()).sum(-1).mean().item(),  # nan where a weight is 0
    lambda w: -(w * (w + 1e-3).log()).sum(-1).mean().item(),  # an epsilon that moves every answer
    lambda w: -(w * w.clamp_min(1e-30).log()).sum(-1).mean().item() / math.log(w.shape[-1]) if w.shape[-1] > 1 else 0.0,
    lambda w: -(w * w.clamp_min(1e-30).log()).sum().item(),  # the sum over rows, not the mean
]  # the third: normalised by log T


# == 05 · Causal masking and multi-head attention ==========================================


MISTAKES["local-causal-mask"] = [
    lambda T, w: local_causal_mask(T, w + 1),  # i - j <= window
    lambda T, w: (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs() < w,  # both sides
    lambda T, w: local_causal_mask(T, w).T,  # the upper triangle
]


def buggy_left_padded_mask(lengths, T):  # the function the exercise shows
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    real = torch.arange(T) < lengths[:, None]
    return causal & real[:, None, :]


MISTAKES["left-padded-mask"] = [
    buggy_left_padded_mask,
    lambda lengths, T: left_padded_mask(lengths, T) & (torch.arange(T) >= (T - lengths)[:, None])[:, :, None],
    lambda lengths, T: torch.tril(torch.ones(T, T, dtype=torch.bool)).expand(len(lengths), T, T),  # no padding
    lambda lengths, T: (
        torch.tril(torch.ones(T, T, dtype=torch.bool)) & (torch.arange(T) >= (T - lengths)[:, None])[:, None, :]
    ),  # empty rows for the padding queries
]  # the second: padding queries see nothing, not even themselves

MISTAKES["mha-parameters"] = [
    lambda C, H: 4 * C * C,  # no biases
    lambda C, H: H * 3 * (C * C + C) + C * C + C,  # each head as wide as the model
    lambda C, H: 3 * (C * C + C),  # forgets the output projection
]

MISTAKES["previous-token-score"] = [
    lambda w: torch.diagonal(w, offset=1, dim1=-2, dim2=-1).mean(-1),  # the next token
    lambda w: torch.diagonal(w, dim1=-2, dim2=-1).mean(-1),  # itself
    lambda w: torch.diagonal(w, offset=-1, dim1=-2, dim2=-1).sum(-1) / w.shape[-1],  # divides by T
]


# == 06 · Positional encodings =============================================================


def rope_frequencies_with_base(head_dim, base):
    return base ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


MISTAKES["rope-scaling"] = [
    lambda d, s, m: (
        rope_frequencies_with_base(d, 1e4) / s if m == "linear" else rope_frequencies_with_base(d, 1e4 * s)
    ).float(),  # NTK: the base times scale
    lambda d, s, m: SOLUTIONS["rope-scaling"](d, 1 / s, m) if m == "linear" else SOLUTIONS["rope-scaling"](d, s, m),
    lambda d, s, m: (
        rope_frequencies_with_base(d, 1e4) / s
        if m == "linear"
        else rope_frequencies_with_base(d, 1e4 * s ** ((d - 2) / d))
    ).float(),  # the exponent upside down
    lambda d, s, m: SOLUTIONS["rope-scaling"](d, s, "linear"),  # NTK taken for linear
]


def alibi_as_shown(slopes, T):  # the function the exercise shows: j - i, future keys only
    position = torch.arange(T)
    distance = (position[None, :] - position[:, None]).clamp(min=0)  # (T, T)
    bias = -slopes[:, None, None] * distance
    return bias.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))


def alibi_without_mask(slopes, T):  # course_lib's bias: 0 for the future, the mask left to later
    position = torch.arange(T)
    return -slopes[:, None, None] * (position[:, None] - position[None, :]).clamp(min=0)


MISTAKES["alibi-bias"] = [
    alibi_as_shown,
    lambda slopes, T: SOLUTIONS["alibi-bias"](-slopes, T),  # the sign: far keys favoured
    alibi_without_mask,
    lambda slopes, T: SOLUTIONS["alibi-bias"](slopes, T) - slopes[:, None, None] * torch.ones(T, T).tril(),  # i - j + 1
    lambda slopes, T: SOLUTIONS["alibi-bias"](slopes, T).float(),  # float32 whatever the slopes' dtype
]


def stretch_ends_move(table, new_length):  # x = p * L / new_length: the last row is never reached
    L = table.shape[0]
    x = torch.arange(new_length, dtype=torch.float64) * L / new_length
    low = x.floor().long().clamp(max=L - 2)
    w = (x - low).clamp(max=1).to(table.dtype)[:, None]
    return (1 - w) * table[low] + w * table[low + 1]


def stretch_nearest(table, new_length):  # the nearest row, no mix
    x = torch.arange(new_length, dtype=torch.float64) * (table.shape[0] - 1) / (new_length - 1)
    return table[x.round().long()]


MISTAKES["stretch-positions"] = [
    stretch_ends_move,
    stretch_nearest,
    lambda table, n: F.interpolate(table.T[None], size=n, mode="linear", align_corners=True)[0].T,  # banned
]


def reach_from_oldest(slope, T, share):  # adds the weights from the first key in the window
    weights = torch.exp(-slope * torch.arange(T, dtype=torch.float64)).flip(0)
    mass = (weights / weights.sum()).cumsum(0)
    return int((mass < share).sum()) + 1


MISTAKES["alibi-reach"] = [
    reach_from_oldest,
    lambda slope, T, share: math.ceil(math.log(1 - share) / -slope),  # an infinite past: T ignored
    lambda slope, T, share: SOLUTIONS["alibi-reach"](slope, T, share) - 1,  # the index, not the count
]


# == 07 · The transformer block and the GPT model ==========================================


MISTAKES["llama-parameters"] = [
    lambda V, C, L, h: llama_parameters(V, C, L, h) - V * C,  # a tied head
    lambda V, C, L, h: llama_parameters(V, C, L, h) + L * (4 * C + 3 * h + C) + L * 2 * C,  # biases and shifts
    lambda V, C, L, h: llama_parameters(V, C, L, h) - 3 * C * h * L + 8 * C * C * L,  # GPT-2's 4C MLP
]


def rms_over_dim_1(x, weight, eps):  # the function the exercise shows
    return x / torch.sqrt(x.pow(2).mean(dim=1, keepdim=True) + eps) * (1 + weight)


def rms_norm_with(x, weight, eps, reduce=torch.mean, centred=False, scale=lambda w: 1 + w, work=torch.float32):
    y = x.to(work) if x.dtype in (torch.float16, torch.bfloat16) else x
    if centred:  # a LayerNorm
        y = y - y.mean(dim=-1, keepdim=True)
    return (y / torch.sqrt(reduce(y.pow(2), dim=-1, keepdim=True) + eps) * scale(weight.to(y.dtype))).to(x.dtype)


MISTAKES["rms-norm"] = [
    rms_over_dim_1,
    lambda x, w, eps: rms_norm_with(x, w, eps, reduce=torch.sum),  # the sum, not the mean
    lambda x, w, eps: rms_norm_with(x, w, eps, centred=True),  # a LayerNorm
    lambda x, w, eps: torch.nn.functional.rms_norm(x, w.shape, 1 + w, eps),  # banned
    lambda x, w, eps: rms_norm_with(x, w, eps, scale=lambda w: w),  # LLaMA's scale, weight not 1 + weight
    lambda x, w, eps: rms_norm_with(x, w, eps, work=x.dtype),  # squares in float16: inf
    lambda x, w, eps: rms_norm_with(x.float(), w, eps),  # float32 whatever the dtype of x
]

MISTAKES["residual-std"] = [
    lambda L, s: math.sqrt(1 + L * s**2),  # one branch a block
    lambda L, s: 1 + 2 * L * s,  # adds standard deviations
    lambda L, s: math.sqrt(2 * L) * s,  # forgets the embeddings
]

MISTAKES["dead-fraction"] = [
    lambda h: (h <= 0).float().mean().item(),  # the share of entries, not of units
    lambda h: (h.reshape(-1, h.shape[-1]) < 0).all(0).float().mean().item(),  # 0 counted as alive
    lambda h: (h.reshape(-1, h.shape[-1]) <= 0).all(1).float().mean().item(),  # positions, not units
]


# == 08 · Pretraining ======================================================================


def cosine_from_step_zero(s, hi, lo, w, t):
    if s < w:
        return hi * s / w
    return lo + (hi - lo) * (1 + math.cos(math.pi * min(s, t) / t)) / 2


MISTAKES["lr-from-zero"] = [
    lambda s, hi, lo, w, t: hi * (s + 1) / w if s < w else lr_from_zero(s, hi, lo, w, t),  # the chapter's warmup
    lambda s, hi, lo, w, t: lr_from_zero(s, hi, 0.0, w, t),  # decays to 0
    cosine_from_step_zero,
]


def adamw_by_torch(w, g, lr, weight_decay):
    p = torch.nn.Parameter(w.clone())
    p.grad = g.clone()
    torch.optim.AdamW([p], lr=lr, weight_decay=weight_decay).step()
    return p.detach()


MISTAKES["adamw-first-step"] = [
    lambda w, g, lr, wd: w * (1 - lr * wd) - lr * g,  # SGD: the step scales with the gradient
    lambda w, g, lr, wd: w - lr * (g + wd * w) / ((g + wd * w).abs() + 1e-8),  # L2 in the gradient: Adam, not AdamW
    lambda w, g, lr, wd: w - lr * wd * w - lr * g / (g.abs() + 1e-8) * (1 - 0.9),  # m without bias correction
    adamw_by_torch,  # right, but banned
]

MISTAKES["accumulated-gradient"] = [
    lambda grads, sizes: sum(grads) / len(grads),  # the plain mean: the function the exercise shows
    lambda grads, sizes: sum(grads),  # the sum: k times too large
    lambda grads, sizes: sum(n * g for n, g in zip(sizes, grads)) / len(grads),  # weighted, divided by k
]


def smoothed_without_correction(values, beta):
    s, out = 0.0, []
    for x in values:
        s = beta * s + (1 - beta) * x
        out.append(s)
    return out


MISTAKES["smoothed-loss"] = [
    smoothed_without_correction,
    lambda values, beta: smoothed_loss(values, 1 - beta),  # beta on the new value
    lambda values, beta: [sum(values[: t + 1]) / (t + 1) for t in range(len(values))],  # a running mean
]


# == 09 · Generating text ==================================================================


MISTAKES["top-p-min-keep"] = [
    lambda logits, p, keep: top_p_min_keep(logits, p, 1),  # ignores min_tokens_to_keep
    lambda logits, p, keep: top_p_min_keep(logits, 1.0, keep) if keep > 1 else top_p_min_keep(logits, p, 1),
    lambda logits, p, keep: top_p_min_keep(logits, p, keep - 1),  # keeps one too few
    lambda logits, p, keep: filter_logits(logits, top_p=p),  # banned
]  # the second: min_tokens_to_keep > 1 keeps everything


def min_p_one_maximum(logits, m):  # each row's probabilities against the largest of the whole batch
    probs = torch.softmax(logits, dim=-1)
    return logits.masked_fill(probs < m * probs.max(), float("-inf"))


MISTAKES["min-p"] = [
    lambda logits, m: logits.masked_fill(logits < m * logits.amax(-1, keepdim=True), float("-inf")),  # on logits
    lambda logits, m: min_p(logits.flatten()[None], m).view_as(logits),  # one softmax for the batch
    min_p_one_maximum,
    lambda logits, m: logits.masked_fill(torch.softmax(logits, -1) < m, float("-inf")),  # absolute threshold
]


def buggy_repetition_penalty(logits, previous, penalty):  # the function the exercise shows
    logits = logits.clone()
    for token in previous:
        logits[token] = logits[token] / penalty
    return logits


def penalised_in_place(logits, previous, penalty):  # right values, but the caller's logits changed too
    for token in set(previous):
        logits[token] = logits[token] / penalty if logits[token] > 0 else logits[token] * penalty
    return logits


MISTAKES["repetition-penalty"] = [
    buggy_repetition_penalty,
    penalised_in_place,
    lambda logits, prev, pen: buggy_repetition_penalty(logits, set(prev), pen),  # the sign still wrong
    lambda logits, prev, pen: repetition_penalty(repetition_penalty(logits, prev, pen), prev[1:], pen),
]  # the last: penalises a repeat again

MISTAKES["distinct-n"] = [
    lambda tokens, n: len(set(tokens)) / len(tokens),  # distinct tokens, not n-grams
    lambda tokens, n: len({tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}) / len(tokens),
    lambda tokens, n: (
        len({tuple(tokens[i : i + n]) for i in range(0, len(tokens) - n + 1, n)}) / max(1, len(tokens) // n)
    ),
]  # divided by the tokens; n-grams that do not overlap


# == 10 · Fine-tuning for classification ===================================================


def mean_pooling_over_t(features, lengths):  # the masked sum divided by T, not by the length
    real = torch.arange(features.shape[1]) < lengths[:, None]
    return (features * real[..., None]).sum(1) / features.shape[1]


MISTAKES["mean-pooling"] = [
    lambda features, lengths: features.mean(dim=1),  # padding averaged in
    mean_pooling_over_t,
    lambda features, lengths: SOLUTIONS["mean-pooling"](features, (lengths - 1).clamp(min=1)),  # one token too few
]


def wald(correct, n, z=1.96):  # the standard error at k/n: the interval Wilson's replaces
    p = correct / n
    half = z * math.sqrt(p * (1 - p) / n)
    return max(0.0, p - half), min(1.0, p + half)


def wilson_with(correct, n, z2=1.96**2, shift=0.5):  # shift: the continuity correction, towards p on each side
    def root(k, sign):
        p = k / n
        a, b, c = 1 + z2 / n, -(2 * p + z2 / n), p * p
        return (-b + sign * math.sqrt(max(b * b - 4 * a * c, 0.0))) / (2 * a)

    low = 0.0 if correct == 0 else max(0.0, root(correct - shift, -1))
    high = 1.0 if correct == n else min(1.0, root(correct + shift, +1))
    return low, high


MISTAKES["wilson-interval"] = [
    wald,
    lambda k, n: tuple(reversed(SOLUTIONS["wilson-interval"](k, n))),  # high first
    lambda k, n: wilson_with(k, n, z2=1.96),  # z where the formula has z squared
    lambda k, n: wilson_with(k, n, shift=0.0),  # Wilson's interval without the correction
    lambda k, n: wilson_with(k, n, shift=-0.5),  # the half count on the wrong side: narrower
    lambda k, n: evaluation.wilson_interval(k, n),  # banned (and uncorrected)
]


def test_the_corrected_wilson_interval_is_newcombes_closed_form():
    z = 1.96
    for k, n in [(0, 1), (1, 1), (0, 10), (3, 7), (5, 10), (46, 65), (69, 135), (999, 1000), (130, 130)]:
        p, twice = k / n, 2 * (n + z * z)
        low = 2 * n * p + z * z - 1 - z * math.sqrt(z * z - 2 - 1 / n + 4 * p * (n * (1 - p) + 1))
        high = 2 * n * p + z * z + 1 + z * math.sqrt(z * z + 2 - 1 / n + 4 * p * (n * (1 - p) - 1)) if k < n else twice
        expected = (low / twice if k else 0.0, high / twice)
        assert SOLUTIONS["wilson-interval"](k, n) == pytest.approx(expected, abs=1e-12)


def last_real_both(features, lengths, side, position):
    return features[torch.arange(len(lengths)), position(lengths, features.shape[1])]


MISTAKES["last-real-token"] = [
    lambda f, lengths, side: last_real_both(f, lengths, side, lambda n, T: n - 1),  # lengths - 1 on both sides
    lambda f, lengths, side: f[:, -1],  # position -1 on both sides
    lambda f, lengths, side: (
        last_real_both(f, lengths, side, lambda n, T: T - n)
        if side == "left"
        else SOLUTIONS["last-real-token"](f, lengths, side)
    ),  # the first real token of a left-padded row
]


def macro_f1_of_means(predictions, labels):  # the F1 of the mean precision and the mean recall
    classes = sorted(set(labels) | set(predictions))
    pairs = list(zip(predictions, labels))
    precision = [sum(p == y == k for p, y in pairs) / max(1, sum(p == k for p, _ in pairs)) for k in classes]
    recall = [sum(p == y == k for p, y in pairs) / max(1, sum(y == k for _, y in pairs)) for k in classes]
    P, R = sum(precision) / len(classes), sum(recall) / len(classes)
    return 2 * P * R / (P + R) if P + R else 0.0


MISTAKES["macro-f1"] = [
    lambda predictions, labels: sum(p == y for p, y in zip(predictions, labels)) / len(labels),  # the accuracy
    lambda predictions, labels: SOLUTIONS["macro-f1"](
        [p if p in labels else labels[0] for p in predictions], labels
    ),  # only the labels' classes (a predicted-only class dropped)
    macro_f1_of_means,
]


# == 11 · Instruction fine-tuning ==========================================================


def buggy_answer_loss(logits, targets):  # the function the exercise shows
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1))
    return -picked.mean()


def answer_loss_of_row_means(logits, targets):
    keep = targets != -100
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -((logp * keep).sum(dim=1) / keep.sum(dim=1)).mean()  # short answers weigh as much as long ones


def answer_loss_by_exp(logits, targets):  # log(exp / sum): inf / inf = nan for large logits
    keep = targets != -100
    p = logits.exp() / logits.exp().sum(dim=-1, keepdim=True)
    picked = p.gather(-1, targets.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1).log()
    return -(picked * keep).sum() / keep.sum()


MISTAKES["answer-loss"] = [
    buggy_answer_loss,
    answer_loss_by_exp,
    lambda logits, targets: solutions.answer_loss(logits, targets.masked_fill(targets == 0, -100)),  # > 0
    answer_loss_of_row_means,
    lambda logits, targets: solutions.answer_loss(logits, targets) * (targets != -100).sum() / targets.numel(),
    lambda logits, targets: F.cross_entropy(logits.flatten(0, 1), targets.flatten()),  # right, but banned
]  # the second: token 0 dropped as if it were padding; the fourth: divided by every position


def chat_targets_shifted_by(ids, assistant_id, eot_id, closing=True, marker=False, last_only=False, shift=1):
    in_reply, is_reply = False, []
    for k, token in enumerate(ids):
        if token == assistant_id:
            is_reply.append(marker or in_reply)
            in_reply = not last_only or assistant_id not in ids[k + 1 :]
        elif token == eot_id:
            is_reply.append(in_reply and closing)
            in_reply = in_reply and last_only
        else:
            is_reply.append(in_reply)
    keep = torch.tensor(is_reply[shift : shift + len(ids) - 1], dtype=torch.bool)
    return torch.tensor(ids[1:], dtype=torch.long).masked_fill(~keep, -100)


def chat_targets_by_index(ids, assistant_id, eot_id):  # each reply from its marker to the next end-of-text
    keep, start = [False] * len(ids), ids.index(assistant_id) + 1  # ValueError: no reply at all
    while True:
        end = ids.index(eot_id, start + 1) if eot_id in ids[start + 1 :] else len(ids) - 1  # skips an empty reply
        keep[start : end + 1] = [True] * (end + 1 - start)
        if assistant_id not in ids[end:]:
            break
        start = ids.index(assistant_id, end) + 1
    return torch.tensor(ids[1:]).masked_fill(~torch.tensor(keep[1:]), -100)


MISTAKES["chat-targets"] = [
    chat_targets_by_index,
    lambda ids, a, e: chat_targets_shifted_by(ids, a, e, closing=False),  # never learns to stop
    lambda ids, a, e: chat_targets_shifted_by(ids, a, e, marker=True),  # the marker as a target
    lambda ids, a, e: chat_targets_shifted_by(ids, a, e, last_only=True),  # the single-turn prompt mask
    lambda ids, a, e: chat_targets_shifted_by(ids, a, e, shift=0),  # the mask of the tokens, not the targets
]


MISTAKES["loss-share"] = [
    lambda n, p, mask: solutions.loss_share(n, [x + 1 for x in p], mask),  # hides p targets, not p - 1
    lambda n, p, mask: sum(n) / (len(n) * max(n)),  # tokens, not targets
    lambda n, p, mask: solutions.loss_share(n, p, mask) * (max(n) - 1) / max(n),  # B * L positions
    lambda n, p, mask: solutions.loss_share(n, p, True),  # always masked
]


def bradley_terry_by_ascent(wins, steps=50, lr=0.01):
    s = torch.zeros(len(wins), requires_grad=True)
    for _ in range(steps):
        likelihood = (wins * F.logsigmoid(s[:, None] - s[None, :])).sum()
        (grad,) = torch.autograd.grad(likelihood, s)
        s = (s + lr * grad).detach().requires_grad_()
    return (s - s.mean()).detach()


def bradley_terry_from_win_rates(wins):
    rate = wins.sum(1) / (wins + wins.T).sum(1)
    s = torch.log(rate / (1 - rate))
    return s - s.mean()


MISTAKES["bradley-terry"] = [
    bradley_terry_from_win_rates,  # each model's overall win rate, as if against an average opponent
    lambda wins: solutions.bradley_terry(wins.T),  # wins read transposed: the order reversed
    bradley_terry_by_ascent,  # too few steps: not converged
    lambda wins: (lambda s: s - s[0])(solutions.bradley_terry(wins)),  # the first pinned at 0, not centred
]


# == 12 · Prompting, inference-time compute, and limits ====================================


MISTAKES["pass-at-k"] = [
    lambda n, c, k: 1 - (1 - c / n) ** k,  # drawn with replacement: biased low
    lambda n, c, k: c / n,  # pass@1 whatever k
    lambda n, c, k: min(1.0, k * c / n),  # adds up the chances of overlapping events
]


def mcnemar_counts(a, b):
    return sum(x > y for x, y in zip(a, b)), sum(x < y for x, y in zip(a, b))


def mcnemar_one_sided(a, b):
    a_only, b_only = mcnemar_counts(a, b)
    d = a_only + b_only
    return min(1.0, sum(math.comb(d, k) for k in range(min(a_only, b_only) + 1)) / 2**d)


def mcnemar_over_every_item(a, b):  # the agreements counted as coins too
    n, low = len(a), min(mcnemar_counts(a, b))
    return min(1.0, 2 * sum(math.comb(n, k) for k in range(low + 1)) / 2**n)


def mcnemar_not_capped(a, b):
    a_only, b_only = mcnemar_counts(a, b)
    d = a_only + b_only
    return 2 * sum(math.comb(d, k) for k in range(min(a_only, b_only) + 1)) / 2**d


def mcnemar_normal(a, b):  # the normal approximation: not exact with few disagreements
    a_only, b_only = mcnemar_counts(a, b)
    return math.erfc(abs(a_only - b_only) / math.sqrt(a_only + b_only) / math.sqrt(2))


MISTAKES["mcnemar-exact"] = [mcnemar_one_sided, mcnemar_over_every_item, mcnemar_not_capped, mcnemar_normal]


def sidak(p, times):
    return 1 - (1 - p) ** times


def holm_sidak_without_running_max(p_values):  # the function the exercise shows
    m = len(p_values)
    order = sorted(range(m), key=lambda k: p_values[k])
    adjusted = [0.0] * m
    for rank, k in enumerate(order):
        adjusted[k] = sidak(p_values[k], m - rank)
    return adjusted


def holm_by_hand(p_values):  # Holm's own (m - rank) * p: the chapter's method, not Sidak's
    m = len(p_values)
    order = sorted(range(m), key=lambda k: p_values[k])
    adjusted, running = [0.0] * m, 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[k]))
        adjusted[k] = running
    return adjusted


def hochberg_sidak(p_values):  # the step-up procedure: a running minimum from the largest p
    m = len(p_values)
    order = sorted(range(m), key=lambda k: p_values[k])
    adjusted, running = [0.0] * m, 1.0
    for rank in range(m - 1, -1, -1):
        k = order[rank]
        running = min(running, sidak(p_values[k], m - rank))
        adjusted[k] = running
    return adjusted


MISTAKES["holm-adjusted"] = [
    holm_sidak_without_running_max,
    lambda ps: [sidak(p, len(ps)) for p in ps],  # Sidak's single step: every p as the smallest
    holm_by_hand,
    lambda ps: [max(holm_sidak_without_running_max(ps)[: k + 1]) for k in range(len(ps))],  # maximum in input order
    hochberg_sidak,
]


MISTAKES["majority-right"] = [
    lambda p, n: sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n // 2, n + 1)),  # k >= n // 2
    lambda p, n: p**n,  # every sample right
    lambda p, n: 1 - (1 - p) ** n,  # at least one right: pass@n, not the vote
    lambda p, n: sum(p**k * (1 - p) ** (n - k) for k in range(n // 2 + 1, n + 1)),  # no C(n, k)
]


# == the checks ============================================================================


@pytest.fixture
def fresh_kernel(monkeypatch):
    """No failed attempt yet: the checker's memory of earlier failures, emptied."""
    monkeypatch.setattr(exercises.core, "FAILURES", {})


def test_a_starter_function_gets_one_neutral_line_with_no_case_and_no_hint(fresh_kernel):
    def starter(ids, vocab_size):
        raise NotImplementedError("your code here")

    result = check("trigram-counts", starter)
    assert not result and repr(result) == "✏️ trigram-counts: not attempted yet; write your function and run this cell"
    assert exercises.core.FAILURES == {}  # not a failed attempt: the first real failure still gets the nudge only


def test_an_exception_after_the_first_case_is_explained(fresh_kernel):
    def broken(ids, vocab_size):
        if ids == [2, 2, 2, 2]:  # the second case
            raise NotImplementedError("todo")
        return trigram_counts(ids, vocab_size)

    def unreadable(ids, vocab_size):
        raise ValueError("no idea")

    assert "case 2 of 5 failed" in repr(check("trigram-counts", broken))
    assert "raised ValueError: no idea" in repr(check("trigram-counts", unreadable))


def test_hints_come_in_steps_one_more_after_each_failure(fresh_kernel):
    steps = EXERCISES["logsumexp"].hints
    n = len(steps)
    wrong = MISTAKES["logsumexp"][0]
    for shown in (*range(1, n + 1), n):
        message = repr(check("logsumexp", wrong))
        assert [s in message for s in steps] == [True] * shown + [False] * (n - shown)
        assert ("each failed run shows one more step" in message) == (shown < n)
    assert check("logsumexp", SOLUTIONS["logsumexp"])  # passing leaves the count alone: no harm


def test_a_failure_says_where_expected_and_got_first_differ(fresh_kernel):
    message = repr(check("split-windows", MISTAKES["split-windows"][0]))  # windows shuffled, then split
    assert "\n  differs:  element 0 of the tuple: first at index [0, 0]: expected 0, got 14 (20 of 24" in message
    message = repr(check("longest-match", MISTAKES["longest-match"][0]))
    assert "\n  differs:  element 0 of the list: expected 'hell', got 'he'" in message
    message = repr(check("chunk-pair-counts", MISTAKES["chunk-pair-counts"][0]))
    assert "\n  differs:  at key (1, 2): expected 3, got 2" in message


def test_a_right_answer_in_another_dtype_is_told_as_a_dtype_mismatch(fresh_kernel):
    message = repr(check("answer-loss", lambda logits, targets: solutions.answer_loss(logits.double(), targets)))
    assert "\n  differs:  the dtype: expected torch.float32, got torch.float64 (the values agree)" in message


def test_the_hint_is_chosen_by_the_case_that_failed(fresh_kernel):
    def eps_outside(x, weight, eps):
        return (x.double() / (x.double().pow(2).mean(dim=-1, keepdim=True).sqrt() + eps) * (1 + weight)).to(x.dtype)

    steps = EXERCISES["rms-norm"].hints
    message = repr(check("rms-norm", eps_outside))
    assert "case 4 of 5" in message and f"hint 1:   {steps[2]}" in message and steps[0] not in message
    message = repr(check("answer-loss", MISTAKES["answer-loss"][1]))  # log(exp / sum)
    assert "(large logits" in message and "hint 1:   exp(200) overflows" in message


PREDICTIONS = [  # exercises whose visible answers are the numbers the student is asked to predict
    "accumulated-grad", "embedding-grad", "score-scale", "min-training-loss", "loss-share",
    "bradley-terry", "pass-at-k", "majority-right", "zero-contrast-share", "draft-acceptance",
    "uniform-previous-token-score",
]  # fmt: skip


@pytest.mark.parametrize("name", PREDICTIONS)
def test_a_prediction_does_not_show_the_number_to_be_predicted(name, fresh_kernel):
    answers = [EXERCISES[name].expected(case) for case in EXERCISES[name].cases()]
    for wrong in MISTAKES[name]:
        message = repr(check(name, wrong))
        k = int(re.search(r"case (\d+) of", message).group(1))
        assert "expected: not shown" in message and f"expected: {exercises._show(answers[k - 1])}" not in message


def test_a_banned_function_fails_passed_called_or_imported_and_comes_back_afterwards():
    from torch import logsumexp as imported

    def by_its_own_name(x):
        return imported(x, dim=-1)

    for fn in (torch.logsumexp, lambda x: torch.logsumexp(x, -1), lambda x: x.logsumexp(-1), by_its_own_name):
        message = repr(check("logsumexp", fn))
        assert message.startswith("❌ logsumexp: case 1 of") and "torch." in message and "ban" in message
    assert torch.logsumexp is imported and by_its_own_name(torch.zeros(2)).item() == pytest.approx(math.log(2))
    assert torch.zeros(2).logsumexp(0).item() == pytest.approx(math.log(2))
    assert "logsumexp" not in torch.Tensor.__dict__  # the method is the C one again


def test_an_input_changed_in_place_fails_the_case_in_check_and_in_the_grader():
    from course_lib.grading.student_process import _result

    in_place = MISTAKES["mean-ablate"][-1]
    message = repr(check("mean-ablate", in_place))
    assert "case 1 of" in message and "changed its input `z` in place" in message
    header, payload = _result(in_place, EXERCISES["mean-ablate"].cases()[0].args, [])
    assert "changed its input `z` in place" in header["error"] and payload == b""


def test_each_case_gets_its_own_copy_of_inputs_shared_between_cases():
    seen = []

    def records(logits, previous, penalty):
        seen.append(logits)
        return SOLUTIONS["repetition-penalty"](logits, previous, penalty)

    cases = EXERCISES["repetition-penalty"].cases()
    assert cases[0].args[0] is cases[1].args[0]  # the cases share one logits tensor
    assert check("repetition-penalty", records)
    assert len({id(t) for t in seen}) == len(seen) == len(cases)  # each call its own copy


def test_a_ban_names_itself_and_is_lifted_even_when_the_check_fails():
    with pytest.raises(BannedFunction, match="torch.nn.functional.layer_norm is banned"):
        with banned(["torch.nn.functional.layer_norm"]):
            torch.nn.LayerNorm(4)(torch.ones(2, 4))  # the module calls the banned function too
    assert torch.nn.LayerNorm(4)(torch.ones(2, 4)).shape == (2, 4)
    with pytest.raises(AttributeError, match="no such function"):
        exercise("misspelt-ban", hint="", bans=["torch.logsumexpp"])


def test_every_exercise_without_a_reference_answers_each_case_itself():
    for name, ex in EXERCISES.items():
        if ex.reference is None:
            assert all(c.expected is not exercises._FROM_REFERENCE for c in ex.cases()), name


def test_the_adamw_prediction_is_what_torch_does():
    g = torch.Generator().manual_seed(0)
    for lr, wd in [(1e-3, 0.1), (0.5, 0.0), (3e-4, 1.0)]:
        w, grad = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g) * 10
        assert torch.allclose(SOLUTIONS["adamw-first-step"](w, grad, lr, wd), adamw_by_torch(w, grad, lr, wd))


def test_the_accumulated_gradient_prediction_is_what_torch_does():
    for x0, times in [(2.0, 1), (0.5, 4), (-4.0, 3)]:
        x = torch.tensor(x0, requires_grad=True)
        for _ in range(times):
            (x**3 - 2 * x).backward()
        assert math.isclose(SOLUTIONS["accumulated-grad"](x0, times), x.grad.item(), rel_tol=1e-6)


def test_unknown_exercise_lists_the_known_ones():
    with pytest.raises(KeyError, match="known exercises: accumulated-grad, accumulated-gradient, adamw-first-step"):
        check("no-such-exercise", lambda: None)


def test_exercises_are_defined_in_the_order_the_notebooks_use_them():
    used = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                used += re.findall(r'check\("([a-z0-9-]+)"', "".join(cell["source"]))
    assert list(dict.fromkeys(used)) == list(EXERCISES)


def test_an_exercise_name_is_defined_once():
    with pytest.raises(ValueError, match="'trigram-counts' is defined twice"):
        exercise("trigram-counts", reference=list, hint="")(lambda: [Case(([1, 2],))])
    assert EXERCISES["trigram-counts"].hint().startswith("a trigram is three tokens")


def test_every_solution_is_shown_to_an_instructor():
    for name in EXERCISES:
        assert solutions.show(name).strip(), name
    assert "def trigram_counts(" in solutions.show("trigram-counts")
    assert "unpack_int4" in solutions.show("int4-unpack")  # an exercise shown by its reference


def test_holm_adjusted_is_statsmodels_holm_sidak():
    from statsmodels.stats.multitest import multipletests

    g = torch.Generator().manual_seed(0)
    for m in (1, 2, 3, 9, 40):
        p = (torch.rand(m, generator=g, dtype=torch.float64) ** 3).tolist()
        assert solutions.holm_adjusted(p) == pytest.approx(list(multipletests(p, method="holm-sidak")[1]))


# == 13 · Learning from preferences and rewards ============================================


MISTAKES["zero-contrast-share"] = [
    lambda rates, G: sum((1 - p) ** G for p in rates) / len(rates),  # only the all-wrong groups
    lambda rates, G: sum(p**G for p in rates) / len(rates),  # only the all-right groups
    lambda rates, G: (sum(rates) / len(rates)) ** G + (1 - sum(rates) / len(rates)) ** G,  # on the mean rate
    lambda rates, G: sum(1 - p**G - (1 - p) ** G for p in rates) / len(rates),  # the share WITH contrast
]


def buggy_answer_logprob(logits, ids, prompt_len):  # the function the exercise shows
    logp = F.log_softmax(logits, dim=-1)
    answer = ids[prompt_len:]
    return logp[prompt_len:].gather(-1, answer[:, None]).sum()


MISTAKES["answer-logprob"] = [
    buggy_answer_logprob,
    lambda logits, ids, n: F.log_softmax(logits, -1)[:-1].gather(-1, ids[1:, None]).sum(),  # the prompt too
    lambda logits, ids, n: F.log_softmax(logits, -1)[n - 1 : -1].gather(-1, ids[n:, None]).mean(),  # a mean
    lambda logits, ids, n: logits[n - 1 : -1].gather(-1, ids[n:, None]).sum(),  # logits, not log-probabilities
]


def ipo(pc, pr, rc, rr, beta, scale=1.0, target=None):
    h = scale * ((pc - rc) - (pr - rr))
    return ((h - (1 / (2 * beta) if target is None else target)) ** 2).mean()


MISTAKES["ipo-loss"] = [
    lambda pc, pr, rc, rr, beta: ipo(pc, pr, rc, rr, beta, scale=beta),  # beta * h inside the square
    lambda pc, pr, rc, rr, beta: ((((pc - rc) - (pr - rr)) - 1 / (2 * beta)) ** 2).sum(),  # summed over pairs
    lambda pc, pr, rc, rr, beta: ipo(pc, pr, torch.zeros_like(rc), torch.zeros_like(rr), beta),  # no reference
    lambda pc, pr, rc, rr, beta: ipo(pc, pr, rc, rr, beta, target=1 / beta),  # the target margin 1 / beta
    lambda pc, pr, rc, rr, beta: -F.logsigmoid(beta * ((pc - rc) - (pr - rr))).mean(),  # plain DPO
]


def test_ipo_loss_is_smallest_at_the_target_margin():
    margins = torch.linspace(0, 10, 101)  # 0.1 apart
    zero = torch.zeros(101)
    losses = torch.stack([solutions.ipo_loss(m[None], zero[:1], zero[:1], zero[:1], 0.1) for m in margins])
    assert margins[losses.argmin()].item() == pytest.approx(5.0) and losses.min().item() == pytest.approx(0.0)


def _reversed_sum(prompt):
    a, b = prompt.rstrip("=").split("+")
    return str(int(a) + int(b))[::-1]


MISTAKES["addition-checker"] = [
    lambda p, a: 1.0 if _reversed_sum(p) in a else 0.0,  # loose: the digits anywhere
    lambda p, a: 1.0 if a.strip().isdigit() and int(a) == int(_reversed_sum(p)) else 0.0,  # int(): '028' passes
    lambda p, a: 1.0 if a == _reversed_sum(p) else 0.0,  # no strip: ' 28\n' fails
    lambda p, a: 1.0 if a.strip() == _reversed_sum(p)[::-1] else 0.0,  # the usual order
]


def test_the_addition_checker_is_the_courses_reward():
    from course_lib.tasks import addition_reward

    for case in EXERCISES["addition-checker"].cases():
        assert addition_reward(*case.args) == case.expected == solutions.addition_checker(*case.args)


# == 14 · Fast inference on a laptop =======================================================


def zero_point_variant(weight, levels=255, with_zero=True, absmax=False):
    w = weight.float()
    low, high = w.amin(dim=1), w.amax(dim=1)
    if with_zero:
        low, high = low.clamp(max=0), high.clamp(min=0)
    if absmax:  # symmetric: the chapter's absmax scale, shifted by 128
        scale = torch.where(w.abs().amax(1) > 0, w.abs().amax(1) / 127, torch.ones_like(low))
        zero_point = torch.full_like(low, 128).long()
    else:
        scale = torch.where(high > low, (high - low) / levels, torch.ones_like(low))
        zero_point = torch.round(-low / scale).long()
    q = (torch.round(w / scale[:, None]) + zero_point[:, None]).clamp(0, 255).to(torch.uint8)
    return q, scale, zero_point


MISTAKES["int8-zero-point"] = [
    lambda w: zero_point_variant(w, with_zero=False),  # the row's range without 0
    lambda w: zero_point_variant(w, levels=256),  # 256 steps: the top weight falls off the grid
    lambda w: zero_point_variant(w, absmax=True),  # symmetric absmax, shifted by 128
]


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor, torch.quantize_per_channel")
def test_int8_zero_point_is_pytorchs_per_channel_affine_quantization():
    g = torch.Generator().manual_seed(0)
    for w in (torch.randn(32, 64, generator=g) * 0.05 + 0.02, torch.rand(8, 16, generator=g), -torch.rand(4, 8)):
        q, scale, zero_point = solutions.int8_zero_point(w)
        theirs = torch.quantize_per_channel(w, scale.double(), zero_point, 0, torch.quint8).int_repr()
        assert (theirs.int() - q.int()).abs().max() <= 1 and (theirs == q).float().mean() > 0.99  # ties may round apart
        w_hat = (q.float() - zero_point[:, None]) * scale[:, None]
        assert ((w - w_hat).abs() <= scale[:, None] / 2 * (1 + 1e-4)).all()  # within half a step
        assert (w_hat[w == 0] == 0).all()


def unpack(packed):
    return torch.stack([packed & 15, packed >> 4], dim=-1).reshape(packed.shape[0], -1)


SOLUTIONS["int4-unpack"] = unpack
MISTAKES["int4-unpack"] = [
    lambda packed: torch.stack([packed >> 4, packed & 15], dim=-1).reshape(packed.shape[0], -1),  # high first
    lambda packed: torch.cat([packed & 15, packed >> 4], dim=-1),  # the evens, then the odds
    lambda packed: torch.stack([packed, packed >> 4], dim=-1).reshape(packed.shape[0], -1),  # not masked
]


MISTAKES["draft-acceptance"] = [
    lambda p, q: (q * torch.clamp(p / q, max=1)).sum(dim=-1),  # 0 / 0 where both are 0
    lambda p, q: torch.minimum(p, q).mean(dim=-1),  # a mean over the vocabulary
    lambda p, q: 1 - (p - q).abs().sum(dim=-1),  # the total variation without its half
    lambda p, q: (p * q).sum(dim=-1),  # both draw the same token
]


def test_the_acceptance_rate_is_what_the_acceptance_rule_does():
    from course_lib.speculative import accept_draft

    p = torch.tensor([[0.5, 0.2, 0.2, 0.1, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]])
    q = torch.tensor([[0.1, 0.1, 0.1, 0.3, 0.4]])
    g, n = torch.Generator().manual_seed(0), 4000
    kept = sum(accept_draft(p, q, [int(torch.multinomial(q[0], 1, generator=g))], g)[0] for _ in range(n))
    rate = solutions.acceptance_rate(p[0], q[0]).item()
    assert abs(kept / n - rate) < 5 * (rate * (1 - rate) / n) ** 0.5


def padded(q, p):  # the draft's missing tokens: probability 0
    return F.pad(q, (0, p.shape[-1] - q.shape[-1]))


def buggy_residual(p, q):  # the function the exercise shows
    left = (p - padded(q, p)).clamp_min(0)
    return left / left.sum()


def residual_if_any_left(p, q):
    left = (p - padded(q, p)).clamp_min(0)
    return p if left.sum() == 0 else left / left.sum(dim=-1, keepdim=True)


MISTAKES["residual-rows"] = [
    buggy_residual,
    lambda p, q: (p - padded(q, p)).clamp_min(0) / (p - padded(q, p)).clamp_min(0).sum(dim=-1, keepdim=True),
    residual_if_any_left,  # p only when no row has anything left over
    lambda p, q: (p - padded(q, p)).abs() / (p - padded(q, p)).abs().sum(dim=-1, keepdim=True),  # |p - q|
    lambda p, q: SOLUTIONS["residual-rows"](p[..., : q.shape[-1]], q),  # the target cut to the draft's tokens
    lambda p, q: SOLUTIONS["residual-rows"](p, F.pad(q, (p.shape[-1] - q.shape[-1], 0))),  # padded on the left
]  # the second: NaN for q == p


def test_residual_rows_is_the_courses_residual_distribution():
    from course_lib.speculative import residual_distribution

    for case in EXERCISES["residual-rows"].cases():
        p, q = case.args
        assert torch.allclose(residual_distribution(p, padded(q, p)), case.expected)


# == 15 · What the model learned ===========================================================


MISTAKES["uniform-previous-token-score"] = [
    lambda T: 1 / T,  # 1/T at every position
    lambda T: sum(1 / (t + 1) for t in range(T)) / T,  # position 0 counted, with weight 1
    lambda T: sum(1 / t for t in range(1, T)) / (T - 1),  # 1/t: t positions instead of t + 1
]


def duplicate_scores(attention, period, shift=0, all_queries=False):
    T = attention[0].shape[-1]
    queries = torch.arange(period if all_queries else T - period, T)
    return torch.stack([a[:, :, queries, queries - period + shift].mean(dim=(0, 2)) for a in attention])


MISTAKES["duplicate-token-scores"] = [
    lambda a, p: duplicate_scores(a, p, shift=1),  # the induction score
    lambda a, p: duplicate_scores(a, p, all_queries=True),  # queries from position `period` on
    lambda a, p: duplicate_scores(a, p).mean(dim=1, keepdim=True).expand(len(a), a[0].shape[1]),  # heads averaged
]


def ablated(z, head, mean):
    out = z.clone()
    out[:, :, head] = mean
    return out


def mean_ablate_in_place(z, head):  # the right values, but z itself changed
    z[:, :, head] = z[:, :, head].mean(dim=(0, 1))
    return z


MISTAKES["mean-ablate"] = [
    lambda z, h: ablated(z, h, z[:, :, h].mean()),  # the bug: one number for all of D
    lambda z, h: ablated(z, h, z[:, :, h].mean(dim=0)),  # the mean over the batch only
    lambda z, h: z - z.mean(dim=(0, 1)) + z.mean(dim=(0, 1)) * 0,  # every head centred
    lambda z, h: ablated(z, h, 0.0),  # zero ablation
    mean_ablate_in_place,
]


def settled(lens, answers, k, every_layer=False, ties_against=False):
    own = lens.gather(2, answers[:, None, None].expand(-1, lens.shape[1], 1))  # (P, L + 1, 1)
    ranks = (lens >= own).sum(2) - 1 if ties_against else (lens > own).sum(2)
    inside = ranks < k  # (P, L + 1)
    stays = inside if every_layer else inside.flip(1).cumprod(1).flip(1).bool()
    return stays.float().mean(0)


MISTAKES["settled-fraction"] = [
    lambda lens, a, k: settled(lens, a, k, every_layer=True),  # in the top k there, even if it drops out later
    lambda lens, a, k: settled(lens, a, k, ties_against=True),  # a tie counted against the answer
    lambda lens, a, k: settled(lens, a, k) * len(a),  # a count of prompts, not a fraction
    lambda lens, a, k: settled(lens, a, k).double(),  # float64: the statement says float32
]


# == every solution and every typical mistake against the visible cases ==================
# (last in the file: the parametrisations below read SOLUTIONS and MISTAKES once every chapter's are in)


def test_every_exercise_has_a_solution_and_mistakes():
    assert set(SOLUTIONS) == set(EXERCISES) == set(MISTAKES)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_checker_accepts_a_correct_solution(name):
    result = check(name, SOLUTIONS[name])
    assert result, repr(result)
    assert repr(result).startswith(f"✅ {name}: all ")


@pytest.mark.parametrize("name, k", [(n, k) for n, ms in MISTAKES.items() for k in range(len(ms))])
@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom:UserWarning")  # a mistake on a 1-wide case
def test_checker_rejects_typical_mistakes(name, k):
    """Each typical mistake fails a VISIBLE case: a student's ✅ means what the grader will say."""
    result = check(name, MISTAKES[name][k])
    assert not result
    message = repr(result)
    assert message.startswith(f"❌ {name}: case ")
    for part in ("input:", "expected:", "got:", "hint"):
        assert part in message
