// A GGUF file's tokenizer (tokenizer.ggml.*) as the tokenizer.json and tokenizer_config.json objects it stands for,
// so one tokenizer implementation (@lenml/tokenizers, tokenizer.ts) serves both formats.
import { ModelLoadError } from './errors.js';
import { GgufMeta } from './gguf-config.js';
import type { GgufFile } from './gguf.js';

type Json = Record<string, unknown>;

// llama.cpp's pre-tokenizer names (tokenizer.ggml.pre, llama-vocab.cpp) -> the Split regex of the Hugging Face
// tokenizer they were taken from
const QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const PRE_TOKENIZERS: Record<string, { regex: string | null; nfc: boolean }> = {
  qwen2: { regex: QWEN2, nfc: true },
  'llama-bpe': { regex: LLAMA3, nfc: false },
  llama3: { regex: LLAMA3, nfc: false },
  // GPT-2's own: ByteLevel's built-in regex
  'gpt-2': { regex: null, nfc: false },
  default: { regex: null, nfc: false },
};

/** tokenizer.ggml.token_type values (llama.cpp's LLAMA_TOKEN_TYPE_*). */
const CONTROL = 3;
const USER_DEFINED = 4;

export interface GgufTokenizerFiles {
  tokenizerJson: Json;
  tokenizerConfig: Json;
  chatTemplate: string | null;
  bosToken: string | null;
  eosToken: string | null;
  /** eos and eot ids: where generation stops. */
  eosTokenIds: number[];
  bosTokenId: number | null;
}

export function ggufTokenizerFiles(gguf: GgufFile): GgufTokenizerFiles {
  const m: GgufMeta = new GgufMeta(gguf);
  const model = m.string('tokenizer.ggml.model');
  if (model === undefined) m.fail('tokenizer.ggml.model', 'is missing: the file carries no tokenizer (give one with --tokenizer)');
  if (model !== 'gpt2') m.fail('tokenizer.ggml.model', `is ${JSON.stringify(model)}, which is not supported (supported: gpt2, byte-level BPE)`);
  const preName = m.string('tokenizer.ggml.pre') ?? 'default';
  const pre = PRE_TOKENIZERS[preName];
  if (pre === undefined) {
    m.fail('tokenizer.ggml.pre', `is ${JSON.stringify(preName)}, which is not supported (supported: ${Object.keys(PRE_TOKENIZERS).join(', ')})`);
  }
  const tokens = m.strings('tokenizer.ggml.tokens');
  if (tokens === undefined) m.fail('tokenizer.ggml.tokens', 'is missing');
  const merges = m.strings('tokenizer.ggml.merges');
  if (merges === undefined) m.fail('tokenizer.ggml.merges', 'is missing');
  const types = m.numbers('tokenizer.ggml.token_type') ?? [];
  if (types.length !== 0 && types.length !== tokens.length) {
    m.fail('tokenizer.ggml.token_type', `has ${types.length} entries for ${tokens.length} tokens`);
  }
  const id = (key: string): number | null => {
    if (!m.has(key)) return null;
    const v = m.number(key);
    if (!Number.isInteger(v) || v < 0 || v >= tokens.length) m.fail(key, `(${v}) is not a token id (${tokens.length} tokens)`);
    return v;
  };
  const vocab: Record<string, number> = {};
  tokens.forEach((t, i) => { vocab[t] = i; });
  const added = tokens.flatMap((content, i) => types[i] === CONTROL || types[i] === USER_DEFINED
    ? [{ id: i, content, single_word: false, lstrip: false, rstrip: false, normalized: types[i] !== CONTROL, special: types[i] === CONTROL }] : []);
  const bos = id('tokenizer.ggml.bos_token_id');
  const eos = id('tokenizer.ggml.eos_token_id');
  const eot = id('tokenizer.ggml.eot_token_id');
  const addBos = m.has('tokenizer.ggml.add_bos_token') && m.raw('tokenizer.ggml.add_bos_token') === true;
  if (addBos && bos === null) m.fail('tokenizer.ggml.add_bos_token', 'is true but tokenizer.ggml.bos_token_id is missing');
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: pre.regex === null };
  const tokenizerJson: Json = {
    version: '1.0',
    normalizer: pre.nfc ? { type: 'NFC' } : null,
    pre_tokenizer: pre.regex === null ? byteLevel : { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: pre.regex }, behavior: 'Isolated', invert: false }, byteLevel] },
    post_processor: addBos ? {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: tokens[bos!], type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: tokens[bos!], type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: tokens[bos!], type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { [tokens[bos!]!]: { id: tokens[bos!], ids: [bos], tokens: [tokens[bos!]] } },
    } : { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab,
      merges: merges.map((line, i) => {
        const space = line.indexOf(' ');
        if (space <= 0) throw new ModelLoadError(gguf.file, `metadata "tokenizer.ggml.merges" entry ${i} (${JSON.stringify(line)}) is not two tokens`);
        return [line.slice(0, space), line.slice(space + 1)];
      }) },
    added_tokens: added,
  };
  const bosToken = bos === null ? null : tokens[bos]!;
  const eosToken = eos === null ? null : tokens[eos]!;
  const tokenizerConfig: Json = { add_bos_token: addBos, bos_token: bosToken, eos_token: eosToken };
  return {
    tokenizerJson, tokenizerConfig, bosToken, eosToken, bosTokenId: bos,
    chatTemplate: m.string('tokenizer.chat_template') ?? null,
    eosTokenIds: [...new Set([eos, eot].filter((x): x is number => x !== null))],
  };
}
