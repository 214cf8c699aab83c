"""python3 -m unittest discover -s tools/train-demo -p 'test_*.py'   (needs torch and transformers: the GPU host has
them; skipped elsewhere). train_eagle3's head against tools/reference/eagle3_reference.py's forward (the one Quire's
CPU head matches): pass 0 is the catch-up, pass j at a position the j-th chained proposal; and the saved layout."""
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import torch
    import train_eagle3
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    sys.path.insert(0, os.path.join(HERE, "..", "reference"))
    import eagle3_reference
except ImportError:  # no torch here
    torch = None

CFG = {"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
       "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "vocab_size": 50, "max_position_embeddings": 128}


@unittest.skipIf(torch is None, "torch and transformers are not installed")
class Eagle3HeadTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        H, V = CFG["hidden_size"], CFG["vocab_size"]
        self.embed = torch.randn(V, H)
        self.head = train_eagle3.Eagle3Head(CFG, self.embed, torch.randn(V, H) * 0.2)
        with torch.no_grad():  # norms away from ones, so a swapped norm shows
            for p in (self.head.input_layernorm, self.head.hidden_norm, self.head.post_attention_layernorm,
                      self.head.norm):
                p.uniform_(0.5, 1.5)
        self.T = 9
        self.tokens = torch.randint(0, V, (1, self.T))
        self.aux = torch.randn(1, self.T, 3 * H)
        # the reference's weights: the saved names, its lm_head under "lm_head"
        self.w = {train_eagle3.SAVED_NAMES[k]: v for k, v in self.head.state_dict().items()}
        self.w["lm_head"] = self.w["lm_head.weight"]
        config = dict(CFG, num_hidden_layers=1)
        self.config = config
        self.rotary = LlamaRotaryEmbedding(config=LlamaConfig(**config))

    def reference(self, tokens, hidden, is_fc):
        return eagle3_reference.head_forward(torch, self.w, self.config, self.rotary, self.embed, tokens, hidden, is_fc)

    def test_pass_0_is_the_catch_up(self):
        with torch.no_grad():
            got = train_eagle3.ttt_forward(self.head, self.aux, self.tokens, 1)[0][0]
            want, _ = self.reference(self.tokens[0].tolist(), list(self.aux[0]), [True] * self.T)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)

    def test_pass_j_at_a_position_is_the_jth_chained_proposal(self):
        T, toks, aux = self.T, self.tokens[0].tolist(), list(self.aux[0])
        with torch.no_grad():
            logits = train_eagle3.ttt_forward(self.head, self.aux, self.tokens, 3)
            _, pre0 = self.reference(toks, aux, [True] * T)
            # one chained step at T - 1 (the catch-up up to T - 2), then two (T - 2 and T - 1)
            want1, _ = self.reference(toks, aux[:T - 1] + [pre0[T - 2]], [True] * (T - 1) + [False])
            _, pre1 = self.reference(toks[:T - 1], aux[:T - 2] + [pre0[T - 3]], [True] * (T - 2) + [False])
            want2, _ = self.reference(toks, aux[:T - 2] + [pre0[T - 3], pre1[T - 2]], [True] * (T - 2) + [False, False])
        torch.testing.assert_close(logits[1][0, T - 1], want1[T - 1], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(logits[2][0, T - 1], want2[T - 1], rtol=1e-4, atol=1e-5)
        self.assertFalse(torch.allclose(logits[1][0, T - 1], logits[0][0, T - 1]), "pass 1 is not pass 0")

    def test_the_loss_is_zero_on_the_targets_logits_and_descends(self):
        with torch.no_grad():
            logits = train_eagle3.ttt_forward(self.head, self.aux, self.tokens, 2)
            # pass 0 against itself adds nothing; pass 1 its KL from pass 0, weighted 0.8
            kl1 = train_eagle3.train.distill_loss(logits[1][:, 1:], logits[0][:, 1:], None, 1.0).item()
            self.assertAlmostEqual(train_eagle3.ttt_loss(logits, logits[0]).item(), 0.8 * kl1, places=5)
            self.assertGreater(kl1, 0.0)
        teacher = torch.randn(1, self.T, CFG["vocab_size"]) * 3
        opt = torch.optim.Adam(self.head.parameters(), lr=1e-2)
        losses = []
        for _ in range(60):
            loss = train_eagle3.ttt_loss(train_eagle3.ttt_forward(self.head, self.aux, self.tokens, 2), teacher)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        self.assertLess(losses[-1], 0.5 * losses[0])

    def test_saved_layout_is_the_published_heads(self):
        from safetensors.torch import load_file
        target = dict(CFG, num_hidden_layers=16, model_type="qwen3")
        config = train_eagle3.head_config(target, train_eagle3.default_aux_layers(16))
        with tempfile.TemporaryDirectory() as out:
            train_eagle3.save_head(self.head, config, out)
            tensors = load_file(os.path.join(out, "model.safetensors"))
            with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
                saved = json.load(f)
        H, I = CFG["hidden_size"], CFG["intermediate_size"]
        want = {"fc.weight": [H, 3 * H], "midlayer.input_layernorm.weight": [H], "midlayer.hidden_norm.weight": [H],
                "midlayer.self_attn.q_proj.weight": [32, 2 * H], "midlayer.self_attn.k_proj.weight": [16, 2 * H],
                "midlayer.self_attn.v_proj.weight": [16, 2 * H], "midlayer.self_attn.o_proj.weight": [H, 32],
                "midlayer.post_attention_layernorm.weight": [H], "midlayer.mlp.gate_proj.weight": [I, H],
                "midlayer.mlp.up_proj.weight": [I, H], "midlayer.mlp.down_proj.weight": [H, I], "norm.weight": [H],
                "lm_head.weight": [CFG["vocab_size"], H]}
        self.assertEqual({k: list(v.shape) for k, v in tensors.items()}, want)
        self.assertTrue(all(v.dtype == torch.bfloat16 for v in tensors.values()))
        self.assertEqual(saved["architectures"], ["LlamaForCausalLMEagle3"])
        self.assertEqual(saved["eagle_config"]["eagle_aux_hidden_state_layer_ids"], [2, 8, 13])
        self.assertEqual(saved["draft_vocab_size"], CFG["vocab_size"])


if __name__ == "__main__":
    unittest.main()
