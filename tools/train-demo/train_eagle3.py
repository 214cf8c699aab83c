#!/usr/bin/env python3
"""Trains an EAGLE-3 head for a target trained by train.py (issue 41's EAGLE-3 row needs a head that accepts).

  python3 tools/train-demo/train_eagle3.py --target T --out HEAD [--generate 2048] [--seq-len 256] [--steps 2000]
      [--time-budget-s 60] [--ttt-steps 3]

The head is vLLM's Eagle3LlamaForCausalLM, the forward tools/reference/eagle3_reference.py writes out (fc over the
residual streams entering three target layers, one Llama layer over [normed embedding | normed h], a norm, an lm_head
over the target's whole vocabulary: no d2t), saved in the layout Quire's loader reads (src/tools/test-model/eagle3.ts
writes a random one): config.json of LlamaForCausalLMEagle3 with eagle_config.eagle_aux_hidden_state_layer_ids, and
model.safetensors in bf16. It embeds with the target's table (not saved) and starts from the target's lm_head.

Training data is the target's own greedy text (train.teacher_stream: corpus openings continued by the target), so an
accepted proposal is the token in the window. Each window of L tokens x runs through the target once, for its states
entering the aux layers and its next-token logits; head position t reads token x[t + 1] and the target's states at t,
and learns the target's distribution at t + 1 (the token after x[t + 1]). EAGLE-3's training-time test unrolls
--ttt-steps passes: pass 0 reads fc(states) at every position; pass j reads the head's own pre-norm output of pass
j - 1 at t - 1, and attends to pass 0's keys up to t - j and to pass i's key at t - j + i (i = 1 .. j), which is what
Quire's head attends to at decode time (the catch-up's positions, then its chained proposals'). The loss is the
forward KL from the target's distribution (train.distill_loss's), pass j weighted 0.8^j.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402  (read_docs, encode_stream, teacher_stream, END_OF_TEXT)

PASS_WEIGHT = 0.8


def default_aux_layers(num_layers):
    """vLLM's get_eagle3_aux_hidden_state_layers (and tools/reference/eagle3_reference.py's)."""
    return [2, num_layers // 2, num_layers - 3]


def rms_norm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class Eagle3Head(torch.nn.Module):
    """The head's weights under the names it is saved with (state_dict keys: see SAVED_NAMES)."""

    def __init__(self, cfg, embed, lm_head):
        super().__init__()
        H, I = cfg["hidden_size"], cfg["intermediate_size"]
        self.nh, self.nkv, self.d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.eps = cfg["rms_norm_eps"]
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.fc = lin(3 * H, H)
        self.input_layernorm = torch.nn.Parameter(torch.ones(H))
        self.hidden_norm = torch.nn.Parameter(torch.ones(H))
        self.q_proj, self.k_proj = lin(2 * H, self.nh * self.d), lin(2 * H, self.nkv * self.d)
        self.v_proj, self.o_proj = lin(2 * H, self.nkv * self.d), lin(self.nh * self.d, H)
        self.post_attention_layernorm = torch.nn.Parameter(torch.ones(H))
        self.gate_proj, self.up_proj, self.down_proj = lin(H, I), lin(H, I), lin(I, H)
        self.norm = torch.nn.Parameter(torch.ones(H))
        self.lm_head = lin(H, lm_head.shape[0])
        with torch.no_grad():
            self.lm_head.weight.copy_(lm_head)
        self.register_buffer("embed", embed.detach().clone(), persistent=False)
        inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, self.d, 2, dtype=torch.float32) / self.d))
        self.register_buffer("inv_freq", inv, persistent=False)

    def rope(self, x, T):
        """Llama's rotation (transformers' apply_rotary_pos_emb) at positions 0 .. T - 1; x [B, heads, T, d]."""
        angles = torch.outer(torch.arange(T, device=x.device, dtype=torch.float32), self.inv_freq)
        emb = torch.cat([angles, angles], dim=-1)
        return (x.float() * emb.cos() + rotate_half(x.float()) * emb.sin()).to(x.dtype)

    def qkv(self, hidden, tokens):
        """The layer's q, k, v (k and v repeated to every query head) and its residual for hidden [B, T, H] and the
        tokens [B, T] it reads."""
        B, T, _ = hidden.shape
        e = rms_norm(self.embed[tokens].to(hidden.dtype), self.input_layernorm, self.eps)
        x = torch.cat([e, rms_norm(hidden, self.hidden_norm, self.eps)], dim=-1)
        q = self.rope(self.q_proj(x).view(B, T, self.nh, self.d).transpose(1, 2), T)
        k = self.rope(self.k_proj(x).view(B, T, self.nkv, self.d).transpose(1, 2), T)
        v = self.v_proj(x).view(B, T, self.nkv, self.d).transpose(1, 2)
        rep = self.nh // self.nkv
        return q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1), hidden

    def finish(self, residual, attn):
        """The layer after attention, then the logits; returns (logits, the pre-norm output)."""
        residual = residual + self.o_proj(attn)
        m = rms_norm(residual, self.post_attention_layernorm, self.eps)
        residual = residual + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))
        return self.lm_head(rms_norm(residual, self.norm, self.eps)), residual


