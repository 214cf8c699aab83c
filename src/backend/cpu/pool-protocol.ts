// Messages and control-word layout shared by MatmulPool and its workers.

/** Int32 slots of the control SharedArrayBuffer. */
export const CONTROL = { generation: 0, numDone: 1, stop: 2, failed: 3, length: 4 } as const;

export type PoolMessage =
  | { kind: 'buffer'; id: number; buffer: SharedArrayBuffer }
  | { kind: 'release'; id: number }
  | {
    kind: 'matmul'; x: number; xOff: number; w: number; wOff: number; y: number; yOff: number;
    T: number; K: number; N: number; n0: number; n1: number;
  };
