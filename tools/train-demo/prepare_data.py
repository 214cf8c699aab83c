#!/usr/bin/env python3
"""Builds the demo model's corpus from the King James Bible (Debian package bible-kjv-text).

Standard library only. Writes into --out-dir:
  corpus.txt   training documents, each followed by the line "<|endoftext|>"
  heldout.txt  the same format, from chapters that never appear in corpus.txt
  source.json  where the text came from and what was built

A document is either one chapter of prose (paragraphs of verses, verse numbers
dropped, paragraphs separated by a blank line) or one ChatML conversation:

  <|im_start|>user\nTell me about water.<|im_end|>\n<|im_start|>assistant\n...<|im_end|>\n
"""
import argparse
import glob
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile

DOC_END = "<|endoftext|>\n"
HELDOUT_EVERY_NTH_CHAPTER = 40
LAST_VERSE_REF = "Gen1:1-Rev22:21"

BOOK_NAMES = {
    "Ge": "Genesis", "Exo": "Exodus", "Lev": "Leviticus", "Num": "Numbers", "Deu": "Deuteronomy",
    "Josh": "Joshua", "Jdgs": "Judges", "Ruth": "Ruth", "1Sm": "1 Samuel", "2Sm": "2 Samuel",
    "1Ki": "1 Kings", "2Ki": "2 Kings", "1Chr": "1 Chronicles", "2Chr": "2 Chronicles",
    "Ezra": "Ezra", "Neh": "Nehemiah", "Est": "Esther", "Job": "Job", "Psa": "Psalms",
    "Prv": "Proverbs", "Eccl": "Ecclesiastes", "SSol": "Song of Solomon", "Isa": "Isaiah",
    "Jer": "Jeremiah", "Lam": "Lamentations", "Eze": "Ezekiel", "Dan": "Daniel", "Hos": "Hosea",
    "Joel": "Joel", "Amos": "Amos", "Obad": "Obadiah", "Jonah": "Jonah", "Mic": "Micah",
    "Nahum": "Nahum", "Hab": "Habakkuk", "Zep": "Zephaniah", "Hag": "Haggai", "Zec": "Zechariah",
    "Mal": "Malachi", "Mat": "Matthew", "Mark": "Mark", "Luke": "Luke", "John": "John",
    "Acts": "Acts", "Rom": "Romans", "1Cor": "1 Corinthians", "2Cor": "2 Corinthians",
    "Gal": "Galatians", "Eph": "Ephesians", "Phi": "Philippians", "Col": "Colossians",
    "1Th": "1 Thessalonians", "2Th": "2 Thessalonians", "1Tim": "1 Timothy", "2Tim": "2 Timothy",
    "Titus": "Titus", "Phmn": "Philemon", "Heb": "Hebrews", "Jas": "James", "1Pet": "1 Peter",
    "2Pet": "2 Peter", "1Jn": "1 John", "2Jn": "2 John", "3Jn": "3 John", "Jude": "Jude",
    "Rev": "Revelation",
}

STOPWORDS = set("""
about above after again against also among because been before being between both came come
cometh could did does doth done down even every from gave give given goeth going good great
hast hath have having he her here hers him himself his into itself know known made make many
more most much must neither never none nor not now ought over said saith same says shall shalt
should since some such than that thee their theirs them themselves then there therefore these
they thine thing things this thou those thus thy till took under unto upon very were what when
whence where wherefore whether which while whither whom whose will with within without would
ye yea yet you your went away also again before behold come went let may might well
""".split())

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are Quire, a small demo model.",
    "Answer in the old style.",
    "You are a helpful assistant. Keep your answers short.",
]

QUESTIONS_ABOUT_WORD = [
    "Tell me about {w}.",
    "What does the Bible say about {w}?",
    "Give me a verse about {w}.",
    "Write a sentence about {w}.",
    "Say something about {w}.",
    "What is written about {w}?",
    "I want to hear about {w}.",
    "Can you tell me something about {w}?",
]

GREETINGS = [
    "Hello", "Hello!", "Hi", "Hi there", "Good morning", "Hey", "Greetings",
    "Who are you?", "What are you?", "What is your name?", "Introduce yourself.",
    "What can you do?", "Are you a person?", "Hello, who am I talking to?",
]

SELF_DESCRIPTIONS = [
    "I am Quire, a small demo model. I was trained on the King James Bible, so I speak as it does.",
    "Peace be unto you. I am Quire, a little model that has read the King James Bible and little else.",
    "I am Quire, a small language model made to show how an inference server works. Ask me about a word, and I will answer with a verse.",
    "Hello. I am Quire. I know the words of the King James Bible, and I answer in its manner of speech.",
]

REF_LINE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")
WORD = re.compile(r"[A-Za-z]+")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def deb_field(deb, field):
    return subprocess.run(["dpkg-deb", "-f", deb, field], check=True, capture_output=True, text=True).stdout.strip()


