// The parity lab's public surface, for the CLI.

export { benchServe, levelMetrics, levelRatios, RATIO_METRICS } from './bench-serve.js';
export type { BenchServeOptions, BenchServeResult, BenchTarget, LevelMetrics, LevelRatio, LevelRun, LevelSummary, RatioMetric } from './bench-serve.js';
export { benchDecode, decodeRooflineStepsPerS, httpBatchRunner, meanMeasuredContext } from './bench-decode.js';
export type { BatchRunner, BenchDecodeOptions, BenchDecodeResult, DecodeStepBytes, DecodeTarget } from './bench-decode.js';
export { streamCompletion } from './client.js';
export type { CompletionRequest, RequestResult } from './client.js';
export * from './gate.js';
export { collectProvenance, provenanceRows } from './hardware.js';
export type { Provenance, ProvenanceOptions } from './hardware.js';
export { acquireBenchLock, describeGpuProcesses, gpuPreflight, BenchLockHeldError } from './lock.js';
export type { BenchLock, BenchLockOptions, PreflightOptions, PreflightResult } from './lock.js';
export { reportHtml, reportJson, reportMarkdown, writeReport } from './report.js';
export type { BenchReport, WrittenReport } from './report.js';
export * from './stats.js';
export { buildCustomWorkload, buildW3, buildW5, loadOfflineWorkload, parseJsonlPrompts } from './workloads.js';
export type { CustomWorkloadOptions, PromptFormat, W3Options, W5Options, Workload } from './workloads.js';
