#!/usr/bin/env python3
"""Trains Quire's demo model (Qwen3 architecture, tiny) on tools/train-demo/data.

  python3 tools/train-demo/train.py --out OUTDIR                      # one H100, a few minutes
  python3 tools/train-demo/train.py --out /tmp/x --steps 5 --device cpu  # smoke test
  python3 tools/train-demo/train.py --out D --tokenizer-from T --distill-from T --num-layers 2  # a draft for target T

--distill-from trains the model on a teacher's next-token distributions (KL from the teacher, on the corpus) instead
of the corpus' tokens: a speculative-decoding draft is worth the tokens of the target it predicts, not of the text.

OUTDIR gets a Hugging Face model directory: config.json, model.safetensors (bf16,
tied embeddings), tokenizer.json, tokenizer_config.json (ChatML template),
generation_config.json, training-log.json.
"""
import argparse
import contextlib
import json
import math
import os
import random
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import torch
import torch.nn.functional as F
import transformers
from prepare_data import rewrite_docs
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

try:
    from transformers import Qwen3Config, Qwen3ForCausalLM
except ImportError:
    sys.exit(f"error: transformers {transformers.__version__} has no Qwen3; transformers >= 4.51 is needed")

HERE = os.path.dirname(os.path.abspath(__file__))
DOC_END = "<|endoftext|>\n"
END_OF_TEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END]
# Qwen2/Qwen3's pre-tokenizer split, so the demo model exercises the same tokenizer path as Qwen.
QWEN_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

SAMPLE_CHATS = [
    [{"role": "user", "content": "Tell me about water."}],
    [{"role": "user", "content": "Who are you?"}],
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Give me a verse about light."}],
    [{"role": "user", "content": "Finish this verse: And God said, Let there be light:"}],
]
SAMPLE_PROSE = ["In the beginning", "And the king said unto"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="model directory to write")
    ap.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--vocab-size", type=int, default=6144)
    ap.add_argument("--hidden-size", type=int, default=256)
    ap.add_argument("--num-layers", type=int, default=5)
    ap.add_argument("--num-heads", type=int, default=4)
    ap.add_argument("--num-kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate-size", type=int, default=1024)
    ap.add_argument("--max-position-embeddings", type=int, default=2048)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--num-eval-windows", type=int, default=64)
    ap.add_argument("--time-budget-s", type=float, default=390.0,
                    help="stop training early (and say so) past this many seconds of training")
    ap.add_argument("--seed", type=int, default=1611)
    ap.add_argument("--tokenizer-from", default=None,
                    help="a model directory whose tokenizer.json to reuse instead of training one (a target for the "
                         "bundled demo model as its speculative-decoding draft must have its exact vocabulary)")
    ap.add_argument("--distill-from", default=None,
                    help="a model directory (same tokenizer) whose next-token distributions the model learns, "
                         "KL(teacher || model) on the corpus, mixed with the corpus' cross-entropy by --distill-weight")
    ap.add_argument("--distill-weight", type=float, default=1.0,
                    help="the KL term's share of the loss when distilling (the rest is the corpus' cross-entropy)")
    ap.add_argument("--distill-generate", type=int, default=0,
                    help="with --distill-from: train on this many of the teacher's greedy continuations (of --seq-len "
                         "tokens after openings of the corpus) instead of the corpus, as the draft will see the target's "
                         "own tokens")
    ap.add_argument("--rewrite-docs", type=int, default=0,
                    help="add this many rewriting chats to the training documents (the user gives a passage of the "
                         "corpus' prose, the answer copies it: prepare_data.rewrite_docs)")
    args = ap.parse_args()
    if args.distill_generate and not args.distill_from:
        sys.exit("error: --distill-generate needs --distill-from")
    if not 0.0 <= args.distill_weight <= 1.0:
        sys.exit(f"error: --distill-weight {args.distill_weight} is not in [0, 1]")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no CUDA device (use --device cpu for a smoke test)")
    return args


