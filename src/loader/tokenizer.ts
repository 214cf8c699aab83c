import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TokenizerLoader } from '@lenml/tokenizers';
import { ModelLoadError, describeError } from './errors.js';
import type { Tokenizer } from './types.js';

type Json = Record<string, unknown>;
type LenmlTokenizer = ReturnType<typeof TokenizerLoader.fromPreTrained>;

export function readJsonFile(file: string): Json {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ModelLoadError(file, `cannot read: ${describeError(err)}`, { cause: err });
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new ModelLoadError(file, 'is not a JSON object');
  return json as Json;
}

/** tokenizer_config's special-token fields are either a string or { content }. */
export function specialTokenContent(raw: unknown): string | null {
  if (typeof raw === 'string') return raw;
  if (typeof raw === 'object' && raw !== null && typeof (raw as Json).content === 'string') return (raw as Json).content as string;
  return null;
}

const SPECIAL_TOKEN_FIELDS = ['bos_token', 'eos_token', 'unk_token', 'pad_token', 'sep_token', 'cls_token', 'mask_token'];

interface AddedTokenJson {
  id: number;
  content: string;
  special?: boolean;
}

class HfTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly specialTokenIds: ReadonlySet<number>;
  readonly bosTokenId: number | null;
  readonly eosTokenIds: number[];
  private readonly idToTokenMap: Map<number, string>;

  constructor(
    private readonly inner: LenmlTokenizer,
    tokenizerJson: Json,
    tokenizerConfig: Json,
    file: string,
  ) {
    const vocab = ((tokenizerJson.model as Json | undefined)?.vocab ?? {}) as Record<string, number>;
    const added = (tokenizerJson.added_tokens ?? []) as AddedTokenJson[];
    this.idToTokenMap = new Map();
    for (const [token, id] of Object.entries(vocab)) this.idToTokenMap.set(id, token);
    for (const t of added) this.idToTokenMap.set(t.id, t.content);
    const tokenToId = new Map<string, number>();
    for (const [id, token] of this.idToTokenMap) tokenToId.set(token, id);
    let maxId = -1;
    for (const id of this.idToTokenMap.keys()) maxId = Math.max(maxId, id);
    this.vocabSize = maxId + 1;
    this.specialTokenIds = new Set(added.filter((t) => t.special === true).map((t) => t.id));

    const idOf = (field: string): number | null => {
      const content = specialTokenContent(tokenizerConfig[field]);
      if (content === null) return null;
      const id = tokenToId.get(content);
      if (id === undefined) throw new ModelLoadError(file, `${field} "${content}" is not in the vocabulary`);
      return id;
    };
    this.bosTokenId = idOf('bos_token');
    const eos = idOf('eos_token');
    this.eosTokenIds = eos === null ? [] : [eos];
  }

  encode(text: string, opts?: { addSpecialTokens?: boolean }): number[] {
    return this.inner.encode(text, { add_special_tokens: opts?.addSpecialTokens ?? true });
  }

  decode(ids: readonly number[], opts?: { skipSpecialTokens?: boolean }): string {
    if (ids.length === 0) return '';
    return this.inner.decode([...ids], { skip_special_tokens: opts?.skipSpecialTokens ?? false });
  }

  idToToken(id: number): string | undefined {
    return this.idToTokenMap.get(id);
  }
}

/** Builds a Tokenizer from parsed tokenizer.json and tokenizer_config.json; file names the source in errors. */
export function tokenizerFromJson(tokenizerJson: Json, tokenizerConfig: Json, file = 'tokenizer.json'): Tokenizer {
  const model = tokenizerJson.model as Json | undefined;
  if (typeof model !== 'object' || model === null || typeof model.vocab !== 'object') {
    throw new ModelLoadError(file, 'has no model.vocab');
  }
  const config: Json = { ...tokenizerConfig };
  for (const field of SPECIAL_TOKEN_FIELDS) {
    if (typeof config[field] === 'object' && config[field] !== null) config[field] = specialTokenContent(config[field]);
  }
  let inner: LenmlTokenizer;
  try {
    inner = TokenizerLoader.fromPreTrained({ tokenizerJSON: tokenizerJson, tokenizerConfig: config } as never);
  } catch (err) {
    throw new ModelLoadError(file, `cannot build the tokenizer: ${describeError(err)}`, { cause: err });
  }
  return new HfTokenizer(inner, tokenizerJson, config, file);
}

/** tokenizer.json (required) + tokenizer_config.json (optional) in dir. */
export function loadTokenizer(dir: string): Tokenizer {
  const file = join(dir, 'tokenizer.json');
  if (!existsSync(file)) throw new ModelLoadError(file, 'file not found');
  const configFile = join(dir, 'tokenizer_config.json');
  const config = existsSync(configFile) ? readJsonFile(configFile) : {};
  return tokenizerFromJson(readJsonFile(file), config, file);
}
