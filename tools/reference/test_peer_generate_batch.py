"""The torch-free parts of peer_generate_batch.py: python3 -m unittest discover -s tools/reference"""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_generate_batch as peer  # noqa: E402


def write_json(test, obj):
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    test.addCleanup(os.unlink, f.name)
    json.dump(obj, f)
    f.close()
    return f.name


class ArgsTest(unittest.TestCase):
    def test_defaults_are_the_w1_run(self):
        a = peer.parse_args(["--model", "m"])
        self.assertEqual((a.device, a.dtype, a.api, a.workload), ("cuda", "bf16", "manager", "w1"))
        self.assertEqual(a.attn_implementation, "paged|sdpa")
        self.assertEqual(a.prompts, peer.DEFAULT_PROMPTS)
        self.assertTrue(os.path.exists(a.prompts))

    def test_only_kwargs_the_installed_api_names_are_passed(self):
        def add_request(input_ids, request_id=None, max_new_tokens=None, **logit_processor_kwargs):
            return input_ids
        got = peer._supported(add_request, {"max_new_tokens": 3, "record_timestamps": True})
        self.assertEqual(got, {"max_new_tokens": 3})

    def test_model_is_required_outside_self_check(self):
        with self.assertRaises(SystemExit):
            peer.parse_args(["--output-len", "8"])
        self.assertTrue(peer.parse_args(["--self-check"]).self_check)

    def test_lengths_must_be_positive(self):
        with self.assertRaises(SystemExit):
            peer.parse_args(["--model", "m", "--output-len", "0"])


class PromptsTest(unittest.TestCase):
    def test_raw_file_is_folded_into_the_vocabulary(self):
        path = write_json(self, {"requests": [{"prompt_token_ids": [5, 1003, 2999], "max_tokens": 7},
                                        {"prompt_token_ids": [1000], "max_tokens": 9}]})
        self.assertEqual(peer.load_prompts(path, 1000), [([5, 3, 999], 7), ([0], 9)])
        self.assertEqual(peer.load_prompts(path, 1000, num_requests=1, output_len=4), [([5, 3, 999], 4)])

    def test_a_quire_dump_is_used_as_is_and_must_match_the_model(self):
        path = write_json(self, {"vocabSize": 500, "requests": [{"prompt_token_ids": [499, 7], "max_tokens": 3}]})
        self.assertEqual(peer.load_prompts(path, 500), [([499, 7], 3)])
        with self.assertRaisesRegex(ValueError, "vocabulary of 500, the model has 600"):
            peer.load_prompts(path, 600)

    def test_ids_outside_the_vocabulary_are_refused(self):
        path = write_json(self, {"vocabSize": 500, "requests": [{"prompt_token_ids": [500], "max_tokens": 3}]})
        with self.assertRaisesRegex(ValueError, "outside"):
            peer.load_prompts(path, None)

    def test_malformed_requests_are_refused(self):
        for bad in ({"requests": []}, {"requests": [{"prompt_token_ids": [1, "2"], "max_tokens": 3}]},
                    {"requests": [{"prompt_token_ids": [1], "max_tokens": True}]}, [1, 2]):
            with self.assertRaises(ValueError):
                peer.load_prompts(write_json(self, bad), 100)

    def test_w1_file_matches_its_documented_totals(self):
        reqs = peer.load_prompts(peer.DEFAULT_PROMPTS, 32000)
        self.assertEqual(len(reqs), 256)
        self.assertEqual(sum(len(ids) for ids, _ in reqs), 142827)
        self.assertEqual(sum(n for _, n in reqs), 133966)


class ResultTest(unittest.TestCase):
    def test_percentile_interpolates_like_quire(self):
        self.assertEqual(peer.percentile([4.0, 1.0, 3.0, 2.0], 50), 2.5)
        self.assertEqual(peer.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 90), 4.6)
        self.assertIsNone(peer.percentile([], 50))

    def test_shaped_result_matches_the_schema(self):
        reqs = [([1, 2, 3], 4), ([5, 6], 4)]
        r = peer.shape_result("w1", reqs, 8, 2.0, [10.0, 30.0], {"gpus": []})
        self.assertEqual(peer.schema_errors(r, peer.load_schema()), [])
        self.assertEqual((r["numPromptTokens"], r["outputTokensPerS"], r["ttftP50Ms"]), (5, 4.0, 20.0))
        self.assertIsNone(peer.shape_result("w1", reqs, 0, 1.0, [])["ttftP50Ms"])

    def test_schema_check_catches_missing_extra_and_mistyped_keys(self):
        schema = peer.load_schema()
        r = peer.shape_result("w1", [([1], 1)], 1, 1.0, [1.0])
        del r["wallS"]
        r["numRequests"] = True
        r["tokensPerSecond"] = 3.0
        r["outputTokensPerS"] = float("nan")
        errors = peer.schema_errors(r, schema)
        self.assertEqual(len(errors), 4, errors)
        self.assertTrue(any('missing required key "wallS"' in e for e in errors))
        self.assertTrue(any("$.numRequests: expected integer, got boolean" in e for e in errors))
        self.assertTrue(any('unexpected key "tokensPerSecond"' in e for e in errors))
        with self.assertRaises(ValueError):
            peer.checked_json(r, schema)

    def test_nvidia_smi_lines_parse_like_quire(self):
        gpus = peer.parse_nvidia_smi("0, NVIDIA H100 80GB HBM3, 550.54.15, 9.0, 81559\n")
        self.assertEqual(gpus, [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "driverVersion": "550.54.15",
                                 "computeCapability": "9.0", "memoryTotalMiB": 81559.0}])


if __name__ == "__main__":
    unittest.main()