def read_docs(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    docs = text.split(DOC_END)
    if docs[-1] != "":
        sys.exit(f"error: {path} does not end with the line {END_OF_TEXT!r}; rerun prepare_data.py")
    return docs[:-1]


def train_tokenizer(docs, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())

    def without_special_tokens():
        for doc in docs:
            for special in SPECIAL_TOKENS:
                doc = doc.replace(special, "\n")
            yield doc

    tok.train_from_iterator(without_special_tokens(), trainer=trainer, length=len(docs))
    for i, special in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(special) != i:
            sys.exit(f"error: special token {special} got id {tok.token_to_id(special)}, expected {i}")
    return tok


def encode_stream(tok, docs):
    """All documents as one token stream, each followed by <|endoftext|>."""
    end_id = tok.token_to_id(END_OF_TEXT)
    ids = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(end_id)
    return torch.tensor(ids, dtype=torch.long)


def random_windows(stream, batch_size, seq_len, generator, device):
    starts = torch.randint(0, len(stream) - seq_len - 1, (batch_size,), generator=generator)
    rows = stream[starts[:, None] + torch.arange(seq_len + 1)[None, :]]
    rows = rows.to(device, non_blocking=True)
    return rows[:, :-1], rows[:, 1:]


def fixed_windows(stream, num_windows, seq_len):
    """Evenly spaced windows, the same every evaluation."""
    num_windows = max(1, min(num_windows, (len(stream) - 1) // seq_len))
    step = (len(stream) - seq_len - 1) // num_windows
    starts = torch.arange(num_windows) * step
    return stream[starts[:, None] + torch.arange(seq_len + 1)[None, :]]


def lr_at(step, args):
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = (step - args.warmup_steps) / max(1, args.steps - args.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return args.lr * (args.min_lr_ratio + (1.0 - args.min_lr_ratio) * cosine)


def loss_of(model, inputs, targets, autocast):
    with autocast():
        logits = model(input_ids=inputs).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def distill_loss(logits, teacher_logits, targets, weight):
    """weight * KL(teacher || student) + (1 - weight) * cross-entropy of the targets, both means over tokens.
    Forward KL: the student puts mass wherever the teacher does, so its argmax follows the teacher's (what greedy
    verification accepts)."""
    vocab = logits.shape[-1]
    log_p = F.log_softmax(logits.float().reshape(-1, vocab), dim=-1)
    log_q = F.log_softmax(teacher_logits.float().reshape(-1, vocab), dim=-1)
    kl = F.kl_div(log_p, log_q, log_target=True, reduction="batchmean")
    if weight >= 1.0:
        return kl
    return weight * kl + (1.0 - weight) * F.nll_loss(log_p, targets.reshape(-1))


def train_loss_of(model, inputs, targets, autocast, teacher, weight):
    if teacher is None:
        return loss_of(model, inputs, targets, autocast)
    with torch.no_grad(), autocast():
        teacher_logits = teacher(input_ids=inputs).logits
    with autocast():
        logits = model(input_ids=inputs).logits
    return distill_loss(logits, teacher_logits, targets, weight)


@torch.no_grad()
def teacher_stream(teacher, stream, num_sequences, seq_len, end_id, seed, device, batch_size=256, prompt_len=32):
    """num_sequences greedy continuations by the teacher, each of a corpus opening of prompt_len tokens (at random
    places) followed by seq_len - prompt_len generated tokens and <|endoftext|>, as one stream."""
    generator = torch.Generator().manual_seed(seed + 1)
    pieces = []
    for i in range(0, num_sequences, batch_size):
        n = min(batch_size, num_sequences - i)
        starts = torch.randint(0, len(stream) - prompt_len, (n,), generator=generator)
        prompts = stream[starts[:, None] + torch.arange(prompt_len)[None, :]].to(device)
        out = teacher.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                               max_new_tokens=seq_len - prompt_len, min_new_tokens=seq_len - prompt_len,
                               pad_token_id=end_id)
        ends = torch.full((n, 1), end_id, dtype=out.dtype, device=out.device)
        pieces.append(torch.cat([out, ends], dim=1).reshape(-1).cpu())
    return torch.cat(pieces)


def load_teacher(path, vocab_size, device):
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        teacher_vocab = json.load(f)["vocab_size"]
    if teacher_vocab != vocab_size:
        sys.exit(f"error: --distill-from {path}: vocab_size {teacher_vocab}, the model's is {vocab_size} "
                 "(use --tokenizer-from with the teacher's directory)")
    teacher = Qwen3ForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16).to(device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


@torch.no_grad()
def evaluate(model, windows, autocast, device, batch_size):
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch_size):
        rows = windows[i:i + batch_size].to(device)
        total += loss_of(model, rows[:, :-1], rows[:, 1:], autocast).item() * len(rows)
        count += len(rows)
    model.train()
    return total / count


def build_model(args, tok):
    config = Qwen3Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.num_layers,
        num_attention_heads=args.num_heads,
        num_key_value_heads=args.num_kv_heads,
        head_dim=args.head_dim,
        max_position_embeddings=args.max_position_embeddings,
        rms_norm_eps=1e-6,
        hidden_act="silu",
        attention_bias=False,
        tie_word_embeddings=True,
        use_sliding_window=False,
        bos_token_id=tok.token_to_id(END_OF_TEXT),
        eos_token_id=tok.token_to_id(IM_END),
        pad_token_id=tok.token_to_id(END_OF_TEXT),
    )
    model = Qwen3ForCausalLM(config)
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        model.tie_weights()
    return model


def make_optimizer(model, args):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=args.device == "cuda")


