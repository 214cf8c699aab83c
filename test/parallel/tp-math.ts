// Plain-loop math both the sharded ranks (tp-rank-worker.ts) and the unsharded reference use.

/** y[T, N] = x[T, K] w[N, K]^T, summed in f64. */
export function matmulT(x: Float32Array, w: Float32Array, T: number, N: number, K: number): Float32Array {
  if (x.length !== T * K || w.length !== N * K) throw new Error(`matmulT: x ${x.length} != ${T}x${K} or w ${w.length} != ${N}x${K}`);
  const y = new Float32Array(T * N);
  for (let t = 0; t < T; t++) {
    for (let n = 0; n < N; n++) {
      let acc = 0;
      for (let k = 0; k < K; k++) acc += x[t * K + k]! * w[n * K + k]!;
      y[t * N + n] = acc;
    }
  }
  return y;
}

export const silu = (v: number): number => v / (1 + Math.exp(-v));
export const sigmoid = (v: number): number => 1 / (1 + Math.exp(-v));

export function addInto(a: Float32Array, b: Float32Array): Float32Array {
  for (let i = 0; i < a.length; i++) a[i] = a[i]! + b[i]!;
  return a;
}

/**
 * Stand-in for attention that still pairs each q head with its KV head: one key per token, so softmax is 1 and the
 * head's output is v, here gated by sigmoid(q . k / sqrt(D)) so that q and k matter too.
 * qkv [T, (H + 2 KVH) D] (| q | k | v |) -> [T, H D]; q head j reads KV head floor(j / (H / KVH)).
 */
export function gatedSingleKeyAttention(qkv: Float32Array, T: number, H: number, KVH: number, D: number): Float32Array {
  const width = (H + 2 * KVH) * D;
  const out = new Float32Array(T * H * D);
  for (let t = 0; t < T; t++) {
    for (let j = 0; j < H; j++) {
      const kv = Math.floor(j / (H / KVH));
      const q = t * width + j * D;
      const k = t * width + (H + kv) * D;
      const v = t * width + (H + KVH + kv) * D;
      let dot = 0;
      for (let d = 0; d < D; d++) dot += qkv[q + d]! * qkv[k + d]!;
      const g = sigmoid(dot / Math.sqrt(D));
      for (let d = 0; d < D; d++) out[t * H * D + j * D + d] = g * qkv[v + d]!;
    }
  }
  return out;
}

/** silu(gate) * up over [T, 2I] laid out | gate | up | per row -> [T, I]. */
export function siluMulRows(gu: Float32Array, T: number, I: number): Float32Array {
  const out = new Float32Array(T * I);
  for (let t = 0; t < T; t++) {
    for (let i = 0; i < I; i++) out[t * I + i] = silu(gu[t * 2 * I + i]!) * gu[t * 2 * I + I + i]!;
  }
  return out;
}

/** What rank `rank` contributes at element i in the collective tests: distinct per rank and element, exact in bf16. */
export function contribution(rank: number, i: number): number {
  return ((i * 7 + rank * 3) % 17) - 8;
}

/** What stage `from` sends in its k-th message of the pipeline scenario: its rank, k and the element's index in it. */
export function stageMessage(from: number, k: number, n: number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => from * 1e6 + k * 1e3 + i);
}