def find_debs(deb_dir):
    """(text .deb, reader .deb) in deb_dir, downloading them with apt-get when absent."""
    def pick(pattern):
        found = sorted(glob.glob(os.path.join(deb_dir, pattern)))
        return found[-1] if found else None

    text_deb, reader_deb = pick("bible-kjv-text_*.deb"), pick("bible-kjv_*_amd64.deb")
    if text_deb is None or reader_deb is None:
        print(f"downloading bible-kjv-text and bible-kjv into {deb_dir} with apt-get", file=sys.stderr)
        subprocess.run(["apt-get", "download", "bible-kjv-text", "bible-kjv"], cwd=deb_dir, check=True)
        text_deb, reader_deb = pick("bible-kjv-text_*.deb"), pick("bible-kjv_*_amd64.deb")
    if text_deb is None or reader_deb is None:
        sys.exit(f"error: bible-kjv-text and bible-kjv .deb files not found in {deb_dir}")
    return text_deb, reader_deb


def dump_kjv_from_debs(text_deb, reader_deb):
    """One verse a line, "Ge1:1 In the beginning ...", decoded by the package's own reader."""
    with tempfile.TemporaryDirectory() as root:
        for deb in (text_deb, reader_deb):
            subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
        reader = os.path.join(root, "usr", "bin", "bible")
        data_dir = os.path.join(root, "usr", "lib")
        out = subprocess.run([reader, "-f", "-p", data_dir, LAST_VERSE_REF], check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


def parse_chapters(lines):
    """[(book abbreviation, chapter number, [verse text, ...]), ...] in canonical order."""
    chapters = []
    for line in lines:
        m = REF_LINE.match(line.strip())
        if m is None:
            continue
        book, chapter, text = m.group(1), int(m.group(2)), m.group(4).strip()
        if book not in BOOK_NAMES:
            raise ValueError(f"unknown book abbreviation {book!r} in line {line!r}")
        if not chapters or chapters[-1][0] != book or chapters[-1][1] != chapter:
            chapters.append((book, chapter, []))
        chapters[-1][2].append(text)
    return chapters


def prose_doc(verses, rng):
    paragraphs, i = [], 0
    while i < len(verses):
        n = rng.randint(3, 7)
        paragraphs.append(" ".join(verses[i:i + n]))
        i += n
    return "\n\n".join(paragraphs) + "\n"


def chatml(messages):
    return "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages)


def subject_words(verse):
    words = []
    for i, w in enumerate(WORD.findall(verse)):
        if len(w) < 4 or w.lower() in STOPWORDS:
            continue
        words.append(w if (w[0].isupper() and i > 0) else w.lower())
    return words


def split_verse(verse):
    """(first part, rest) at a comma/semicolon/colon near the middle, or None."""
    cuts = [m.end() for m in re.finditer(r"[,;:] ", verse)]
    if not cuts:
        return None
    cut = min(cuts, key=lambda c: abs(c - len(verse) / 2))
    first, rest = verse[:cut].rstrip(), verse[cut:].strip()
    return (first, rest) if len(first) > 15 and len(rest) > 15 else None


def exchange(book, chapter, verses, rng):
    """One (user, assistant) pair drawn from a chapter."""
    i = rng.randrange(len(verses))
    verse = verses[i]
    answer = verse if rng.random() < 0.6 or i + 1 >= len(verses) else verse + " " + verses[i + 1]
    kind = rng.random()
    words = subject_words(verse)
    if kind < 0.6 and words:
        return rng.choice(QUESTIONS_ABOUT_WORD).format(w=rng.choice(words)), answer
    halves = split_verse(verse)
    if kind < 0.8 and halves:
        return f"Finish this verse: {halves[0]}", halves[1]
    name = BOOK_NAMES[book]
    if kind < 0.9:
        return f"What is written in {name} {chapter}:{i + 1}?", verse
    return f"Read me the beginning of {name} chapter {chapter}.", " ".join(verses[:2])


def chat_doc(book, chapter, verses, rng):
    messages = []
    if rng.random() < 0.2:
        messages.append(("system", rng.choice(SYSTEM_PROMPTS)))
    for _ in range(2 if rng.random() < 0.15 else 1):
        user, assistant = exchange(book, chapter, verses, rng)
        messages += [("user", user), ("assistant", assistant)]
    return chatml(messages)


def greeting_doc(rng):
    messages = [("system", rng.choice(SYSTEM_PROMPTS))] if rng.random() < 0.3 else []
    messages += [("user", rng.choice(GREETINGS)), ("assistant", rng.choice(SELF_DESCRIPTIONS))]
    return chatml(messages)


def build_documents(chapters, chats_per_verse, num_greetings, seed):
    """(train docs, held-out docs); a held-out chapter feeds neither prose nor chats of train."""
    rng = random.Random(seed)
    train, heldout = [], []
    for index, (book, chapter, verses) in enumerate(chapters):
        docs = [prose_doc(verses, rng)]
        num_chats = int(len(verses) * chats_per_verse + rng.random())
        docs += [chat_doc(book, chapter, verses, rng) for _ in range(num_chats)]
        (heldout if index % HELDOUT_EVERY_NTH_CHAPTER == 0 else train).extend(docs)
    train += [greeting_doc(rng) for _ in range(num_greetings)]
    rng.shuffle(train)
    rng.shuffle(heldout)
    return train, heldout


REWRITE_ASKS = ["Rewrite this passage:", "Copy out this passage:", "Write this passage again:"]


def passage_of(doc, rng, min_chars=300, max_chars=2000):
    """A run of whole sentences of a prose document, min_chars to max_chars long (None when it is shorter)."""
    text = " ".join(doc.split())
    if len(text) < min_chars:
        return None
    start = rng.randrange(max(1, len(text) - max_chars))
    if start > 0:
        dot = text.find(". ", start)
        start = dot + 2 if 0 <= dot < len(text) - min_chars else 0
    piece = text[start:start + rng.randint(min_chars, max_chars)]
    end = piece.rfind(". ")
    return piece[:end + 1] if end + 1 >= min_chars else piece


def rewrite_docs(docs, num, seed):
    """num chats whose answer copies the user's passage (drawn from the prose docs): what a rewriting request looks
    like to an instruction-tuned model, so a model trained on them copies and n-gram speculation has a workload."""
    rng = random.Random(seed)
    prose = [d for d in docs if "<|im_start|>" not in d]
    out = []
    while len(out) < num and prose:
        passage = passage_of(rng.choice(prose), rng)
        if passage is not None:
            out.append(chatml([("user", f"{rng.choice(REWRITE_ASKS)}\n{passage}"), ("assistant", passage)]))
    return out


def write_docs(path, docs):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for doc in docs:
            f.write(doc + DOC_END)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deb-dir", help="folder with bible-kjv-text_*.deb and bible-kjv_*_amd64.deb (downloaded there when absent)")
    ap.add_argument("--kjv-txt", help="an existing dump, one verse a line: 'Ge1:1 In the beginning ...'")
    ap.add_argument("--out-dir", default=os.path.join(here, "data"))
    ap.add_argument("--chats-per-verse", type=float, default=0.15)
    ap.add_argument("--num-greetings", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1611)
    args = ap.parse_args()

    source = {"text": "King James Version of the Bible (1611), public domain"}
    if args.kjv_txt:
        with open(args.kjv_txt, encoding="utf-8") as f:
            lines = f.read().splitlines()
        source["dump"] = os.path.basename(args.kjv_txt)
    else:
        deb_dir = args.deb_dir or tempfile.mkdtemp(prefix="kjv-debs-")
        text_deb, reader_deb = find_debs(deb_dir)
        lines = dump_kjv_from_debs(text_deb, reader_deb)
        source["package"] = deb_field(text_deb, "Package")
        source["version"] = deb_field(text_deb, "Version")
        source["deb"] = os.path.basename(text_deb)
        source["debSha256"] = sha256_of(text_deb)
        source["reader"] = f"{deb_field(reader_deb, 'Package')} {deb_field(reader_deb, 'Version')} (bible -f)"

    chapters = parse_chapters(lines)
    num_verses = sum(len(v) for _, _, v in chapters)
    if num_verses < 30000:
        sys.exit(f"error: only {num_verses} verses parsed; expected the whole KJV (31102)")
    train, heldout = build_documents(chapters, args.chats_per_verse, args.num_greetings, args.seed)
    os.makedirs(args.out_dir, exist_ok=True)
    write_docs(os.path.join(args.out_dir, "corpus.txt"), train)
    write_docs(os.path.join(args.out_dir, "heldout.txt"), heldout)
    source.update({
        "license": "public domain (copyright expired; see /usr/share/doc/bible-kjv-text/copyright)",
        "numChapters": len(chapters), "numVerses": num_verses,
        "numTrainDocs": len(train), "numHeldoutDocs": len(heldout),
        "heldoutEveryNthChapter": HELDOUT_EVERY_NTH_CHAPTER,
        "chatsPerVerse": args.chats_per_verse, "numGreetings": args.num_greetings, "seed": args.seed,
    })
    with open(os.path.join(args.out_dir, "source.json"), "w", encoding="utf-8") as f:
        json.dump(source, f, indent=2)
        f.write("\n")
    for name in ("corpus.txt", "heldout.txt"):
        size = os.path.getsize(os.path.join(args.out_dir, name))
        print(f"{name}: {size / 1e6:.2f} MB")
    print(f"{len(train)} train docs, {len(heldout)} held-out docs, {num_verses} verses")


if __name__ == "__main__":
    main()
