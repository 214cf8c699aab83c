// The CUDA backend's public surface. Importing it loads no CUDA library: the
// driver, NVRTC and cuBLASLt are opened when a CudaBackend is constructed.

export { CudaBackend, CudaTensor, type CudaBackendOptions } from './cuda-backend.js';
export { CudaError } from './ffi/driver.js';
export { LibraryNotFoundError } from './ffi/discover.js';
export { cudaAvailable } from './probe.js';
