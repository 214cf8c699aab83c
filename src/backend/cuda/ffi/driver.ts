// Typed table of the CUDA driver API (libcuda.so.1). Handles and device
// pointers are bigints (koffi 3 represents every pointer as a bigint); out
// parameters are one-element arrays.

import koffi from 'koffi';
import { loadLibrary } from './discover.js';

export type DevicePtr = bigint & { readonly __brand: 'DevicePtr' };
export type HostPtr = bigint & { readonly __brand: 'HostPtr' };
export type Handle = bigint;
type Out<T> = [T];

export class CudaError extends Error {
  constructor(readonly call: string, readonly status: number, readonly statusName: string, detail = '') {
    super(`${call} failed: ${statusName} (${status})${detail ? `: ${detail}` : ''}`);
    this.name = 'CudaError';
  }
}

export const CU_STREAM_NON_BLOCKING = 1;
export const CU_EVENT_DEFAULT = 0;
export const CU_EVENT_DISABLE_TIMING = 2;
/** cuEventRecordWithFlags during stream capture: an event-record node in the graph (timing events allowed). */
export const CU_EVENT_RECORD_EXTERNAL = 1;
export const CU_MEMHOSTALLOC_PORTABLE = 1;
export const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
export const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
/** CUlaunchAttributeID: the kernel may start before the previous one in the stream finishes (sm_90+). */
export const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
/** CUlaunchAttributeID: the grid's blocks in clusters of value.clusterDim {x, y, z} (sm_90+). */
export const CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4;
/** sizeof(CUlaunchConfig) on 64-bit hosts, and of one CUlaunchAttribute (id, padding, a 64-byte value union). */
export const LAUNCH_CONFIG_BYTES = 56;
export const LAUNCH_ATTRIBUTE_BYTES = 72;
/** CUfunction_attribute: dynamic shared memory a launch may ask for beyond the default 48 KiB. */
export const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
export const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
export const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
/** sizeof(CUipcMemHandle): the bytes that name an allocation to another process. */
export const CU_IPC_HANDLE_BYTES = 64;
/** cuIpcOpenMemHandle: peer access to the exporting device is enabled as the mapping needs it. */
export const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1;
/** cuCtxEnablePeerAccess on a pair that already has it. */
export const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704;

