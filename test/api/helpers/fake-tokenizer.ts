// A byte-level tokenizer: ids 0..2 are special (<bos>, <eos>, <pad>), id b + 3 is byte b.

import type { Tokenizer } from '../../../src/loader/types.js';

export const BOS = 0;
export const EOS = 1;
const SPECIAL_NAMES = ['<bos>', '<eos>', '<pad>'];
const NUM_SPECIAL = SPECIAL_NAMES.length;

export const byteId = (b: number) => b + NUM_SPECIAL;

export class ByteTokenizer implements Tokenizer {
  readonly vocabSize = NUM_SPECIAL + 256;
  readonly specialTokenIds: ReadonlySet<number> = new Set([0, 1, 2]);
  readonly bosTokenId = BOS;
  readonly eosTokenIds = [EOS];

  encode(text: string, opts: { addSpecialTokens?: boolean } = {}): number[] {
    const ids: number[] = [];
    if (opts.addSpecialTokens ?? true) ids.push(BOS);
    let rest = text;
    while (rest.length > 0) {
      const special = SPECIAL_NAMES.findIndex((s) => rest.startsWith(s));
      if (special >= 0) {
        ids.push(special);
        rest = rest.slice(SPECIAL_NAMES[special]!.length);
        continue;
      }
      const cp = String.fromCodePoint(rest.codePointAt(0)!);
      for (const b of Buffer.from(cp, 'utf8')) ids.push(byteId(b));
      rest = rest.slice(cp.length);
    }
    return ids;
  }

  decode(ids: readonly number[], opts: { skipSpecialTokens?: boolean } = {}): string {
    let out = '';
    let bytes: number[] = [];
    const flush = () => {
      out += Buffer.from(bytes).toString('utf8');
      bytes = [];
    };
    for (const id of ids) {
      if (id < NUM_SPECIAL) {
        flush();
        if (!opts.skipSpecialTokens) out += SPECIAL_NAMES[id];
      } else {
        bytes.push(id - NUM_SPECIAL);
      }
    }
    flush();
    return out;
  }

  idToToken(id: number): string | undefined {
    if (id < 0 || id >= this.vocabSize) return undefined;
    return id < NUM_SPECIAL ? SPECIAL_NAMES[id] : String.fromCharCode(id - NUM_SPECIAL);
  }
}

export const CHATML_TEMPLATE =
  "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";
