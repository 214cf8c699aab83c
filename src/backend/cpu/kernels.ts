// Row kernels over Float32Arrays. Every output element is computed by one fixed
// sequence of double-precision operations that depends only on its own inputs
// (never on T, on the row's place in the batch, or on how rows or columns are
// split across threads): that is what makes the CPU backend batch-invariant.
//
// Matmul tiles 4 rows x 4 columns for instruction-level parallelism; inside a
// tile each accumulator still sums k = 0..K-1 in order, exactly as the 1x1
// remainder loops do, and a product of two f32 values is exact in a double, so
// every element gets the same bits whichever loop computed it.

/** y[t, n] = sum_k x[t, k] * w[n, k] for n in [n0, n1); x [T, K], w [N, K], y [T, N]. */
export function matmulCols(x: Float32Array, xOff: number, w: Float32Array, wOff: number,
  y: Float32Array, yOff: number, T: number, K: number, N: number, n0: number, n1: number): void {
  let t = 0;
  for (; t + 4 <= T; t += 4) {
    const xa = xOff + t * K;
    const xb = xa + K;
    const xc = xb + K;
    const xd = xc + K;
    let n = n0;
    for (; n + 4 <= n1; n += 4) {
      const wa = wOff + n * K;
      const wb = wa + K;
      const wc = wb + K;
      const wd = wc + K;
      let aa = 0, ab = 0, ac = 0, ad = 0;
      let ba = 0, bb = 0, bc = 0, bd = 0;
      let ca = 0, cb = 0, cc = 0, cd = 0;
      let da = 0, db = 0, dc = 0, dd = 0;
      for (let k = 0; k < K; k++) {
        const x0 = x[xa + k]!, x1 = x[xb + k]!, x2 = x[xc + k]!, x3 = x[xd + k]!;
        const w0 = w[wa + k]!, w1 = w[wb + k]!, w2 = w[wc + k]!, w3 = w[wd + k]!;
        aa += x0 * w0; ab += x0 * w1; ac += x0 * w2; ad += x0 * w3;
        ba += x1 * w0; bb += x1 * w1; bc += x1 * w2; bd += x1 * w3;
        ca += x2 * w0; cb += x2 * w1; cc += x2 * w2; cd += x2 * w3;
        da += x3 * w0; db += x3 * w1; dc += x3 * w2; dd += x3 * w3;
      }
      const ya = yOff + t * N + n;
      y[ya] = aa; y[ya + 1] = ab; y[ya + 2] = ac; y[ya + 3] = ad;
      const yb = ya + N;
      y[yb] = ba; y[yb + 1] = bb; y[yb + 2] = bc; y[yb + 3] = bd;
      const yc = yb + N;
      y[yc] = ca; y[yc + 1] = cb; y[yc + 2] = cc; y[yc + 3] = cd;
      const yd = yc + N;
      y[yd] = da; y[yd + 1] = db; y[yd + 2] = dc; y[yd + 3] = dd;
    }
    for (; n < n1; n++) {
      const wa = wOff + n * K;
      let a = 0, b = 0, c = 0, d = 0;
      for (let k = 0; k < K; k++) {
        const wv = w[wa + k]!;
        a += x[xa + k]! * wv; b += x[xb + k]! * wv; c += x[xc + k]! * wv; d += x[xd + k]! * wv;
      }
      const ya = yOff + t * N + n;
      y[ya] = a; y[ya + N] = b; y[ya + 2 * N] = c; y[ya + 3 * N] = d;
    }
  }
  for (; t < T; t++) {
    const xa = xOff + t * K;
    let n = n0;
    for (; n + 8 <= n1; n += 8) {
      const w0 = wOff + n * K;
      const w1 = w0 + K, w2 = w1 + K, w3 = w2 + K, w4 = w3 + K, w5 = w4 + K, w6 = w5 + K, w7 = w6 + K;
      let a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
      for (let k = 0; k < K; k++) {
        const xv = x[xa + k]!;
        a0 += xv * w[w0 + k]!; a1 += xv * w[w1 + k]!; a2 += xv * w[w2 + k]!; a3 += xv * w[w3 + k]!;
        a4 += xv * w[w4 + k]!; a5 += xv * w[w5 + k]!; a6 += xv * w[w6 + k]!; a7 += xv * w[w7 + k]!;
      }
      const ya = yOff + t * N + n;
      y[ya] = a0; y[ya + 1] = a1; y[ya + 2] = a2; y[ya + 3] = a3;
      y[ya + 4] = a4; y[ya + 5] = a5; y[ya + 6] = a6; y[ya + 7] = a7;
    }
    for (; n < n1; n++) {
      const wa = wOff + n * K;
      let a = 0;
      for (let k = 0; k < K; k++) a += x[xa + k]! * w[wa + k]!;
      y[yOff + t * N + n] = a;
    }
  }
}

