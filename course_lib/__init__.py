"""course_lib: the tested building blocks of *Transformers from Scratch*.

Each notebook builds an idea by hand, then imports the clean version from here and
checks that the two agree. One module per idea:

- ``runtime``       device choice, seeding, thread count and the training budget
- ``tokenization``  character, word and byte-level BPE tokenizers; GPT-2's encoding offline
- ``data``          corpora (offline default, cached downloads), splits, sliding windows
- ``ngram``         count-based n-gram language models, the first baseline
- ``mlp_lm``        the MLP language model of Bengio et al. (2003)
- ``attention``     softmax, attention heads, multi-head attention, the KV cache
- ``positional``    learned, sinusoidal, rotary (RoPE) and ALiBi position information
- ``layers``        LayerNorm, RMSNorm, activations, feed-forward and SwiGLU
- ``model``         GPTConfig and GPT; parameter counts; loading GPT-2 and LLaMA weights
- ``training``      the Trainer: AdamW, warmup + cosine, clipping, accumulation, DDP, resume
- ``checkpoints``   model files and checkpoints in safetensors (no pickle), written atomically
- ``train``         the command line ``python -m course_lib.train`` (only the command line)
- ``generation``    greedy, temperature, top-k, top-p, streaming, with a KV cache
- ``pretrained``    the small GPT that ships with course_lib
- ``classification`` a GPT classifier at the last real token, freezing, the fine-tuning loop
- ``lora``          LoRA from scratch: low-rank updates beside frozen layers, merged back
- ``plotting``      the figures and token colourings the notebooks show
- ``widgets``       interactive explorers (ipywidgets)
- ``exercises``     self-checks for the exercises at the end of each notebook
"""

__version__ = "0.1.0"
