"""eagle3_reference.py's parts: python3 -m unittest discover -s tools/reference (the torch part skips without torch)"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eagle3_reference as ref  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


class ConfigTest(unittest.TestCase):
    def test_vllm_default_layers_and_the_config_fields_that_name_them(self):
        self.assertEqual(ref.default_aux_layers(8), (2, 4, 5))
        self.assertEqual(ref.default_aux_layers(32), (2, 16, 29))
        self.assertEqual(ref.aux_layer_ids({}, 8), (2, 4, 5))
        self.assertEqual(ref.aux_layer_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 6]}}, 8), (1, 3, 6))
        self.assertEqual(ref.aux_layer_ids({"eagle_aux_hidden_state_layer_ids": [0, 2, 7]}, 8), (0, 2, 7))

    def test_d2t_offsets_map_draft_ids_to_target_ids(self):
        self.assertEqual(ref.draft_to_target([0, 1, 1, 5]), [0, 2, 3, 8])


@unittest.skipIf(torch is None, "no torch on this machine")
class HeadTest(unittest.TestCase):
    def setUp(self):
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
        g = torch.Generator().manual_seed(0)
        self.H, self.config = 16, {"hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
                                   "intermediate_size": 24, "rms_norm_eps": 1e-6, "max_position_embeddings": 64}
        r = lambda *s: torch.randn(*s, generator=g) * 0.3  # noqa: E731
        H, p = self.H, "midlayer."
        self.w = {"fc.weight": r(H, 3 * H), p + "input_layernorm.weight": 1 + r(H), p + "hidden_norm.weight": 1 + r(H),
                  p + "self_attn.q_proj.weight": r(16, 2 * H), p + "self_attn.k_proj.weight": r(8, 2 * H),
                  p + "self_attn.v_proj.weight": r(8, 2 * H), p + "self_attn.o_proj.weight": r(H, 16),
                  p + "post_attention_layernorm.weight": 1 + r(H), p + "mlp.gate_proj.weight": r(24, H),
                  p + "mlp.up_proj.weight": r(24, H), p + "mlp.down_proj.weight": r(H, 24), "norm.weight": 1 + r(H),
                  "lm_head": r(10, H)}
        self.embed = r(20, H)
        self.rotary = LlamaRotaryEmbedding(config=LlamaConfig(**self.config))
        self.aux = r(5, 3 * H)

    def run_head(self, tokens, h, through_fc):
        return ref.head_forward(torch, self.w, self.config, self.rotary, self.embed, tokens, h, through_fc)

    def test_causal_and_chained_on_its_own_prenorm_output(self):
        tokens = [3, 1, 4, 1, 5]
        logits, prenorm = self.run_head(tokens, list(self.aux), [True] * 5)
        self.assertEqual(tuple(logits.shape), (5, 10))
        # a later token or state changes nothing before it
        other, _ = self.run_head(tokens[:3] + [9, 9], list(self.aux[:3]) + list(torch.zeros(2, 3 * self.H)), [True] * 5)
        torch.testing.assert_close(other[:3], logits[:3])
        # a chained step reads the head's prenorm output as h (no fc)
        chained, _ = self.run_head(tokens[:4] + [7], list(self.aux[:4]) + [prenorm[3]], [True] * 4 + [False])
        torch.testing.assert_close(chained[:4], logits[:4])
        self.assertFalse(torch.allclose(chained[4], logits[4]))

    def test_norm_before_residual_starts_the_residual_from_the_normed_state(self):
        a, _ = self.run_head([1, 2], list(self.aux[:2]), [True, True])
        b, _ = ref.head_forward(torch, self.w, {**self.config, "norm_before_residual": True}, self.rotary, self.embed,
                                [1, 2], list(self.aux[:2]), [True, True])
        self.assertFalse(torch.allclose(a, b))


if __name__ == "__main__":
    unittest.main()