def ttt_forward(head, aux, tokens, passes):
    """The head's logits of each pass (a list of [B, T, V]) over aux [B, T, 3H] and tokens [B, T]: pass 0 on fc(aux);
    pass j on pass j - 1's pre-norm output at t - 1, attending to pass 0's keys at s <= t - j and pass i's at t - j + i.
    Rows t < j of pass j have no chain behind them: they attend to position 0 alone and count for nothing."""
    B, T, _ = aux.shape
    hidden = head.fc(aux)
    keys, values, logits = [], [], []
    t = torch.arange(T, device=aux.device)
    scale = 1.0 / math.sqrt(head.d)
    for j in range(passes):
        q, k, v, residual = head.qkv(hidden, tokens)
        keys.append(k)
        values.append(v)
        s0 = (q @ keys[0].transpose(-1, -2)).float() * scale
        allowed = (t[None, :] <= t[:, None] - j) | ((t[:, None] < j) & (t[None, :] == 0))
        scores = [s0.masked_fill(~allowed, float("-inf"))]
        shifted = []
        for i in range(1, j + 1):
            ks, vs = keys[i].roll(j - i, dims=2), values[i].roll(j - i, dims=2)  # ks[t] = keys[i][t - (j - i)]
            d = (q * ks).sum(-1, keepdim=True).float() * scale
            scores.append(d.masked_fill((t < j)[:, None], float("-inf")))
            shifted.append(vs)
        p = torch.cat(scores, dim=-1).softmax(-1).to(q.dtype)
        out = p[..., :T] @ values[0]
        for i, vs in enumerate(shifted):
            out = out + p[..., T + i:T + i + 1] * vs
        step_logits, prenorm = head.finish(residual, out.transpose(1, 2).reshape(B, T, head.nh * head.d))
        logits.append(step_logits)
        hidden = torch.cat([torch.zeros_like(prenorm[:, :1]), prenorm[:, :-1]], dim=1)
    return logits


def ttt_loss(logits, teacher_logits):
    """Sum over passes of 0.8^j x the forward KL from the target (train.distill_loss), pass j over rows t >= j."""
    total = 0.0
    for j, lg in enumerate(logits):
        total = total + PASS_WEIGHT ** j * train.distill_loss(lg[:, j:], teacher_logits[:, j:], None, 1.0)
    return total


@torch.no_grad()
def target_batch(target, rows, aux_layers):
    """The head's inputs of windows rows [B, L]: aux [B, L - 1, 3H] (states entering the aux layers at 0 .. L - 2),
    tokens x[1:] and the target's logits at 1 .. L - 1."""
    out = target(input_ids=rows, output_hidden_states=True)
    aux = torch.cat([out.hidden_states[j] for j in aux_layers], dim=-1)
    return aux[:, :-1], rows[:, 1:], out.logits[:, 1:]


def head_config(target_cfg, aux_layers):
    """config.json as Quire's loader and vLLM read it (the keys src/tools/test-model/eagle3.ts writes)."""
    H, heads = target_cfg["hidden_size"], target_cfg["num_attention_heads"]
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
        "intermediate_size": target_cfg["intermediate_size"], "num_hidden_layers": 1, "num_attention_heads": heads,
        "num_key_value_heads": target_cfg.get("num_key_value_heads", heads),
        "head_dim": target_cfg.get("head_dim") or H // heads, "hidden_act": "silu",
        "vocab_size": target_cfg["vocab_size"], "draft_vocab_size": target_cfg["vocab_size"],
        "max_position_embeddings": target_cfg["max_position_embeddings"], "rope_theta": target_cfg["rope_theta"],
        "rope_scaling": target_cfg.get("rope_scaling"), "rms_norm_eps": target_cfg.get("rms_norm_eps", 1e-6),
        "tie_word_embeddings": False, "attention_bias": False, "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_layers)},
    }


