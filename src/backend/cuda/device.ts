// One CUDA device: primary context, one non-blocking stream, memory, pinned
// host buffers, and kernel launches with their argument packing.

import koffi from 'koffi';
import {
  check, cu, outPtr, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, CU_MEMHOSTALLOC_PORTABLE,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, LAUNCH_ATTRIBUTE_BYTES, LAUNCH_CONFIG_BYTES,
  CU_STREAM_NON_BLOCKING,
  type DevicePtr, type DriverApi, type Handle,
} from './ffi/driver.js';
import { compileToCubin, nvrtcVersion } from './ffi/nvrtc.js';
import { loadCubin, type Compiler } from './compile.js';
import { readKnob } from '../../knobs/knobs.js';

/** Kernel argument: a device pointer, an int32 or a float32. */
export type KernelArg = { ptr: bigint } | { i32: number } | { f32: number };
export const ptr = (p: bigint): KernelArg => ({ ptr: p });
export const i32 = (v: number): KernelArg => ({ i32: v });
export const f32 = (v: number): KernelArg => ({ f32: v });

export interface PinnedBuffer {
  ptr: bigint;
  bytes: number;
  view: ArrayBuffer;
}

const MAX_KERNEL_ARGS = 32;
const ARG_SLOT_BYTES = 8;
const ARG_BYTES = 2 * MAX_KERNEL_ARGS * ARG_SLOT_BYTES;

/**
 * Programmatic dependent launch on sm_90+ (QUIRE_PDL=0 turns it off): a launch that asks for it may start while the
 * kernel before it in the stream finishes; the kernel itself must wait (pdl_wait, kernels/common.cuh) before it reads
 * what that kernel wrote or writes anything.
 */
export function pdlEnabled(arch: number, on: boolean = readKnob('QUIRE_PDL')): boolean {
  return arch >= 90 && on;
}

export class Device {
  readonly api: DriverApi;
  readonly ordinal: number;
  readonly name: string;
  readonly arch: number;
  readonly numSMs: number;
  readonly driverVersion: number;
  readonly stream: Handle;
  /** Launches that ask for it use programmatic dependent launch (pdlEnabled). */
  readonly pdl: boolean;
  private readonly device: number;
  private readonly modules = new Map<string, Handle>();
  private readonly functions = new Map<string, Handle>();
  private numAllocatedBytes = 0;
  private readonly live = new Map<bigint, number>();
  /** Dynamic shared memory each kernel was allowed beyond the default 48 KiB. */
  private readonly sharedAllowed = new Map<Handle, number>();
  /** blocksPerSM's answers by kernel and launch shape (asked once: the chain GEMMs' plans ask it per launch). */
  private readonly occupancy = new Map<string, number>();
  private compiler: Compiler | null = null;
  // kernelParams: [values: MAX_KERNEL_ARGS x 8 bytes][pointers to each value: MAX_KERNEL_ARGS x 8 bytes],
  // then a CUlaunchConfig and its CUlaunchAttributes: programmatic dependent launch, then cluster dimensions
  private readonly args: PinnedBuffer;
  private readonly launchConfig: DataView;
  /** value.clusterDim {x, y, z} of the second launch attribute. */
  private readonly clusterDims: DataView;
  private readonly argValues: DataView;
  private readonly argPointers: BigUint64Array;

  constructor(ordinal = 0) {
    const api = cu();
    this.api = api;
    this.ordinal = ordinal;
    check(api.cuInit(0), 'cuInit');
    const version: [number] = [0];
    check(api.cuDriverGetVersion(version), 'cuDriverGetVersion');
    this.driverVersion = version[0];
    const dev: [number] = [0];
    check(api.cuDeviceGet(dev, ordinal), `cuDeviceGet(${ordinal})`);
    this.device = dev[0];
    const nameBytes = new Uint8Array(256);
    check(api.cuDeviceGetName(nameBytes, nameBytes.length, this.device), 'cuDeviceGetName');
    this.name = Buffer.from(nameBytes.subarray(0, nameBytes.indexOf(0))).toString('utf8');
    this.arch = this.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
      this.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    this.numSMs = this.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    const ctx: [Handle | null] = [null];
    check(api.cuDevicePrimaryCtxRetain(ctx, this.device), 'cuDevicePrimaryCtxRetain');
    check(api.cuCtxSetCurrent(outPtr(ctx, 'cuDevicePrimaryCtxRetain')), 'cuCtxSetCurrent');
    const stream: [Handle | null] = [null];
    check(api.cuStreamCreate(stream, CU_STREAM_NON_BLOCKING), 'cuStreamCreate');
    this.stream = outPtr(stream, 'cuStreamCreate');
    this.pdl = pdlEnabled(this.arch);
    this.args = this.hostAlloc(ARG_BYTES + LAUNCH_CONFIG_BYTES + 8 + 2 * LAUNCH_ATTRIBUTE_BYTES);
    this.launchConfig = new DataView(this.args.view, ARG_BYTES, LAUNCH_CONFIG_BYTES);
    const attributes = new DataView(this.args.view, ARG_BYTES + LAUNCH_CONFIG_BYTES + 8, 2 * LAUNCH_ATTRIBUTE_BYTES);
    attributes.setUint32(0, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, true);
    attributes.setInt32(8, 1, true);  // value.programmaticStreamSerializationAllowed
    attributes.setUint32(LAUNCH_ATTRIBUTE_BYTES, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, true);
    this.clusterDims = new DataView(this.args.view, ARG_BYTES + LAUNCH_CONFIG_BYTES + 8 + LAUNCH_ATTRIBUTE_BYTES + 8, 12);
    this.launchConfig.setBigUint64(32, this.stream, true);
    this.argValues = new DataView(this.args.view, 0, MAX_KERNEL_ARGS * ARG_SLOT_BYTES);
    this.argPointers = new BigUint64Array(this.args.view, MAX_KERNEL_ARGS * ARG_SLOT_BYTES, MAX_KERNEL_ARGS);
    for (let i = 0; i < MAX_KERNEL_ARGS; i++) this.argPointers[i] = this.args.ptr + BigInt(i * ARG_SLOT_BYTES);
  }

