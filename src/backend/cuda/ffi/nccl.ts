// Typed table of NCCL (libnccl.so.2): the collectives tensor parallelism needs, and the point-to-point send and
// receive of pipeline parallelism (NCCL 2.7+). Loaded on first use only, so a
// single-GPU server never opens it (nothing outside src/parallel calls ncclApi; test/parallel checks it).
// Hand-written, as driver.ts is: the handful of prototypes and enum values below were read from NCCL's own
// src/nccl.h.in, and a generated binding would drag in the whole header for them.
//
// ncclUniqueId is a 128-byte struct passed by value to ncclCommInitRank; here it is a Uint8Array of 128 bytes
// everywhere (structured-clonable, so it crosses to the other ranks' threads as is). Communicators and streams are
// bigints, as every pointer in koffi 3.

import koffi, { type TypeObject } from 'koffi';
import { loadLibrary } from './discover.js';
import type { Handle } from './driver.js';

type Out<T> = [T];

/** sizeof(ncclUniqueId): NCCL_UNIQUE_ID_BYTES. */
export const NCCL_UNIQUE_ID_BYTES = 128;

/** ncclResult_t */
export const ncclSuccess = 0;
export const ncclInProgress = 7;

/** ncclDataType_t (nccl.h.in): the types Quire moves. */
export const ncclInt32 = 2;
export const ncclFloat16 = 6;
export const ncclFloat32 = 7;
export const ncclBfloat16 = 9;

/** ncclRedOp_t */
export const ncclSum = 0;

/** NCCL_API_MAGIC and NCCL_CONFIG_UNDEF_INT: what NCCL_CONFIG_INITIALIZER writes. */
const NCCL_API_MAGIC = 0xcafebeef;
/** NCCL_VERSION(2, 14, 0): a config of this version is read up to `blocking`; later fields keep their defaults. */
const CONFIG_VERSION_2_14 = 21400;
/** { size_t size; unsigned magic; unsigned version; int blocking; }: ncclConfig_t as NCCL 2.14 laid it out. */
const CONFIG_2_14_BYTES = 20;

export interface NcclApi {
  ncclGetVersion(version: Out<number>): number;
  ncclGetUniqueId(id: Uint8Array): number;
  ncclCommInitRank(comm: Out<Handle | null>, nranks: number, id: { internal: Uint8Array }, rank: number): number;
  /** Absent from NCCL before 2.14. */
  ncclCommInitRankConfig: ((comm: Out<Handle | null>, nranks: number, id: { internal: Uint8Array }, rank: number,
    config: Uint8Array) => number) | null;
  ncclCommDestroy(comm: Handle): number;
  ncclCommAbort(comm: Handle): number;
  ncclCommGetAsyncError(comm: Handle, asyncError: Out<number>): number;
  ncclGetErrorString(result: number): string;
  /** The last error's detail (NCCL 2.13+), or null where the library lacks it. */
  ncclGetLastError: ((comm: Handle | null) => string) | null;
  ncclAllReduce(send: bigint, recv: bigint, count: number, datatype: number, op: number, comm: Handle,
    stream: Handle): number;
  ncclAllGather(send: bigint, recv: bigint, sendCount: number, datatype: number, comm: Handle, stream: Handle): number;
  ncclBroadcast(send: bigint, recv: bigint, count: number, datatype: number, root: number, comm: Handle,
    stream: Handle): number;
  ncclSend(send: bigint, count: number, datatype: number, peer: number, comm: Handle, stream: Handle): number;
  ncclRecv(recv: bigint, count: number, datatype: number, peer: number, comm: Handle, stream: Handle): number;
  ncclGroupStart(): number;
  ncclGroupEnd(): number;
}

let uniqueIdType: TypeObject | null = null;

function prototypes(): string[] {
  // koffi copies the struct onto the stack as the C ABI passes a 128-byte aggregate by value
  uniqueIdType ??= koffi.struct('ncclUniqueId', { internal: koffi.array('uint8_t', NCCL_UNIQUE_ID_BYTES) });
  return [
    'int ncclGetVersion(_Out_ int *version)',
    'int ncclGetUniqueId(_Out_ uint8_t *uniqueId)',
    'int ncclCommInitRank(_Out_ void **comm, int nranks, ncclUniqueId commId, int rank)',
    'int ncclCommDestroy(void *comm)',
    'int ncclCommAbort(void *comm)',
    'int ncclCommGetAsyncError(void *comm, _Out_ int *asyncError)',
    'const char *ncclGetErrorString(int result)',
    'int ncclAllReduce(uint64_t sendbuff, uint64_t recvbuff, size_t count, int datatype, int op, void *comm, ' +
      'void *stream)',
    'int ncclAllGather(uint64_t sendbuff, uint64_t recvbuff, size_t sendcount, int datatype, void *comm, void *stream)',
    'int ncclBroadcast(uint64_t sendbuff, uint64_t recvbuff, size_t count, int datatype, int root, void *comm, ' +
      'void *stream)',
    'int ncclSend(uint64_t sendbuff, size_t count, int datatype, int peer, void *comm, void *stream)',
    'int ncclRecv(uint64_t recvbuff, size_t count, int datatype, int peer, void *comm, void *stream)',
    'int ncclGroupStart()',
    'int ncclGroupEnd()',
  ];
}

