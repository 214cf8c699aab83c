// Row surgery on checkpoint tensors in host memory, before upload: what the hybrid families' loaders use to split,
// reorder and fuse projections into the layouts Quire's layers take (rows of a row-major tensor, any dtype).

import type { HostTensor } from '../../loader/types.js';

/** Rows `order` of a row-major tensor, in that order (a row may be picked more than once, or not at all). */
export function pickRows(t: HostTensor, order: readonly number[], name: string): HostTensor {
  const numRows = t.shape[0]!;
  const rowBytes = t.data.byteLength / numRows;
  const data = new Uint8Array(order.length * rowBytes);
  order.forEach((r, i) => {
    if (!(Number.isInteger(r) && r >= 0 && r < numRows)) throw new Error(`pickRows ${name}: row ${r} of ${numRows}`);
    data.set(t.data.subarray(r * rowBytes, (r + 1) * rowBytes), i * rowBytes);
  });
  return { name, dtype: t.dtype, shape: [order.length, ...t.shape.slice(1)], data };
}

/** The rows of `t` that `keep` selects, in order. */
export function rows(t: HostTensor, keep: (row: number) => boolean, name: string): HostTensor {
  return pickRows(t, Array.from({ length: t.shape[0]! }, (_, r) => r).filter(keep), name);
}

/** Row-major tensors of one dtype and row width, concatenated along their first axis. */
export function concatRows(name: string, parts: HostTensor[]): HostTensor {
  const data = new Uint8Array(parts.reduce((n, p) => n + p.data.byteLength, 0));
  let at = 0;
  for (const p of parts) {
    data.set(p.data, at);
    at += p.data.byteLength;
  }
  return { name, dtype: parts[0]!.dtype, shape: [parts.reduce((n, p) => n + p.shape[0]!, 0), ...parts[0]!.shape.slice(1)], data };
}

/** The same bytes as a 2-D [rows, last dimension] tensor: [E, N, K] stacked per-expert weights as one [E N, K]. */
export function flattenRows(t: HostTensor): HostTensor {
  const k = t.shape.at(-1)!;
  return { ...t, shape: [t.shape.reduce((a, b) => a * b, 1) / k, k] };
}