  private attribute(attr: number): number {
    const v: [number] = [0];
    check(this.api.cuDeviceGetAttribute(v, attr, this.device), `cuDeviceGetAttribute(${attr})`);
    return v[0];
  }

  alloc(bytes: number): DevicePtr {
    const out: [Handle | null] = [null];
    check(this.api.cuMemAlloc_v2(out, Math.max(1, bytes)), 'cuMemAlloc_v2', `${bytes} bytes`);
    const p = outPtr(out, 'cuMemAlloc_v2') as DevicePtr;
    this.live.set(p, Math.max(1, bytes));
    this.numAllocatedBytes += Math.max(1, bytes);
    return p;
  }

  free(p: bigint): void {
    check(this.api.cuMemFree_v2(p), 'cuMemFree_v2');
    this.numAllocatedBytes -= this.live.get(p) ?? 0;
    this.live.delete(p);
  }

  /** Bytes of device memory alloc() handed out and free() has not taken back. */
  get allocatedBytes(): number {
    return this.numAllocatedBytes;
  }

  hostAlloc(bytes: number): PinnedBuffer {
    const out: [Handle | null] = [null];
    check(this.api.cuMemHostAlloc(out, Math.max(8, bytes), CU_MEMHOSTALLOC_PORTABLE), 'cuMemHostAlloc', `${bytes} bytes`);
    const p = outPtr(out, 'cuMemHostAlloc');
    return { ptr: p, bytes, view: koffi.view(p, Math.max(8, bytes)) };
  }

  hostFree(b: PinnedBuffer): void {
    check(this.api.cuMemFreeHost(b.ptr), 'cuMemFreeHost');
  }

  memInfo(): { freeBytes: number; totalBytes: number } {
    const free: [number] = [0];
    const total: [number] = [0];
    check(this.api.cuMemGetInfo_v2(free, total), 'cuMemGetInfo_v2');
    return { freeBytes: free[0], totalBytes: total[0] };
  }

  synchronize(): void {
    check(this.api.cuStreamSynchronize(this.stream), 'cuStreamSynchronize');
  }

  /**
   * Copies host bytes to the device and returns once they are there. cuMemcpyHtoD from pageable memory may return
   * before its DMA lands, on the legacy stream, which our non-blocking stream does not wait for: a kernel launched
   * next could read the old bytes (tests saw outputs of 0 from inputs uploaded just before). The context sync closes
   * that window; no upload runs during a graph capture or on a step's hot path.
   */
  upload(dst: bigint, src: ArrayBufferView): void {
    check(this.api.cuMemcpyHtoD_v2(dst, src, src.byteLength), 'cuMemcpyHtoD_v2');
    check(this.api.cuCtxSynchronize(), 'cuCtxSynchronize');
  }

  copyToHostAsync(dst: PinnedBuffer, src: bigint, bytes: number): void {
    check(this.api.cuMemcpyDtoHAsync_v2(dst.ptr, src, bytes, this.stream), 'cuMemcpyDtoHAsync_v2');
  }

  copyToDeviceAsync(dst: bigint, src: PinnedBuffer, bytes: number): void {
    check(this.api.cuMemcpyHtoDAsync_v2(dst, src.ptr, bytes, this.stream), 'cuMemcpyHtoDAsync_v2');
  }

  copyDeviceAsync(dst: bigint, src: bigint, bytes: number): void {
    check(this.api.cuMemcpyDtoDAsync_v2(dst, src, bytes, this.stream), 'cuMemcpyDtoDAsync_v2');
  }

  fillBytesAsync(dst: bigint, value: number, bytes: number): void {
    check(this.api.cuMemsetD8Async(dst, value, bytes, this.stream), 'cuMemsetD8Async');
  }