export interface DriverApi {
  cuInit(flags: number): number;
  cuDriverGetVersion(version: Out<number>): number;
  cuDeviceGetCount(count: Out<number>): number;
  cuDeviceGet(device: Out<number>, ordinal: number): number;
  cuDeviceGetAttribute(value: Out<number>, attrib: number, device: number): number;
  cuDeviceGetName(name: Uint8Array, len: number, device: number): number;
  cuDeviceTotalMem_v2(bytes: Out<number>, device: number): number;
  cuDevicePrimaryCtxRetain(ctx: Out<Handle | null>, device: number): number;
  cuDevicePrimaryCtxRelease_v2(device: number): number;
  cuCtxSetCurrent(ctx: Handle): number;
  cuCtxSynchronize(): number;
  cuMemAlloc_v2(ptr: Out<Handle | null>, bytes: number): number;
  cuMemFree_v2(ptr: bigint): number;
  cuMemcpyHtoD_v2(dst: bigint, src: ArrayBufferView | bigint, bytes: number): number;
  cuMemcpyDtoH_v2(dst: ArrayBufferView | bigint, src: bigint, bytes: number): number;
  cuMemcpyDtoD_v2(dst: bigint, src: bigint, bytes: number): number;
  cuMemcpyHtoDAsync_v2(dst: bigint, src: bigint, bytes: number, stream: Handle): number;
  cuMemcpyDtoHAsync_v2(dst: bigint, src: bigint, bytes: number, stream: Handle): number;
  cuMemcpyDtoDAsync_v2(dst: bigint, src: bigint, bytes: number, stream: Handle): number;
  cuMemsetD8_v2(dst: bigint, value: number, count: number): number;
  cuMemsetD8Async(dst: bigint, value: number, count: number, stream: Handle): number;
  cuMemsetD16Async(dst: bigint, value: number, count: number, stream: Handle): number;
  cuMemGetInfo_v2(free: Out<number>, total: Out<number>): number;
  cuMemHostAlloc(ptr: Out<Handle | null>, bytes: number, flags: number): number;
  cuMemFreeHost(ptr: bigint): number;
  cuStreamCreate(stream: Out<Handle | null>, flags: number): number;
  cuStreamDestroy_v2(stream: Handle): number;
  cuStreamSynchronize(stream: Handle): number;
  cuEventCreate(event: Out<Handle | null>, flags: number): number;
  cuEventDestroy_v2(event: Handle): number;
  cuEventRecord(event: Handle, stream: Handle): number;
  cuEventRecordWithFlags(event: Handle, stream: Handle, flags: number): number;
  cuEventSynchronize(event: Handle): number;
  cuEventElapsedTime_v2(ms: Out<number>, start: Handle, end: Handle): number;
  cuModuleLoadData(module: Out<Handle | null>, image: Uint8Array): number;
  cuModuleUnload(module: Handle): number;
  cuModuleGetFunction(fn: Out<Handle | null>, module: Handle, name: string): number;
  cuLaunchKernel(fn: Handle, gridX: number, gridY: number, gridZ: number, blockX: number, blockY: number,
    blockZ: number, sharedMemBytes: number, stream: Handle, kernelParams: bigint, extra: null): number;
  cuLaunchKernelEx(config: bigint, fn: Handle, kernelParams: bigint, extra: null): number;
  cuFuncSetAttribute(fn: Handle, attrib: number, value: number): number;
  cuOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks: Out<number>, fn: Handle, blockSize: number,
    dynamicSMemSize: number): number;
  cuStreamBeginCapture_v2(stream: Handle, mode: number): number;
  cuStreamIsCapturing(stream: Handle, status: Out<number>): number;
  cuStreamEndCapture(stream: Handle, graph: Out<Handle | null>): number;
  cuGraphInstantiateWithFlags(exec: Out<Handle | null>, graph: Handle, flags: bigint): number;
  cuGraphLaunch(exec: Handle, stream: Handle): number;
  cuGraphExecDestroy(exec: Handle): number;
  cuGraphDestroy(graph: Handle): number;
  cuGetErrorName(status: number, name: Out<Handle | null>): number;
  cuGetErrorString(status: number, text: Out<Handle | null>): number;
  cuDeviceCanAccessPeer(canAccess: Out<number>, device: number, peerDevice: number): number;
  cuCtxEnablePeerAccess(peerContext: Handle, flags: number): number;
  /** handle: CU_IPC_HANDLE_BYTES bytes, written. */
  cuIpcGetMemHandle(handle: Uint8Array, ptr: bigint): number;
  cuIpcOpenMemHandle_v2(ptr: Out<Handle | null>, handle: { reserved: Uint8Array }, flags: number): number;
  cuIpcCloseMemHandle(ptr: bigint): number;
}