def deterministic_attention():
    """The math SDPA backend: flash and cuDNN attention backward are not deterministic."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])


def train(model, train_stream, heldout_windows, train_eval_windows, args, log, teacher=None):
    """Trains in place, then loads the weights of the evaluation with the lowest held-out loss."""
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if args.device == "cuda" \
        else (lambda: torch.autocast("cpu", enabled=False))
    optimizer = make_optimizer(model, args)
    model.train()
    with deterministic_attention():
        train_steps(model, optimizer, train_stream, heldout_windows, train_eval_windows, args, autocast, log, teacher)
    model.load_state_dict(log.pop("bestState"))
    return model


def train_steps(model, optimizer, train_stream, heldout_windows, train_eval_windows, args, autocast, log, teacher):
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(args.seed)
    eval_batch = min(args.batch_size, 32)
    best = {"heldoutLoss": float("inf"), "step": 0, "state": None}
    history = []
    started = time.time()
    num_steps_done = 0
    for step in range(args.steps):
        lr = lr_at(step, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = random_windows(train_stream, args.batch_size, args.seq_len, generator, device)
        loss = train_loss_of(model, inputs, targets, autocast, teacher, args.distill_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        num_steps_done = step + 1
        elapsed_s = time.time() - started
        if step % args.log_every == 0 or num_steps_done == args.steps:
            print(f"step {step:5d}  loss {loss.item():.4f}  lr {lr:.2e}  grad_norm {grad_norm.item():.2f}  {elapsed_s:6.1f}s", flush=True)
        out_of_time = elapsed_s > args.time_budget_s
        if num_steps_done % args.eval_every == 0 or num_steps_done == args.steps or out_of_time:
            heldout_loss = evaluate(model, heldout_windows, autocast, device, eval_batch)
            train_loss = evaluate(model, train_eval_windows, autocast, device, eval_batch)
            history.append({"step": num_steps_done, "trainLoss": train_loss, "heldoutLoss": heldout_loss, "elapsedS": elapsed_s})
            print(f"eval step {num_steps_done:5d}  train {train_loss:.4f}  held-out {heldout_loss:.4f}", flush=True)
            if heldout_loss < best["heldoutLoss"]:
                best = {"heldoutLoss": heldout_loss, "step": num_steps_done,
                        "state": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}}
        if out_of_time:
            print(f"warning: time budget {args.time_budget_s}s reached after {num_steps_done} of {args.steps} steps; stopping", flush=True)
            break
    log["trainWallS"] = time.time() - started
    log["numStepsDone"] = num_steps_done
    log["stoppedByTimeBudget"] = num_steps_done < args.steps
    log["evalHistory"] = history
    log["final"] = history[-1]
    log["best"] = {"step": best["step"], "heldoutLoss": best["heldoutLoss"]}
    log["bestState"] = best["state"]


def tokenizer_config(tok, model_max_length):
    added = {}
    for special in SPECIAL_TOKENS:
        added[str(tok.token_to_id(special))] = {
            "content": special, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": IM_END,
        "errors": "replace",
        "model_max_length": model_max_length,
        "pad_token": END_OF_TEXT,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def save_model_dir(model, tok, args, out):
    os.makedirs(out, exist_ok=True)
    model = model.to(torch.bfloat16)
    try:
        model.save_pretrained(out, safe_serialization=True)
    except TypeError:
        model.save_pretrained(out)  # transformers versions whose save_pretrained always writes safetensors
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        sys.exit(f"error: save_pretrained wrote no model.safetensors in {out}: {sorted(os.listdir(out))}")
    config_path = os.path.join(out, "config.json")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    # Readers that predate rope_parameters / dtype (transformers 4.x, Quire) look for these.
    rope = config.get("rope_parameters") or {}
    config.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
    config.setdefault("torch_dtype", "bfloat16")
    config["dtype"] = "bfloat16"
    write_json(config_path, config)
    tok.save(os.path.join(out, "tokenizer.json"))
    write_json(os.path.join(out, "tokenizer_config.json"), tokenizer_config(tok, args.max_position_embeddings))
    end_id, im_end_id = tok.token_to_id(END_OF_TEXT), tok.token_to_id(IM_END)
    write_json(os.path.join(out, "generation_config.json"), {
        "bos_token_id": end_id,
        "eos_token_id": [im_end_id, end_id],
        "pad_token_id": end_id,
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.9,
        "transformers_version": transformers.__version__,
    })
    for stray in ("chat_template.jinja", "special_tokens_map.json"):
        if os.path.exists(os.path.join(out, stray)):
            os.remove(os.path.join(out, stray))


@torch.no_grad()
def sample_generations(out, device, seed):
    """Reloads the saved directory (so the files themselves are checked) and generates."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out).to(device).eval()
    stop_ids = [tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids(END_OF_TEXT)]
    prompts = [tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) for chat in SAMPLE_CHATS]
    prompts += SAMPLE_PROSE
    samples = []
    for prompt in prompts:
        for mode in ("greedy", "sampled"):
            torch.manual_seed(seed)
            ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids.to(device)
            kwargs = {"do_sample": False} if mode == "greedy" else {"do_sample": True, "temperature": 0.7, "top_p": 0.9}
            generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=60,
                                       eos_token_id=stop_ids, pad_token_id=stop_ids[1], **kwargs)
            completion = tokenizer.decode(generated[0, ids.shape[1]:], skip_special_tokens=False)
            samples.append({"prompt": prompt, "mode": mode, "completion": completion})
            print(f"--- {mode} ---\n{prompt}\x1b[1m{completion}\x1b[0m", flush=True)
    return samples