  /** The kernel `name` from kernels/<file>, compiled (or read from the cache) and loaded at first use. */
  kernel(file: string, name: string): Handle {
    const key = `${file}:${name}`;
    const cached = this.functions.get(key);
    if (cached !== undefined) return cached;
    let mod = this.modules.get(file);
    if (mod === undefined) {
      this.compiler ??= { version: nvrtcVersion(), compile: (src, n, arch) => compileToCubin(src, n, arch) };
      const cubin = loadCubin(file, this.arch, this.compiler);
      const out: [Handle | null] = [null];
      check(this.api.cuModuleLoadData(out, cubin), 'cuModuleLoadData', file);
      mod = outPtr(out, 'cuModuleLoadData');
      this.modules.set(file, mod);
    }
    const fn: [Handle | null] = [null];
    check(this.api.cuModuleGetFunction(fn, mod, name), 'cuModuleGetFunction', name);
    const handle = outPtr(fn, 'cuModuleGetFunction');
    this.functions.set(key, handle);
    return handle;
  }

  /** Blocks of `block` threads and `sharedBytes` of dynamic shared memory that fit one SM at once. */
  blocksPerSM(file: string, name: string, block: number, sharedBytes: number): number {
    const key = `${file} ${name} ${block} ${sharedBytes}`;
    const known = this.occupancy.get(key);
    if (known !== undefined) return known;
    const fn = this.kernel(file, name);
    this.allowShared(fn, name, sharedBytes);
    const n: [number] = [0];
    check(this.api.cuOccupancyMaxActiveBlocksPerMultiprocessor(n, fn, block, sharedBytes),
      'cuOccupancyMaxActiveBlocksPerMultiprocessor', name);
    this.occupancy.set(key, n[0]);
    return n[0];
  }

  /**
   * Lets `fn` take `sharedBytes` of dynamic shared memory: an opt-in where it and the kernel's static shared memory
   * pass 48 KiB, asked for from 40 KiB so that static arrays up to 8 KiB need no query.
   */
  private allowShared(fn: Handle, name: string, sharedBytes: number): void {
    if (sharedBytes > 40 * 1024 && (this.sharedAllowed.get(fn) ?? 0) < sharedBytes) {
      check(this.api.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, sharedBytes),
        'cuFuncSetAttribute', `${name}: ${sharedBytes} bytes of shared memory`);
      this.sharedAllowed.set(fn, sharedBytes);
    }
  }

  /**
   * `dependent`: a programmatic dependent launch where this.pdl (the kernel waits in pdl_wait). `clusterZ` > 1: the
   * grid's blocks in clusters of (1, 1, clusterZ) (sm_90+; grid z a multiple of it).
   */
  launch(file: string, name: string, grid: [number, number, number], block: number, args: KernelArg[],
    sharedBytes = 0, dependent = false, clusterZ = 1): void {
    if (args.length > MAX_KERNEL_ARGS) throw new Error(`${name}: ${args.length} kernel arguments`);
    const fn = this.kernel(file, name);
    const v = this.argValues;
    for (let i = 0; i < args.length; i++) {
      const a = args[i]!;
      const at = i * ARG_SLOT_BYTES;
      if ('ptr' in a) v.setBigUint64(at, a.ptr, true);
      else if ('i32' in a) v.setInt32(at, a.i32, true);
      else v.setFloat32(at, a.f32, true);
    }
    if (grid[0] === 0 || grid[1] === 0 || grid[2] === 0) return;
    this.allowShared(fn, name, sharedBytes);
    const params = this.args.ptr + BigInt(MAX_KERNEL_ARGS * ARG_SLOT_BYTES);
    const pdl = dependent && this.pdl;
    if (clusterZ > 1 && grid[2] % clusterZ !== 0) throw new Error(`${name}: grid z ${grid[2]} is not a multiple of clusters of ${clusterZ}`);
    if (pdl || clusterZ > 1) {
      const c = this.launchConfig;
      [grid[0], grid[1], grid[2], block, 1, 1, sharedBytes].forEach((v, i) => c.setUint32(4 * i, v, true));
      const attributes = this.args.ptr + BigInt(ARG_BYTES + LAUNCH_CONFIG_BYTES + 8);
      c.setBigUint64(40, pdl ? attributes : attributes + BigInt(LAUNCH_ATTRIBUTE_BYTES), true);
      c.setUint32(48, (pdl ? 1 : 0) + (clusterZ > 1 ? 1 : 0), true);  // numAttrs
      [1, 1, clusterZ].forEach((v, i) => this.clusterDims.setUint32(4 * i, v, true));
      check(this.api.cuLaunchKernelEx(this.args.ptr + BigInt(ARG_BYTES), fn, params, null), `cuLaunchKernelEx(${name})`,
        `grid [${grid.join(', ')}], block ${block}`);
      return;
    }
    check(this.api.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block, 1, 1, sharedBytes, this.stream, params, null),
      `cuLaunchKernel(${name})`, `grid [${grid.join(', ')}], block ${block}`);
  }

  dispose(): void {
    this.synchronize();
    for (const m of this.modules.values()) this.api.cuModuleUnload(m);
    this.modules.clear();
    this.functions.clear();
    this.hostFree(this.args);
    this.api.cuStreamDestroy_v2(this.stream);
    this.api.cuDevicePrimaryCtxRelease_v2(this.device);
  }
}
