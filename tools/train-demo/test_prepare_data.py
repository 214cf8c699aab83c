"""python3 -m unittest discover -s tools/train-demo -p 'test_*.py'   (standard library only)"""
import os
import re
import tempfile
import unittest

import prepare_data as prep

HERE = os.path.dirname(os.path.abspath(__file__))
CHATML = re.compile(r"(<\|im_start\|>(system|user|assistant)\n[^<]+<\|im_end\|>\n)+")
SPECIAL = re.compile(r"<\|(im_start|im_end|endoftext)\|>")


def synthetic_dump(num_chapters, num_verses):
    lines = []
    for c in range(1, num_chapters + 1):
        for v in range(1, num_verses + 1):
            lines.append(f"Ge{c}:{v} And the shepherd{c}x{v} kept the flocks of Laban, saying, Behold the morning cometh and the night also.")
    return lines


def read_docs(path):
    with open(path, encoding="utf-8") as f:
        pieces = f.read().split(prep.DOC_END)
    assert pieces[-1] == ""
    return pieces[:-1]


def assert_valid_doc(test, doc):
    if doc.startswith("<|im_start|>"):
        test.assertIsNotNone(CHATML.fullmatch(doc), doc)
        roles = re.findall(r"<\|im_start\|>(\w+)\n", doc)
        test.assertEqual(roles[-1], "assistant")
        test.assertIn(roles[0], ("system", "user"))
    else:
        test.assertIsNone(SPECIAL.search(doc), doc)
        test.assertTrue(doc.endswith("\n") and doc.strip(), doc)


class ParseTest(unittest.TestCase):
    def test_groups_verses_by_chapter_and_drops_references(self):
        chapters = prep.parse_chapters(["Ge1:1 In the beginning.", "Ge1:2 And the earth.", "Ge2:1 Thus the heavens.", "1Cor13:4 Charity suffereth long."])
        self.assertEqual(chapters, [("Ge", 1, ["In the beginning.", "And the earth."]), ("Ge", 2, ["Thus the heavens."]),
                                    ("1Cor", 13, ["Charity suffereth long."])])

    def test_unknown_book_is_an_error(self):
        with self.assertRaises(ValueError):
            prep.parse_chapters(["Xyz1:1 Nothing."])

    def test_split_verse_halves_rejoin_to_the_verse(self):
        verse = "And God said, Let there be light: and there was light, and it was good."
        first, rest = prep.split_verse(verse)
        self.assertEqual(f"{first} {rest}", verse)
        self.assertIsNone(prep.split_verse("Jesus wept."))


class BuildDocumentsTest(unittest.TestCase):
    def setUp(self):
        self.chapters = prep.parse_chapters(synthetic_dump(num_chapters=81, num_verses=10))
        self.train, self.heldout = prep.build_documents(self.chapters, chats_per_verse=0.5, num_greetings=7, seed=3)

    def test_every_document_is_prose_or_a_chatml_conversation(self):
        for doc in self.train + self.heldout:
            assert_valid_doc(self, doc)
        num_chats = sum(doc.startswith("<|im_start|>") for doc in self.train)
        self.assertGreater(num_chats, 7)
        self.assertTrue(any("<|im_start|>system\n" in doc for doc in self.train))

    def test_heldout_chapters_never_reach_train(self):
        heldout_chapters = [c for i, c in enumerate(self.chapters) if i % prep.HELDOUT_EVERY_NTH_CHAPTER == 0]
        self.assertEqual(len(heldout_chapters), 3)
        train_text = "".join(self.train)
        heldout_text = "".join(self.heldout)
        for _, chapter, _ in heldout_chapters:
            self.assertNotIn(f"shepherd{chapter}x", train_text)
            self.assertIn(f"shepherd{chapter}x", heldout_text)
        self.assertIn("shepherd2x", train_text)

    def test_every_verse_appears_in_prose_once_without_its_reference(self):
        prose = "".join(doc for doc in self.train + self.heldout if not doc.startswith("<|im_start|>"))
        for c in range(1, 82):
            for v in range(1, 11):
                self.assertEqual(prose.count(f"shepherd{c}x{v} "), 1)
        self.assertNotRegex(prose, r"Ge\d+:\d+")

    def test_same_seed_same_documents(self):
        again = prep.build_documents(self.chapters, chats_per_verse=0.5, num_greetings=7, seed=3)
        other = prep.build_documents(self.chapters, chats_per_verse=0.5, num_greetings=7, seed=4)
        self.assertEqual(again, (self.train, self.heldout))
        self.assertNotEqual(other, (self.train, self.heldout))

    def test_written_file_splits_back_into_the_documents(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "corpus.txt")
            prep.write_docs(path, self.train)
            self.assertEqual(read_docs(path), self.train)


class CommittedCorpusTest(unittest.TestCase):
    def test_committed_corpus_is_small_and_well_formed(self):
        data_dir = os.path.join(HERE, "data")
        for name in ("corpus.txt", "heldout.txt"):
            path = os.path.join(data_dir, name)
            self.assertLess(os.path.getsize(path), 6_000_000)
            docs = read_docs(path)
            for doc in docs:
                assert_valid_doc(self, doc)
        train = read_docs(os.path.join(data_dir, "corpus.txt"))
        num_chats = sum(doc.startswith("<|im_start|>") for doc in train)
        self.assertGreater(num_chats, 3000)
        self.assertGreater(len(train) - num_chats, 1000)


class RewriteDocsTest(unittest.TestCase):
    def test_each_answer_copies_its_passage_of_whole_sentences_from_a_prose_doc(self):
        prose = [" ".join(f"Verse {i} of chapter {c} is here and it is long enough." for i in range(60)) + "\n"
                 for c in range(3)]
        chat = prep.chatml([("user", "hi"), ("assistant", "hello")])
        docs = prep.rewrite_docs(prose + [chat], 20, seed=1)
        self.assertEqual(len(docs), 20)
        for doc in docs:
            m = re.fullmatch(r"<\|im_start\|>user\n(.+?)\n(.+)<\|im_end\|>\n<\|im_start\|>assistant\n(.+)<\|im_end\|>\n",
                             doc, re.S)
            self.assertIsNotNone(m, doc)
            ask, passage, answer = m.groups()
            self.assertIn(ask, prep.REWRITE_ASKS)
            self.assertEqual(answer, passage)
            self.assertGreaterEqual(len(passage), 300)
            self.assertTrue(passage.startswith("Verse ") and passage.endswith("."), passage)
            self.assertTrue(any(passage in " ".join(p.split()) for p in prose))
        self.assertEqual(docs, prep.rewrite_docs(prose + [chat], 20, seed=1))


if __name__ == "__main__":
    unittest.main()
