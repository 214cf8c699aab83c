/*
 * A small byte-level BPE tokenizer (GPT-2 / Qwen style), trained on a short
 * built-in English text: 256 byte tokens, then the learned merges, then the
 * ChatML special tokens.
 */

export const SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'] as const;

/** Qwen2's pre-tokenizer split, as written in its tokenizer.json. */
export const PRETOKENIZE_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const JS_PRETOKENIZE = new RegExp(
  "'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  'gu',
);

export const TRAINING_TEXT = `The quick brown fox jumps over the lazy dog. A small model reads the text one token at a time,
and each token is a piece of a word. When the server starts, it loads the weights, the tokenizer and the
chat template from the model directory, and then it waits for requests. Every request has a prompt and
a number of tokens to generate. The scheduler picks which requests run in the next step, and the model
computes one forward pass over all of them together. Pages of the key and value cache are handed out
as the sequences grow, and they are given back when a request finishes. If two requests share the same
beginning, the second one can reuse the pages of the first, and that makes it faster to answer.
Hello, world! How are you today? I am fine, thank you. What is the weather like where you are?
It is sunny and warm here, with a light wind from the west. We went to the market in the morning and
bought bread, cheese, apples and tea. In the afternoon we walked along the river and watched the boats.
Numbers such as 1, 2, 3, 10, 42 and 2026 appear in text too, and so do words like "quoted", (bracketed)
and hyphen-joined ones. The user asked a question, and the assistant gave a short and helpful answer.
Once upon a time there was a little house at the edge of the forest, where an old man lived with his cat.
Every evening he sat by the fire and told the cat stories about the sea, the mountains and the stars.
`;

/** GPT-2's reversible map from bytes to printable unicode characters. */
export function bytesToUnicode(): string[] {
  const printable: number[] = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const chars: string[] = new Array(256);
  for (const b of printable) chars[b] = String.fromCharCode(b);
  let numExtra = 0;
  for (let b = 0; b < 256; b++) {
    if (chars[b] === undefined) chars[b] = String.fromCharCode(256 + numExtra++);
  }
  return chars;
}

/** Byte tokens in GPT-2 vocabulary order: printable bytes first, then the rest. */
function byteTokenOrder(byteChars: string[]): string[] {
  const order: number[] = [];
  for (let b = 0; b < 256; b++) if (byteChars[b]!.charCodeAt(0) === b) order.push(b);
  for (let b = 0; b < 256; b++) if (byteChars[b]!.charCodeAt(0) !== b) order.push(b);
  return order.map((b) => byteChars[b]!);
}

export interface TrainedBpe {
  vocab: Map<string, number>;
  merges: [string, string][];
}

/** Learns up to numMerges merges (most frequent pair first; ties by the pair's text). */
export function trainBpe(text: string, numMerges: number): TrainedBpe {
  const byteChars = bytesToUnicode();
  const encoder = new TextEncoder();
  const wordCounts = new Map<string, number>();
  for (const m of text.normalize('NFC').matchAll(JS_PRETOKENIZE)) {
    const word = Array.from(encoder.encode(m[0]), (b) => byteChars[b]!).join('\u0000');
    wordCounts.set(word, (wordCounts.get(word) ?? 0) + 1);
  }
  const words = [...wordCounts].map(([w, count]) => ({ symbols: w.split('\u0000'), count }));
  const vocab = new Map<string, number>();
  for (const t of byteTokenOrder(byteChars)) vocab.set(t, vocab.size);
  const merges: [string, string][] = [];
  while (merges.length < numMerges) {
    const pairCounts = new Map<string, number>();
    for (const { symbols, count } of words) {
      for (let i = 0; i + 1 < symbols.length; i++) {
        const key = `${symbols[i]}\u0000${symbols[i + 1]}`;
        pairCounts.set(key, (pairCounts.get(key) ?? 0) + count);
      }
    }
    let best: string | null = null;
    let bestCount = 1;
    for (const [key, count] of pairCounts) {
      if (count > bestCount || (count === bestCount && best !== null && key < best)) {
        best = key;
        bestCount = count;
      }
    }
    if (best === null) break;
    const [a, b] = best.split('\u0000') as [string, string];
    merges.push([a, b]);
    vocab.set(a + b, vocab.size);
    for (const word of words) {
      const out: string[] = [];
      for (let i = 0; i < word.symbols.length; i++) {
        if (i + 1 < word.symbols.length && word.symbols[i] === a && word.symbols[i + 1] === b) {
          out.push(a + b);
          i++;
        } else {
          out.push(word.symbols[i]!);
        }
      }
      word.symbols = out;
    }
  }
  return { vocab, merges };
}

export const CHATML_TEMPLATE =
  "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

export interface TestTokenizerFiles {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  specialTokenIds: Record<(typeof SPECIAL_TOKENS)[number], number>;
  numTokens: number;
}

export function makeTestTokenizer(numMerges = 160): TestTokenizerFiles {
  const { vocab, merges } = trainBpe(TRAINING_TEXT, numMerges);
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
  const addedTokens = SPECIAL_TOKENS.map((content, i) => ({
    id: vocab.size + i,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }));
  const specialTokenIds = Object.fromEntries(addedTokens.map((t) => [t.content, t.id])) as TestTokenizerFiles['specialTokenIds'];
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: { type: 'NFC' },
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [{ type: 'Split', pattern: { Regex: PRETOKENIZE_REGEX }, behavior: 'Isolated', invert: false }, byteLevel],
    },
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: '',
      end_of_word_suffix: '',
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab: Object.fromEntries(vocab),
      merges,
    },
  };
  const tokenizerConfig = {
    add_bos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: Object.fromEntries(addedTokens.map(({ id, ...rest }) => [String(id), rest])),
    additional_special_tokens: ['<|im_start|>', '<|im_end|>'],
    bos_token: null,
    chat_template: CHATML_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: '<|im_end|>',
    errors: 'replace',
    model_max_length: 131072,
    pad_token: '<|endoftext|>',
    split_special_tokens: false,
    tokenizer_class: 'Qwen2Tokenizer',
    unk_token: null,
  };
  return { tokenizerJson, tokenizerConfig, specialTokenIds, numTokens: vocab.size + addedTokens.length };
}
