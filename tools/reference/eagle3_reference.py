"""Reference logits of an EAGLE-3 head, from torch and transformers, on the same weights as Quire's.

Runs on the GPU host (torch + transformers, no network), float32 on the CPU. The target runs in transformers
(AutoModelForCausalLM, output_hidden_states: hidden_states[j] is the residual stream entering layer j, the state vLLM's
aux_hidden_state_layers = j keeps); the head is vLLM's Eagle3LlamaForCausalLM (llama_eagle3.py) written out in torch
from its checkpoint, its rotary embedding transformers' LlamaRotaryEmbedding of its config:

    h = fc [a_0 | a_1 | a_2]          (a chained step: the head's prenorm output at the position before)
    e = input_layernorm(embed(x_{t+1})); hn = hidden_norm(h); residual = h (norm_before_residual: hn)
    q, k, v = proj [e | hn]; RoPE; causal GQA attention; residual += o(attn)
    residual += down(silu(gate m) * up m), m = post_attention_layernorm(residual)
    logits = lm_head(norm(residual)) over the draft vocabulary; a draft id i proposes target id i + d2t[i]

For each prompt it writes the catch-up's logits at some positions (the head at position t reads token t + 1 and the
target's states at t), a chained step's logits (a proposal at position n - 1 on the head's prenorm output at n - 2),
and the catch-up's greedy proposal as a target id. test/model/eagle3-reference.test.ts holds Quire's CPU head to it.

usage: python3 tools/reference/eagle3_reference.py TARGET_DIR HEAD_DIR OUT.json
"""
import json
import os
import sys
import time

PROMPTS = [
    [17, 300, 4, 4, 91, 250, 6, 77, 130, 2, 45, 300, 18, 9, 211, 64, 5, 33],
    [100, 37, 250, 11, 9, 301, 77, 5],
]
PROPOSAL = 123


def default_aux_layers(num_layers: int) -> tuple:
    """vLLM's get_eagle3_aux_hidden_state_layers: early, middle and late layers of the target."""
    return (2, num_layers // 2, num_layers - 3)


def aux_layer_ids(config: dict, num_layers: int) -> tuple:
    """The head config's eagle_aux_hidden_state_layer_ids (top level or in eagle_config), or vLLM's default."""
    ids = config.get("eagle_aux_hidden_state_layer_ids") or (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return tuple(int(i) for i in ids) if ids else default_aux_layers(num_layers)


def draft_to_target(d2t) -> list:
    """Draft id i -> target id i + d2t[i] (Eagle3LlamaForCausalLM.compute_logits' draft_id_to_target_id)."""
    return [i + int(o) for i, o in enumerate(d2t)]


def rms_norm(torch, x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def head_forward(torch, w: dict, config: dict, rotary, embed, tokens, h, hidden_is_fc_input):
    """The head over one sequence from position 0: tokens [T], h [T, 3H or H] (rows hidden_is_fc_input says go
    through fc). Returns (logits [T, draft vocab], prenorm [T, H])."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    eps = config.get("rms_norm_eps", 1e-6)
    H = config["hidden_size"]
    nh = config["num_attention_heads"]
    nkv = config.get("num_key_value_heads", nh)
    d = config.get("head_dim") or H // nh
    p = "midlayer." if "midlayer.input_layernorm.weight" in w else "layers.0."
    T = len(tokens)
    hidden = torch.stack([h[t] @ w["fc.weight"].T if hidden_is_fc_input[t] else h[t] for t in range(T)])
    e = rms_norm(torch, embed[torch.tensor(tokens)], w[p + "input_layernorm.weight"], eps)
    hn = rms_norm(torch, hidden, w[p + "hidden_norm.weight"], eps)
    residual = hn if config.get("norm_before_residual", False) else hidden
    x = torch.cat([e, hn], dim=-1)
    q = (x @ w[p + "self_attn.q_proj.weight"].T).view(T, nh, d).transpose(0, 1)
    k = (x @ w[p + "self_attn.k_proj.weight"].T).view(T, nkv, d).transpose(0, 1)
    v = (x @ w[p + "self_attn.v_proj.weight"].T).view(T, nkv, d).transpose(0, 1)
    cos, sin = rotary(v, torch.arange(T).unsqueeze(0))
    q, k = apply_rotary_pos_emb(q.unsqueeze(0), k.unsqueeze(0), cos, sin)
    q, k = q[0], k[0]
    k = k.repeat_interleave(nh // nkv, dim=0)
    v = v.repeat_interleave(nh // nkv, dim=0)
    scores = (q @ k.transpose(1, 2)) / d ** 0.5
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), float("-inf"))
    attn = (scores.softmax(-1) @ v).transpose(0, 1).reshape(T, nh * d)
    residual = residual + attn @ w[p + "self_attn.o_proj.weight"].T
    m = rms_norm(torch, residual, w[p + "post_attention_layernorm.weight"], eps)
    gate, up = m @ w[p + "mlp.gate_proj.weight"].T, m @ w[p + "mlp.up_proj.weight"].T
    residual = residual + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    return rms_norm(torch, residual, w["norm.weight"], eps) @ w["lm_head"].T, residual


def main() -> int:
    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    target_dir, head_dir, out = sys.argv[1:]
    t0 = time.time()
    target = AutoModelForCausalLM.from_pretrained(target_dir, torch_dtype=torch.float32).eval()
    with open(os.path.join(head_dir, "config.json")) as f:
        config = json.load(f)
    w = {k: (v.float() if v.is_floating_point() else v) for k, v in load_file(os.path.join(head_dir, "model.safetensors")).items()}
    # without its own embed_tokens / lm_head the head reads the target's (vLLM shares them)
    embed = w.get("embed_tokens.weight", target.get_input_embeddings().weight.detach().float())
    w["lm_head"] = w.get("lm_head.weight", target.get_output_embeddings().weight.detach().float())
    d2t = draft_to_target(w["d2t"].tolist()) if "d2t" in w else None
    llama = LlamaConfig(**{k: v for k, v in config.items() if k not in ("architectures",)})
    rotary = LlamaRotaryEmbedding(config=llama)
    layers = aux_layer_ids(config, target.config.num_hidden_layers)
    results = []
    with torch.no_grad():
        for prompt in PROMPTS:
            n = len(prompt)
            states = target(torch.tensor([prompt]), output_hidden_states=True).hidden_states
            aux = torch.cat([states[j][0] for j in layers], dim=-1)
            catch_up, prenorm = head_forward(torch, w, config, rotary, embed, prompt[1:], list(aux[: n - 1]), [True] * (n - 1))
            chained, _ = head_forward(torch, w, config, rotary, embed, prompt[1:] + [PROPOSAL],
                                      list(aux[: n - 1]) + [prenorm[n - 2]], [True] * (n - 1) + [False])
            best = int(catch_up[n - 2].argmax())
            positions = sorted({0, (n - 1) // 2, n - 2})
            results.append({
                "prompt": prompt,
                "catch_up": [{"position": t, "logits": catch_up[t].tolist()} for t in positions],
                "chained": {"proposal": PROPOSAL, "position": n - 1, "logits": chained[n - 1].tolist()},
                "proposal": d2t[best] if d2t else best,
            })
    with open(out, "w") as f:
        json.dump({"generated_by": f"tools/reference/eagle3_reference.py (torch {torch.__version__}, transformers "
                                   f"{transformers.__version__}, float32 cpu)",
                   "aux_layers": list(layers), "prompts": results}, f)
    print(f"{out}: {len(results)} prompts in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
