// Partial selection over one logits row: the k largest entries without sorting
// the whole vocabulary (a size-k min-heap, O(V log k)).

/** a ranks before b: larger value first, ties to the lower id. */
function before(values: Float32Array, base: number, a: number, b: number): boolean {
  const va = values[base + a]!;
  const vb = values[base + b]!;
  return va > vb || (va === vb && a < b);
}

/**
 * Ids of the k largest of values[base .. base+n) (or of `candidates` only),
 * best first, ties to the lower id. -Infinity and NaN entries are never chosen.
 */
export function topIds(
  values: Float32Array,
  base: number,
  n: number,
  k: number,
  candidates: Int32Array | null = null,
): Int32Array {
  const numCandidates = candidates === null ? n : candidates.length;
  const cap = Math.min(k, numCandidates);
  if (cap <= 0) return new Int32Array(0);
  const heap = new Int32Array(cap);
  let size = 0;
  for (let c = 0; c < numCandidates; c++) {
    const id = candidates === null ? c : candidates[c]!;
    const v = values[base + id]!;
    if (!(v > -Infinity)) continue;
    if (size < cap) {
      let i = size++;
      heap[i] = id;
      while (i > 0) {
        const parent = (i - 1) >> 1;
        if (!before(values, base, heap[parent]!, heap[i]!)) break;
        swap(heap, i, parent);
        i = parent;
      }
    } else if (before(values, base, id, heap[0]!)) {
      heap[0] = id;
      siftDown(values, base, heap, size, 0);
    }
  }
  const out = new Int32Array(size);
  for (let i = size - 1; i >= 0; i--) {
    out[i] = heap[0]!;
    heap[0] = heap[i]!;
    siftDown(values, base, heap, i, 0);
  }
  return out;
}

// Min-heap by rank: heap[0] is the worst kept entry.
function siftDown(values: Float32Array, base: number, heap: Int32Array, size: number, i: number): void {
  for (;;) {
    const l = 2 * i + 1;
    const r = l + 1;
    let worst = i;
    if (l < size && before(values, base, heap[worst]!, heap[l]!)) worst = l;
    if (r < size && before(values, base, heap[worst]!, heap[r]!)) worst = r;
    if (worst === i) return;
    swap(heap, i, worst);
    i = worst;
  }
}

function swap(a: Int32Array, i: number, j: number): void {
  const t = a[i]!;
  a[i] = a[j]!;
  a[j] = t;
}

/** Index of the largest of values[base .. base+n): ties to the lowest id; -1 when none is > -Infinity. */
export function argmax(values: Float32Array, base: number, n: number): number {
  let best = -1;
  let bestValue = -Infinity;
  for (let i = 0; i < n; i++) {
    const v = values[base + i]!;
    if (v > bestValue) {
      bestValue = v;
      best = i;
    }
  }
  return best;
}

/** max and log(sum exp(x - max)) of values[base .. base+n). */
export function logSumExp(values: Float32Array, base: number, n: number): { max: number; logZ: number } {
  let max = -Infinity;
  for (let i = 0; i < n; i++) {
    const v = values[base + i]!;
    if (v > max) max = v;
  }
  if (max === -Infinity) return { max, logZ: -Infinity };
  let z = 0;
  for (let i = 0; i < n; i++) {
    const v = values[base + i]!;
    if (v > -Infinity) z += Math.exp(v - max);
  }
  return { max, logZ: max + Math.log(z) };
}