/** Bound where the library has them, null otherwise (older NCCL). */
const OPTIONAL: Record<string, string> = {
  ncclCommInitRankConfig: 'int ncclCommInitRankConfig(_Out_ void **comm, int nranks, ncclUniqueId commId, int rank, ' +
    'const uint8_t *config)',
  ncclGetLastError: 'const char *ncclGetLastError(void *comm)',
};

let nccl: NcclApi | null = null;

/** Whether libnccl has been opened in this process (tests check that a single-GPU path never does). */
export function ncclLoaded(): boolean {
  return nccl !== null;
}

/**
 * Loads libnccl on first use; importing this module loads nothing. `env` is where discovery looks (tests).
 * NCCL reads its NCCL_* variables from the process environment once, at its first call: set them before this.
 */
export function ncclApi(env: NodeJS.ProcessEnv = process.env): NcclApi {
  if (nccl) return nccl;
  const lib = loadLibrary('nccl', (path) => koffi.load(path), env);
  const table: Record<string, unknown> = {};
  for (const proto of prototypes()) table[/(\w+)\(/.exec(proto)![1]!] = lib.func(proto);
  for (const [name, proto] of Object.entries(OPTIONAL)) {
    try {
      table[name] = lib.func(proto);
    } catch {
      table[name] = null;
    }
  }
  nccl = table as unknown as NcclApi;
  return nccl;
}

export class NcclError extends Error {
  constructor(readonly call: string, readonly status: number, statusText: string, detail = '') {
    super(`${call} failed: ${statusText} (${status})${detail ? `: ${detail}` : ''}`);
    this.name = 'NcclError';
  }
}

/** Throws NcclError naming the call, NCCL's text for the status and its last error's detail, unless ncclSuccess. */
export function checkNccl(status: number, call: string, comm: Handle | null = null): void {
  if (status === ncclSuccess) return;
  const api = ncclApi();
  const detail = api.ncclGetLastError?.(comm) ?? '';
  throw new NcclError(call, status, api.ncclGetErrorString(status), detail);
}

/** NCCL's version as NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch from 2.9 on (22703 is 2.27.3). */
export function ncclVersion(): number {
  const v: Out<number> = [0];
  checkNccl(ncclApi().ncclGetVersion(v), 'ncclGetVersion');
  return v[0];
}

/** "2.27.3" from a version code (both of NCCL_VERSION's encodings: before 2.9, major * 1000 + minor * 100 + patch). */
export function formatNcclVersion(code: number): string {
  if (code < 10000) return `${Math.floor(code / 1000)}.${Math.floor((code % 1000) / 100)}.${code % 100}`;
  return `${Math.floor(code / 10000)}.${Math.floor((code % 10000) / 100)}.${code % 100}`;
}

/** A fresh ncclUniqueId (rank 0 makes it; every rank passes the same bytes to ncclCommInitRank). */
export function ncclUniqueId(): Uint8Array {
  const id = new Uint8Array(NCCL_UNIQUE_ID_BYTES);
  checkNccl(ncclApi().ncclGetUniqueId(id), 'ncclGetUniqueId');
  return id;
}

/**
 * ncclCommInitRank, or ncclCommInitRankConfig where `blocking` is given (0: calls may return ncclInProgress). Blocks
 * until every rank has called it: each rank must call from its own thread or process.
 */
export function ncclCommInit(numRanks: number, id: Uint8Array, rank: number, blocking?: 0 | 1): Handle {
  if (id.length !== NCCL_UNIQUE_ID_BYTES) throw new Error(`ncclUniqueId is ${NCCL_UNIQUE_ID_BYTES} bytes, got ${id.length}`);
  const api = ncclApi();
  const out: Out<Handle | null> = [null];
  const commId = { internal: id };
  if (blocking === undefined) {
    checkNccl(api.ncclCommInitRank(out, numRanks, commId, rank), `ncclCommInitRank(rank ${rank} of ${numRanks})`);
  } else {
    if (!api.ncclCommInitRankConfig) throw new Error('ncclCommInitRankConfig needs NCCL 2.14 or newer');
    const config = new Uint8Array(24);
    const v = new DataView(config.buffer);
    v.setBigUint64(0, BigInt(CONFIG_2_14_BYTES), true);
    v.setUint32(8, NCCL_API_MAGIC, true);
    v.setUint32(12, CONFIG_VERSION_2_14, true);
    v.setInt32(16, blocking, true);
    checkNccl(api.ncclCommInitRankConfig(out, numRanks, commId, rank, config),
      `ncclCommInitRankConfig(rank ${rank} of ${numRanks})`);
  }
  if (out[0] === null || out[0] === undefined) throw new NcclError('ncclCommInitRank', -1, 'NULL_OUTPUT');
  return BigInt(out[0]);
}
