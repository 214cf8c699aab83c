"""The torch-free part of reference_logits.py: python3 -m unittest discover -s tools/reference"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_logits as ref  # noqa: E402


class LoadingInfoTest(unittest.TestCase):
    def test_a_checkpoint_that_loads_whole_passes(self):
        ref.check_loading_info({"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": []})
        ref.check_loading_info({})

    def test_missing_unexpected_or_misshapen_weights_stop_it_naming_them(self):
        cases = [
            ({"missing_keys": ["model.layers.0.mlp.experts.gate_up_proj"]}, "lacks: model.layers.0.mlp.experts.gate_up_proj"),
            ({"unexpected_keys": {"model.layers.0.linear_attn.in_proj_qkvz.weight"}}, "does not take: model.layers.0.linear_attn"),
            ({"mismatched_keys": [("model.norm.weight", (64,), (32,))]}, "another shape: ('model.norm.weight'"),
        ]
        for info, message in cases:
            with self.assertRaisesRegex(ValueError, "does not load whole; .*" + message.replace("(", r"\(").replace(")", r"\)")):
                ref.check_loading_info(info)


if __name__ == "__main__":
    unittest.main()