# the saved tensors' names (the published heads' and src/tools/test-model/eagle3.ts's) by the module's
SAVED_NAMES = {
    "fc.weight": "fc.weight", "input_layernorm": "midlayer.input_layernorm.weight",
    "hidden_norm": "midlayer.hidden_norm.weight", "q_proj.weight": "midlayer.self_attn.q_proj.weight",
    "k_proj.weight": "midlayer.self_attn.k_proj.weight", "v_proj.weight": "midlayer.self_attn.v_proj.weight",
    "o_proj.weight": "midlayer.self_attn.o_proj.weight",
    "post_attention_layernorm": "midlayer.post_attention_layernorm.weight",
    "gate_proj.weight": "midlayer.mlp.gate_proj.weight", "up_proj.weight": "midlayer.mlp.up_proj.weight",
    "down_proj.weight": "midlayer.mlp.down_proj.weight", "norm": "norm.weight", "lm_head.weight": "lm_head.weight",
}


def save_head(head, config, out):
    from safetensors.torch import save_file
    os.makedirs(out, exist_ok=True)
    state = head.state_dict()
    tensors = {SAVED_NAMES[k]: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in state.items()}
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, help="the target's directory (train.py's)")
    ap.add_argument("--out", required=True, help="the head's directory to write")
    ap.add_argument("--data-dir", default=os.path.join(train.HERE, "data"))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--generate", type=int, default=2048, help="greedy continuations of the target to train on")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup-steps", type=int, default=50)
    ap.add_argument("--ttt-steps", type=int, default=3, help="passes of the training-time test (1: pass 0 alone)")
    ap.add_argument("--time-budget-s", type=float, default=60.0, help="stop training after this many seconds")
    ap.add_argument("--seed", type=int, default=1611)
    args = ap.parse_args()
    if args.ttt_steps < 1:
        sys.exit(f"error: --ttt-steps {args.ttt_steps}: at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no CUDA device (use --device cpu for a smoke test)")
    return args


def main():
    from tokenizers import Tokenizer
    args = parse_args()
    started = time.time()
    torch.manual_seed(args.seed)
    with open(os.path.join(args.target, "config.json"), encoding="utf-8") as f:
        target_cfg = json.load(f)
    target = train.load_teacher(args.target, target_cfg["vocab_size"], args.device)
    tok = Tokenizer.from_file(os.path.join(args.target, "tokenizer.json"))
    stream = train.encode_stream(tok, train.read_docs(os.path.join(args.data_dir, "corpus.txt")))
    end_id = tok.token_to_id(train.END_OF_TEXT)
    stream = train.teacher_stream(target, stream, args.generate, args.seq_len, end_id, args.seed, args.device)
    print(f"target: {args.generate} greedy continuations, {len(stream)} tokens; {time.time() - started:.1f}s",
          flush=True)
    aux_layers = default_aux_layers(target_cfg["num_hidden_layers"])
    config = head_config(target_cfg, aux_layers)
    head = Eagle3Head(config, target.get_input_embeddings().weight.float(),
                      target.get_output_embeddings().weight.float()).to(args.device)
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(args.seed)
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if args.device == "cuda" else contextlib.nullcontext
    train_started = time.time()
    steps = 0
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / args.warmup_steps)
        rows, _ = train.random_windows(stream, args.batch_size, args.seq_len, generator, args.device)
        with amp():
            aux, tokens, teacher_logits = target_batch(target, rows, aux_layers)
            logits = ttt_forward(head, aux, tokens, args.ttt_steps)
        loss = ttt_loss(logits, teacher_logits)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        if step % 100 == 0:
            with torch.no_grad():
                agree = [(lg[:, j:].argmax(-1) == teacher_logits[:, j:].argmax(-1)).float().mean().item()
                         for j, lg in enumerate(logits)]
            print(f"step {step}: loss {loss.item():.4f}, argmax agreement by pass "
                  + " / ".join(f"{a:.3f}" for a in agree), flush=True)
        steps = step + 1
        if time.time() - train_started > args.time_budget_s:
            break
    save_head(head, config, args.out)
    print(f"wrote {args.out} after {steps} steps; total wall time {time.time() - started:.1f}s", flush=True)


if __name__ == "__main__":
    main()