const PROTOTYPES: string[] = [
  'int cuInit(unsigned int flags)',
  'int cuDriverGetVersion(_Out_ int *version)',
  'int cuDeviceGetCount(_Out_ int *count)',
  'int cuDeviceGet(_Out_ int *device, int ordinal)',
  'int cuDeviceGetAttribute(_Out_ int *value, int attrib, int device)',
  'int cuDeviceGetName(_Out_ uint8_t *name, int len, int device)',
  'int cuDeviceTotalMem_v2(_Out_ size_t *bytes, int device)',
  'int cuDevicePrimaryCtxRetain(_Out_ void **ctx, int device)',
  'int cuDevicePrimaryCtxRelease_v2(int device)',
  'int cuCtxSetCurrent(void *ctx)',
  'int cuCtxSynchronize()',
  'int cuMemAlloc_v2(_Out_ void **ptr, size_t bytes)',
  'int cuMemFree_v2(uint64_t ptr)',
  'int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t bytes)',
  'int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t bytes)',
  'int cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t bytes)',
  'int cuMemcpyHtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, void *stream)',
  'int cuMemcpyDtoHAsync_v2(uint64_t dst, uint64_t src, size_t bytes, void *stream)',
  'int cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, void *stream)',
  'int cuMemsetD8_v2(uint64_t dst, uint8_t value, size_t count)',
  'int cuMemsetD8Async(uint64_t dst, uint8_t value, size_t count, void *stream)',
  'int cuMemsetD16Async(uint64_t dst, uint16_t value, size_t count, void *stream)',
  'int cuMemGetInfo_v2(_Out_ size_t *free, _Out_ size_t *total)',
  'int cuMemHostAlloc(_Out_ void **ptr, size_t bytes, unsigned int flags)',
  'int cuMemFreeHost(uint64_t ptr)',
  'int cuStreamCreate(_Out_ void **stream, unsigned int flags)',
  'int cuStreamDestroy_v2(void *stream)',
  'int cuStreamSynchronize(void *stream)',
  'int cuEventCreate(_Out_ void **event, unsigned int flags)',
  'int cuEventDestroy_v2(void *event)',
  'int cuEventRecord(void *event, void *stream)',
  'int cuEventRecordWithFlags(void *event, void *stream, unsigned int flags)',
  'int cuEventSynchronize(void *event)',
  'int cuEventElapsedTime_v2(_Out_ float *ms, void *start, void *end)',
  'int cuModuleLoadData(_Out_ void **module, const void *image)',
  'int cuModuleUnload(void *module)',
  'int cuModuleGetFunction(_Out_ void **fn, void *module, const char *name)',
  'int cuLaunchKernel(void *fn, unsigned int gridX, unsigned int gridY, unsigned int gridZ, ' +
    'unsigned int blockX, unsigned int blockY, unsigned int blockZ, unsigned int sharedMemBytes, ' +
    'void *stream, uint64_t kernelParams, void *extra)',
  'int cuLaunchKernelEx(uint64_t config, void *fn, uint64_t kernelParams, void *extra)',
  'int cuFuncSetAttribute(void *fn, int attrib, int value)',
  'int cuOccupancyMaxActiveBlocksPerMultiprocessor(_Out_ int *numBlocks, void *fn, int blockSize, size_t dynamicSMemSize)',
  'int cuStreamBeginCapture_v2(void *stream, int mode)',
  'int cuStreamIsCapturing(void *stream, _Out_ int *status)',
  'int cuStreamEndCapture(void *stream, _Out_ void **graph)',
  'int cuGraphInstantiateWithFlags(_Out_ void **exec, void *graph, uint64_t flags)',
  'int cuGraphLaunch(void *exec, void *stream)',
  'int cuGraphExecDestroy(void *exec)',
  'int cuGraphDestroy(void *graph)',
  'int cuGetErrorName(int status, _Out_ void **name)',
  'int cuGetErrorString(int status, _Out_ void **text)',
  'int cuDeviceCanAccessPeer(_Out_ int *canAccess, int device, int peerDevice)',
  'int cuCtxEnablePeerAccess(void *peerContext, unsigned int flags)',
  'int cuIpcGetMemHandle(_Out_ uint8_t *handle, uint64_t ptr)',
  // CUipcMemHandle is a 64-byte struct passed by value (koffi copies it as the C ABI does; ipcHandleType below)
  'int cuIpcOpenMemHandle_v2(_Out_ void **ptr, CUipcMemHandle handle, unsigned int flags)',
  'int cuIpcCloseMemHandle(uint64_t ptr)',
];

/** cuEventElapsedTime_v2 appeared in CUDA 12.8; older drivers export only cuEventElapsedTime. */
const FALLBACKS: Record<string, string> = {
  cuEventElapsedTime_v2: 'int cuEventElapsedTime(_Out_ float *ms, void *start, void *end)',
};

function nameOf(prototype: string): string {
  const m = /(\w+)\(/.exec(prototype);
  if (!m) throw new Error(`bad prototype: ${prototype}`);
  return m[1]!;
}

let driver: DriverApi | null = null;

/** Loads libcuda on first use; importing this module loads nothing. */
export function cu(): DriverApi {
  if (driver) return driver;
  const lib = loadLibrary('cuda', (path) => koffi.load(path));
  koffi.struct('CUipcMemHandle', { reserved: koffi.array('uint8_t', CU_IPC_HANDLE_BYTES) });
  const table: Record<string, unknown> = {};
  for (const proto of PROTOTYPES) {
    const name = nameOf(proto);
    try {
      table[name] = lib.func(proto);
    } catch (err) {
      const fallback = FALLBACKS[name];
      if (!fallback) throw err;
      table[name] = lib.func(fallback);
    }
  }
  driver = table as unknown as DriverApi;
  return driver;
}

function errorName(status: number): string {
  if (!driver) return 'CUDA_ERROR';
  const out: Out<Handle | null> = [null];
  if (driver.cuGetErrorName(status, out) !== 0 || !out[0]) return `CUDA_ERROR_${status}`;
  return koffi.decode.string(out[0]);
}

/** Throws CudaError naming the call (and the kernel, for launches) unless status is CUDA_SUCCESS. */
export function check(status: number, call: string, detail = ''): void {
  if (status !== 0) throw new CudaError(call, status, errorName(status), detail);
}

/** Reads a pointer out parameter that must have been set. */
export function outPtr(out: Out<Handle | null>, call: string): bigint {
  const v = out[0];
  if (v === null || v === undefined) throw new CudaError(call, -1, 'NULL_OUTPUT');
  return BigInt(v);
}