/** out[t] = x[t] / rms(x[t]) * w, rows of width H. */
export function rmsNormRows(x: Float32Array, w: Float32Array, out: Float32Array, T: number,
  H: number, eps: number): void {
  for (let t = 0; t < T; t++) {
    const o = t * H;
    let sumSq = 0;
    for (let i = 0; i < H; i++) {
      const v = x[o + i]!;
      sumSq += v * v;
    }
    const inv = 1 / Math.sqrt(sumSq / H + eps);
    for (let i = 0; i < H; i++) out[o + i] = Math.fround(x[o + i]! * inv) * w[i]!;
  }
}

/** In place: each head slice [off, off + D) of row-major heads normalised by w [D]. */
export function rmsNormHeadInPlace(x: Float32Array, off: number, w: Float32Array, D: number,
  eps: number): void {
  let sumSq = 0;
  for (let i = 0; i < D; i++) {
    const v = x[off + i]!;
    sumSq += v * v;
  }
  const inv = 1 / Math.sqrt(sumSq / D + eps);
  for (let i = 0; i < D; i++) x[off + i] = Math.fround(x[off + i]! * inv) * w[i]!;
}

/** Neox rotation of one head in place: halves (a, b) -> (a cos - b sin, b cos + a sin). */
export function rotateHalfInPlace(x: Float32Array, off: number, cos: Float32Array,
  sin: Float32Array, half: number): void {
  for (let i = 0; i < half; i++) {
    const a = x[off + i]!;
    const b = x[off + half + i]!;
    const c = cos[i]!;
    const s = sin[i]!;
    x[off + i] = a * c - b * s;
    x[off + half + i] = b * c + a * s;
  }
}

/**
 * In place on rows of [q heads | k heads | v heads] (width each): each q head normalised by qn, each k head by kn
 * (where given), then both rotated on their first 2 * half channels by row t's cos/sin (table); v passes through.
 */
export function qkNormRopeRows(x: Float32Array, T: number, width: number, numHeads: number, numKvHeads: number,
  D: number, half: number, table: { cos: Float32Array; sin: Float32Array }, qn: Float32Array | null,
  kn: Float32Array | null, eps: number): void {
  for (let t = 0; t < T; t++) {
    const cos = table.cos.subarray(t * half, (t + 1) * half);
    const sin = table.sin.subarray(t * half, (t + 1) * half);
    for (let h = 0; h < numHeads + numKvHeads; h++) {
      const off = t * width + h * D;
      const norm = h < numHeads ? qn : kn;
      if (norm) rmsNormHeadInPlace(x, off, norm, D, eps);
      rotateHalfInPlace(x, off, cos, sin, half);
    }
  }
}

/** cos/sin [half] of angle fround(position * invFreq[i]). */
export function ropeAngles(position: number, invFreq: Float32Array, cos: Float32Array,
  sin: Float32Array): void {
  for (let i = 0; i < invFreq.length; i++) {
    const angle = Math.fround(position * invFreq[i]!);
    cos[i] = Math.cos(angle);
    sin[i] = Math.sin(angle);
  }
}

/** out[t, i] = silu(gateUp[t, i]) * gateUp[t, I + i]. */
export function siluMulRows(gateUp: Float32Array, out: Float32Array, T: number, I: number): void {
  for (let t = 0; t < T; t++) {
    const g = t * 2 * I;
    const o = t * I;
    for (let i = 0; i < I; i++) {
      const gate = gateUp[g + i]!;
      out[o + i] = Math.fround(gate / (1 + Math.exp(-gate))) * gateUp[g + I + i]!;
    }
  }
}

/** o = x * sigmoid(g), elementwise (Backend.sigmoidMul). */
export function sigmoidMulInto(x: Float32Array, g: Float32Array, o: Float32Array): void {
  for (let i = 0; i < o.length; i++) o[i] = x[i]! * Math.fround(1 / (1 + Math.exp(-g[i]!)));
}

/** a[t] += sigmoid(g[t]) * y[t] for each of T rows of N (Backend.addSigmoidGated: a gated shared expert). */
export function addSigmoidGatedRows(a: Float32Array, g: Float32Array, y: Float32Array, T: number, N: number): void {
  for (let t = 0; t < T; t++) {
    const s = Math.fround(1 / (1 + Math.exp(-g[t]!)));
    for (let i = t * N; i < (t + 1) * N; i++) a[i] = a[i]! + Math.fround(s * y[i]!);
  }
}

/** The ranks' column parts [P R, W] (all-gathered, rank-major) as rows [R, width]: column c from part floor(c / W). */
export function joinColumnParts(parts: Float32Array, out: Float32Array, R: number, W: number, width: number): void {
  for (let r = 0; r < R; r++) {
    for (let c = 0; c < width; c++) out[r * width + c] = parts[(Math.floor(c / W) * R + r) * W + c % W]!;
  }
}

/** Parts [T, W] side by side as rows [T, P W] (Backend.concatColumns). */
export function concatColumnRows(parts: readonly Float32Array[], out: Float32Array, T: number, W: number): void {
  const N = parts.length * W;
  parts.forEach((x, p) => {
    for (let t = 0; t < T; t++) out.set(x.subarray(t * W, (t + 1) * W), t * N + p * W);
  });
}
