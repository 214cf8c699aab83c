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
 * Makes a target and an EAGLE-3 head of the draft vocabulary = the target's agree: the target's mixers and MLPs add
 * nothing and its embedding rows live in their first numKvHeads x headDim columns, so it predicts from its last token
 * alone, through its final norm and lm_head. The head's h adds nothing (fc 0, hidden_norm 0, norm_before_residual: the
 * residual starts at 0); its attention attends to its own position (q and k are `scale` times the normed embedding's
 * columns of their KV head, so a token's own key scores far above any other token's) and its v and o carry the normed
 * embedding of its input token x_{t+1} into the residual (one q head of each KV head, back to that head's columns);
 * its MLP adds nothing; its final norm is the target's and it reads the target's embedding and lm_head. So the head
 * computes the target's prediction from x_{t+1}: x_{t+2}, and agrees with the target on every proposal (up to rounding
 * and a rare token whose key outscores the query's own).
 */
export async function makeAgreeing(target: string, head: string, scale = 8): Promise<void> {
  const c = JSON.parse(readFileSync(join(head, 'config.json'), 'utf8')) as Record<string, number>;
  const [D, nh, nkv] = [c.head_dim!, c.num_attention_heads!, c.num_key_value_heads!];
  const group = nh / nkv;
  const carried = nkv * D;
  await editCheckpoint(target, (name, v, shape) => {
    if (/(o_proj|down_proj)\.weight$/.test(name)) v.fill(0);
    if (name === 'model.embed_tokens.weight') {
      const H = shape[1]!;
      for (let r = 0; r < shape[0]!; r++) v.fill(0, r * H + carried, (r + 1) * H);
    }
  });
  const targetNorm = readTargetNorm(target);
  editHead(head, (name, v, shape) => {
    if (name === 'lm_head.weight' || name === 'embed_tokens.weight') return false;
    if (/fc\.weight$|hidden_norm\.weight$|down_proj\.weight$/.test(name)) v.fill(0);
    if (name.endsWith('input_layernorm.weight')) v.fill(1);
    if (name === 'norm.weight') v.set(targetNorm);
    const cols = shape[1]!;
    // q head h (of KV head h / group) and k / v head g read columns [D g, D g + D) of the normed embedding (the first
    // of the 2 H inputs)
    const project = (kvHeadOf: (head: number) => number, s: number) => {
      v.fill(0);
      for (let r = 0; r < shape[0]!; r++) v[r * cols + kvHeadOf(Math.floor(r / D)) * D + (r % D)] = s;
    };
    if (name.endsWith('q_proj.weight')) project((h) => Math.floor(h / group), scale);
    if (name.endsWith('k_proj.weight')) project((g) => g, scale);
    if (name.endsWith('v_proj.weight')) project((g) => g, 1);
    if (name.endsWith('o_proj.weight')) {
      // the first q head of each KV head back to that head's columns; the others dropped
      v.fill(0);
      for (let col = 0; col < carried; col++) v[col * cols + Math.floor(col / D) * group * D + (col % D)] = 1;
    }
  }, { norm_before_residual: true });
}

function readTargetNorm(dir: string): Float32Array {
  const { weights } = openIndexedSafetensors(join(dir, 'model.safetensors'));
  const t = weights.read('model.norm.weight');
  return new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength));
}
