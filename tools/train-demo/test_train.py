"""python3 -m unittest discover -s tools/train-demo -p 'test_*.py'   (this file needs torch and transformers: the GPU
host has them; it is skipped elsewhere)"""
import unittest

try:
    import torch
    import torch.nn.functional as F
    import train
except ImportError:  # no torch here
    torch = None


@unittest.skipIf(torch is None, "torch and transformers are not installed")
class DistillLossTest(unittest.TestCase):
    def setUp(self):
        g = torch.Generator().manual_seed(0)
        self.teacher = torch.randn(2, 5, 11, generator=g)
        self.student = torch.randn(2, 5, 11, generator=g)
        self.targets = torch.randint(0, 11, (2, 5), generator=g)

    def test_zero_when_the_student_is_the_teacher(self):
        self.assertAlmostEqual(train.distill_loss(self.teacher, self.teacher, self.targets, 1.0).item(), 0.0, places=5)

    def test_is_the_kl_from_the_teacher_per_token(self):
        p = F.softmax(self.teacher.reshape(-1, 11), dim=-1)
        want = (p * (p.log() - F.log_softmax(self.student.reshape(-1, 11), dim=-1))).sum(-1).mean()
        got = train.distill_loss(self.student, self.teacher, self.targets, 1.0)
        self.assertAlmostEqual(got.item(), want.item(), places=5)

    def test_weight_zero_is_the_corpus_cross_entropy(self):
        want = F.cross_entropy(self.student.reshape(-1, 11), self.targets.reshape(-1))
        got = train.distill_loss(self.student, self.teacher, self.targets, 0.0)
        self.assertAlmostEqual(got.item(), want.item(), places=5)

    def test_descent_moves_the_students_argmax_to_the_teachers(self):
        student = self.student.clone().requires_grad_(True)
        opt = torch.optim.SGD([student], lr=5.0)
        for _ in range(200):
            opt.zero_grad()
            train.distill_loss(student, self.teacher, self.targets, 1.0).backward()
            opt.step()
        self.assertTrue(torch.equal(student.argmax(-1), self.teacher.argmax(-1)))


@unittest.skipIf(torch is None, "torch and transformers are not installed")
class TeacherStreamTest(unittest.TestCase):
    def test_openings_of_the_corpus_then_the_teachers_greedy_tokens(self):
        torch.manual_seed(0)
        config = train.Qwen3Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
                                   eos_token_id=0, pad_token_id=0)
        teacher = train.Qwen3ForCausalLM(config).eval()
        corpus = torch.randint(3, 50, (500,))
        stream = train.teacher_stream(teacher, corpus, 5, 12, 0, 1, "cpu", batch_size=2, prompt_len=4)
        self.assertEqual(len(stream), 5 * 13)
        for row in stream.reshape(5, 13):
            prompt = row[:4]
            self.assertTrue(any(torch.equal(corpus[i:i + 4], prompt) for i in range(len(corpus) - 4)))
            with torch.no_grad():
                logits = teacher(input_ids=row[None, :12]).logits[0]
            # each generated token is the teacher's argmax after what precedes it (eos, id 0, suppressed)
            logits[:, 0] = float("-inf")
            self.assertTrue(torch.equal(logits[3:11].argmax(-1), row[4:12]))
            self.assertEqual(row[12].item(), 0)


if __name__ == "__main__":
    unittest.main()
