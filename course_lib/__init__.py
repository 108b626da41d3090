"""course_lib: the tested building blocks of *Transformers from Scratch*.

Each notebook builds an idea by hand, then imports the clean version from here and
checks that the two agree. One module (or package) per idea:

- ``runtime``        device choice, what the CPU can run, seeding, threads, the budget; eval mode, a model's device
- ``files``          atomic writes, checksums, cached downloads (every file course_lib writes)
- ``tokenization``   character, word and byte-level BPE tokenizers, BPE training, GPT-2's encoding
                     offline, tokenizer files (a package, one module for each)
- ``data``           the offline corpus (shipped), public corpora, splits, sliding windows
- ``ngram``          count-based n-gram language models, the first baseline
- ``mlp_lm``         the MLP language model of Bengio et al. (2003)
- ``attention``      softmax, attention heads, multi-head attention, the KV cache (and a static one)
- ``positional``     learned, sinusoidal, rotary (RoPE) and ALiBi position information
- ``layers``         LayerNorm, RMSNorm, activations, feed-forward and SwiGLU
- ``model``          GPTConfig and GPT; parameter counts
- ``checkpoints``    the course's model files and checkpoints in safetensors (no pickle)
- ``training``       the Trainer: AdamW, warmup + cosine, clipping, accumulation, DDP, resume
- ``train``          the command line ``python -m course_lib.train`` (only the command line)
- ``generation``     greedy, temperature, top-k, top-p, streaming, with a KV cache; batches, compiled steps
- ``pretrained``     weights trained elsewhere: the shipped GPT, GPT-2, LLaMA, SmolLM2 (GGUF)
- ``tasks``          the data sets of chapters 10-12, one small function per task
- ``finetuning``     the fine-tuning loop on a list of examples (chapters 10 and 11)
- ``classification`` a GPT classifier at the last real token, padding, freezing
- ``lora``           LoRA from scratch: low-rank updates beside frozen layers, merged back
- ``instruct``       prompt formats, the -100 collate, instruction training, special tokens
- ``evaluation``     answer form, exact match, multiple choice, a model as judge, intervals
- ``prompting``      few-shot prompts, classification by likelihood, voting, best-of-n
- ``tools``          a safe calculator and the loop that pauses generation to call it
- ``chat``           a conversation: chat templates, turns over one KV cache, streaming, stop
- ``limits``         memorisation and next-word probability probes
- ``preference``     preference pairs, sequence log-probabilities, the DPO loss and training
- ``rl``             group sampling, group-relative advantages, the GRPO objective and training
- ``cards``          model cards and datasheets; training FLOPs and energy
- ``quantization``   int8 and int4 weights by hand, fast CPU kernels that ask first, bytes read per step
- ``speculative``    speculative decoding: the acceptance rule, prompt lookup, model drafts, the speed-up
- ``interpretability`` hooks on a GPT: activations, head scores, ablation, patching, the logit lens, probes
- ``plotting``       the figures and token colourings the notebooks show
- ``widgets``        interactive explorers and the chat widget (ipywidgets)
- ``exercises``      self-checks for the exercises at the end of each notebook
- ``grading``        the instructors' grader (a package): a class's notebooks graded outside the
                     students' kernels, in a sandbox, against hidden cases; grades.csv and feedback
"""

__version__ = "0.1.0"