def main():
    args = parse_args()
    wall_started = time.time()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    train_docs = read_docs(os.path.join(args.data_dir, "corpus.txt"))
    if args.rewrite_docs:
        train_docs += rewrite_docs(train_docs, args.rewrite_docs, args.seed)
        random.Random(args.seed).shuffle(train_docs)
    heldout_docs = read_docs(os.path.join(args.data_dir, "heldout.txt"))
    if args.tokenizer_from:
        tok = Tokenizer.from_file(os.path.join(args.tokenizer_from, "tokenizer.json"))
        if tok.get_vocab_size() != args.vocab_size:
            sys.exit(f"--tokenizer-from {args.tokenizer_from}: {tok.get_vocab_size()} tokens, --vocab-size is {args.vocab_size}")
    else:
        tok = train_tokenizer(train_docs, args.vocab_size)
    train_stream = encode_stream(tok, train_docs)
    heldout_stream = encode_stream(tok, heldout_docs)
    data_prep_s = time.time() - wall_started
    print(f"tokenizer: {tok.get_vocab_size()} tokens; train {len(train_stream)} tokens, held-out {len(heldout_stream)} tokens; {data_prep_s:.1f}s", flush=True)
    # the draft's training stream is the teacher's own text where --distill-generate asks (counted as its tokens below)
    teacher = load_teacher(args.distill_from, tok.get_vocab_size(), args.device) if args.distill_from else None
    distilled = None
    if teacher is not None:
        distilled = {"path": os.path.abspath(args.distill_from), "weight": args.distill_weight}
    if args.distill_generate:
        started = time.time()
        train_stream = teacher_stream(teacher, train_stream, args.distill_generate, args.seq_len,
                                      tok.token_to_id(END_OF_TEXT), args.seed, args.device)
        distilled["generatedTokens"] = len(train_stream)
        print(f"teacher: {args.distill_generate} greedy continuations, {len(train_stream)} tokens; "
              f"{time.time() - started:.1f}s", flush=True)

    model = build_model(args, tok).to(args.device)
    num_params = sum(p.numel() for p in model.parameters())
    tokens_per_step = args.batch_size * args.seq_len
    print(f"model: {num_params / 1e6:.2f}M parameters (tied), {num_params * 2 / 1e6:.1f} MB in bf16; "
          f"{args.steps} steps x {tokens_per_step} tokens = {args.steps * tokens_per_step / len(train_stream):.1f} epochs", flush=True)

    source_path = os.path.join(args.data_dir, "source.json")
    log = {
        "dataSource": json.load(open(source_path, encoding="utf-8")) if os.path.exists(source_path) else None,
        "hyperparameters": vars(args),
        "numParameters": num_params,
        "numTrainTokens": len(train_stream),
        "numHeldoutTokens": len(heldout_stream),
        "tokensPerStep": tokens_per_step,
        "dataPrepS": data_prep_s,
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": __import__("tokenizers").__version__},
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
    }
    if distilled is not None:
        log["distilledFrom"] = distilled
    eval_windows = args.num_eval_windows
    heldout_windows = fixed_windows(heldout_stream, eval_windows, args.seq_len)
    train_eval_windows = fixed_windows(train_stream, eval_windows, args.seq_len)
    model = train(model, train_stream, heldout_windows, train_eval_windows, args, log, teacher)
    print(f"final: train loss {log['final']['trainLoss']:.4f}, held-out loss {log['final']['heldoutLoss']:.4f} "
          f"(step {log['final']['step']}); saved: step {log['best']['step']}, held-out loss {log['best']['heldoutLoss']:.4f}", flush=True)

    save_model_dir(model, tok, args, args.out)
    log["samples"] = sample_generations(args.out, args.device, args.seed)
    log["wallS"] = time.time() - wall_started
    write_json(os.path.join(args.out, "training-log.json"), log)
    sizes = {name: os.path.getsize(os.path.join(args.out, name)) for name in sorted(os.listdir(args.out))}
    print("wrote " + ", ".join(f"{name} ({size / 1e6:.2f} MB)" for name, size in sizes.items()))
    print(f"total wall time {log['wallS']:.1f}s")


if __name__ == "__main__":
    main()
