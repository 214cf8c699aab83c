// What state each layer of a model keeps per sequence, and the KV cache groups
// those declarations make (vLLM's KVCacheSpec and KVCacheGroupSpec).
//
// Layers with equal specs share a group: one block table per request per
// group, the same page ids for every layer of the group. The full-attention
// groups draw their pages from ONE BlockPool, so page ids are global; a page
// holds one group's state while it is held. The byte layout that makes that
// work (vLLM's): a page id p addresses p * pageBytes in each of maxLayers
// tensors; tensor j holds layer j of whichever group owns the page.
//
// A recurrent group (a hybrid model's linear-attention layers) is not in that
// layout: its state per sequence is far larger than a page of tokens (Qwen3.5
// 27B: ~3 MiB a layer against 64 KiB), so sharing would pad every page to it
// (vLLM instead grows the attention page to the state's size). It keeps its own
// slots, one a running sequence, of stateSlotBytes each.
//
//   tensor 0: | p1: A.layer0 | p2: B.layer0 | p3: A.layer0 | ...
//   tensor 1: | p1: A.layer1 | p2: B.layer1 | p3: A.layer1 | ...
//             pageBytes = the largest page of any group (smaller ones padded)
//
// A dense model is one full-attention group: pageBytes * numLayers is the
// K and V of one page over all layers, as before groups.

/** K and V pages of `blockSize` tokens. */
export interface FullAttentionSpec {
  readonly kind: 'full_attention';
  readonly numKvHeads: number;
  readonly headDim: number;
  /** Absent: the backend's KV element size. */
  readonly bytesPerElement?: number;
}

/**
 * A fixed-size state per sequence (gated DeltaNet, Mamba: conv and SSM state): one slot of the group per
 * request, held from admission to finish, whatever the sequence length. No prefix caching yet.
 */
export interface RecurrentStateSpec {
  readonly kind: 'recurrent';
  /** One layer's state of one sequence. */
  readonly stateBytes: number;
}

export type KVCacheSpec = FullAttentionSpec | RecurrentStateSpec;

export interface KVCacheGroup {
  readonly spec: KVCacheSpec;
  /** Layer indices of the model, ascending. */
  readonly layers: readonly number[];
}

export function specsEqual(a: KVCacheSpec, b: KVCacheSpec): boolean {
  if (a.kind === 'full_attention' && b.kind === 'full_attention') {
    return a.numKvHeads === b.numKvHeads && a.headDim === b.headDim && a.bytesPerElement === b.bytesPerElement;
  }
  if (a.kind === 'recurrent' && b.kind === 'recurrent') return a.stateBytes === b.stateBytes;
  return false;
}

/** Groups per-layer specs: layers with equal specs share a group; groups in the order of their first layer. */
export function groupLayerSpecs(layerSpecs: readonly KVCacheSpec[]): KVCacheGroup[] {
  const groups: { spec: KVCacheSpec; layers: number[] }[] = [];
  layerSpecs.forEach((spec, layer) => {
    checkSpec(spec);
    const g = groups.find((x) => specsEqual(x.spec, spec));
    if (g === undefined) groups.push({ spec, layers: [layer] });
    else g.layers.push(layer);
  });
  return groups;
}

/** One group of `numLayers` full-attention layers: a dense model. */
export function denseGroups(numLayers: number, numKvHeads: number, headDim: number): KVCacheGroup[] {
  return groupLayerSpecs(Array.from({ length: numLayers }, () =>
    ({ kind: 'full_attention', numKvHeads, headDim }) as const));
}

/** Bytes of one page of one layer of the spec. */
export function pageSizeBytes(spec: KVCacheSpec, blockSize: number, kvBytesPerElement: number): number {
  if (spec.kind === 'recurrent') return spec.stateBytes;
  return 2 * blockSize * spec.numKvHeads * spec.headDim * (spec.bytesPerElement ?? kvBytesPerElement);
}

/**
 * Bytes one page id costs in the shared layout above: the largest page times the most layers of a group (the
 * full-attention groups: a recurrent group takes no page).
 */
export function bytesPerBlock(groups: readonly KVCacheGroup[], blockSize: number, kvBytesPerElement: number): number {
  if (groups.length === 0) throw new Error('no KV cache groups');
  const paged = groups.filter((g) => g.spec.kind !== 'recurrent');
  if (paged.length === 0) throw new Error('no full-attention KV cache group');
  let maxPageBytes = 0;
  let maxLayers = 0;
  for (const g of paged) {
    maxPageBytes = Math.max(maxPageBytes, pageSizeBytes(g.spec, blockSize, kvBytesPerElement));
    maxLayers = Math.max(maxLayers, g.layers.length);
  }
  return maxPageBytes * maxLayers;
}

/** Bytes of one state slot: every layer of the recurrent groups, one sequence (0: no recurrent group). */
export function stateSlotBytes(groups: readonly KVCacheGroup[]): number {
  let bytes = 0;
  for (const g of groups) if (g.spec.kind === 'recurrent') bytes += g.spec.stateBytes * g.layers.length;
  return bytes;
}

/** K and V of one page over all layers of a dense model. */
export function bytesPerKvBlock(blockSize: number, numLayers: number, numKvHeads: number,
  headDim: number, bytesPerElement: number): number {
  return 2 * blockSize * numLayers * numKvHeads * headDim * bytesPerElement;
}

export function numBlocksForBytes(bytes: number, bytesPerBlock: number): number {
  if (!(bytesPerBlock > 0)) throw new Error(`bytesPerBlock must be > 0, got ${bytesPerBlock}`);
  return Math.max(0, Math.floor(bytes / bytesPerBlock));
}

function checkSpec(spec: KVCacheSpec): void {
  const positive = (n: number | undefined) => n === undefined || (Number.isInteger(n) && n > 0);
  const ok = spec.kind === 'full_attention'
    ? positive(spec.numKvHeads) && positive(spec.headDim) &&
      (spec.bytesPerElement === undefined || (Number.isFinite(spec.bytesPerElement) && spec.bytesPerElement > 0))
    : positive(spec.stateBytes);
  if (!ok) throw new Error(`bad KV cache spec ${JSON.stringify(spec)}`);
}
