// What the EAGLE-3 tests (model/eagle3-head, engine/spec-eagle3, gpu/eagle3) share: a head's checkpoint edited in
// place, and a target and head made to agree (every proposal the target's own next token).

import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openIndexedSafetensors } from '../../src/loader/safetensors.js';
import { writeRawSafetensors } from '../../src/loader/safetensors-write.js';
import { editCheckpoint } from './spec-helpers.js';

/**
 * Rewrites an f32 EAGLE-3 head's model.safetensors in place: `edit` may change each float tensor's values and returns
 * false to drop it; d2t and t2d are kept as they are. `config`: fields to set in its config.json.
 */
export function editHead(dir: string, edit: (name: string, values: Float32Array, shape: readonly number[]) => boolean | void,
  config: Record<string, unknown> = {}): void {
  const file = join(dir, 'model.safetensors');
  const { weights, indices } = openIndexedSafetensors(file);
  const tensors = weights.names().map((n) => weights.read(n));
  if (tensors.some((t) => t.dtype !== 'f32')) throw new Error('editHead: f32 heads only');
  const kept = tensors.filter((t) => edit(t.name, new Float32Array(t.data.buffer, t.data.byteOffset, t.data.byteLength / 4), t.shape) !== false);
  writeRawSafetensors(file, [...kept.map((t) => ({ name: t.name, dtype: 'F32', shape: t.shape, data: t.data })), ...indices.values()]);
  const configFile = join(dir, 'config.json');
  writeFileSync(configFile, JSON.stringify({ ...JSON.parse(readFileSync(configFile, 'utf8')) as object, ...config }, null, 2));
}

/**
 * Makes a tiny target (hidden 64, 4 heads of 16, 2 KV heads) and an EAGLE-3 head of the draft vocabulary = the target's
 * agree: the target's mixers and MLPs add nothing and its embedding rows live in their first 32 columns, so it predicts
 * from its last token alone, through its final norm and lm_head. The head's h adds nothing (fc 0, hidden_norm 0,
 * norm_before_residual: the residual starts at 0); its attention attends to its own position (q and k are `scale`
 * times the normed embedding's columns of their KV head, so a token's own key scores far above any other token's) and
 * its v and o carry the normed embedding of its input token x_{t+1} into the residual; its MLP adds nothing; its final
 * norm is the target's and it reads the target's embedding and lm_head. So the head computes the target's prediction
 * from x_{t+1}: x_{t+2}, and agrees with the target on every proposal (up to rounding and a rare token whose key
 * outscores the query's own).
 */
export async function makeAgreeing(target: string, head: string, scale = 8): Promise<void> {
  await editCheckpoint(target, (name, v, shape) => {
    if (/(o_proj|down_proj)\.weight$/.test(name)) v.fill(0);
    if (name === 'model.embed_tokens.weight') {
      const H = shape[1]!;
      for (let r = 0; r < shape[0]!; r++) v.fill(0, r * H + 32, (r + 1) * H);
    }
  });
  const targetNorm = (() => {
    let norm: Float32Array | null = null;
    return (): Float32Array => norm ??= readTargetNorm(target);
  })();
  editHead(head, (name, v, shape) => {
    if (name === 'lm_head.weight' || name === 'embed_tokens.weight') return false;
    if (/fc\.weight$|hidden_norm\.weight$|down_proj\.weight$/.test(name)) v.fill(0);
    if (name.endsWith('input_layernorm.weight')) v.fill(1);
    if (name === 'norm.weight') v.set(targetNorm());
    const cols = shape[1]!;
    // q head h and k / v head g read columns [16 g, 16 g + 16) of the normed embedding (the first of the 2 H inputs)
    const project = (rows: number, kvHeadOf: (head: number) => number, s: number) => {
      v.fill(0);
      for (let r = 0; r < rows; r++) v[r * cols + kvHeadOf(Math.floor(r / 16)) * 16 + (r % 16)] = s;
    };
    if (name.endsWith('q_proj.weight')) project(shape[0]!, (h) => h >> 1, scale);
    if (name.endsWith('k_proj.weight')) project(shape[0]!, (g) => g, scale);
    if (name.endsWith('v_proj.weight')) project(shape[0]!, (g) => g, 1);
    if (name.endsWith('o_proj.weight')) {
      // q heads 0 and 2 (of KV heads 0 and 1) back to columns 0..15 and 16..31; heads 1 and 3 dropped
      v.fill(0);
      for (let c = 0; c < 32; c++) v[c * cols + (c < 16 ? c : 32 + c - 16)] = 1;
    }
  }, { norm_before_residual: true });
}

function readTargetNorm(dir: string): Float32Array {
  const { weights } = openIndexedSafetensors(join(dir, 'model.safetensors'));
  const t = weights.read('model.norm.weight');
  return new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength));
}
