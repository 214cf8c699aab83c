// Plain data the loader hands to the layers above it.

/** Element types of checkpoint tensors: the float types, and FP8 E4M3 (the projections of block-FP8 checkpoints). */
export type DType = FloatDType | 'f8_e4m3';

/** The types a checkpoint declares (torch_dtype) and a model computes in. */
export type FloatDType = 'bf16' | 'f16' | 'f32';

export type Architecture = 'qwen3' | 'qwen2' | 'llama' | 'mistral' | 'phi3' | 'qwen3_moe' | 'mixtral' | HybridArchitecture;

/**
 * The hybrid linear-attention families (loader/hybrid-config.ts): Qwen3.5 / Qwen3.6 dense, their mixture-of-experts
 * variant, and Qwen3-Next, the one before them (its DeltaNet input projections stored fused per key head).
 */
export type HybridArchitecture = 'qwen3_5' | 'qwen3_5_moe' | 'qwen3_next';

/** A decoder layer's token mixer in a hybrid model (config.json's layer_types). */
export type LayerType = 'linear_attention' | 'full_attention';

/**
 * A hybrid linear-attention model's own fields (Qwen3.5 / Qwen3.6, Qwen3-Next: loader/hybrid-config.ts): which layers
 * are gated DeltaNet and their sizes, and the full-attention layers' partial rotary. Their attention is output-gated
 * and their norms are (1 + w) RMSNorms; those are properties of the families, not fields.
 */
export interface HybridConfig {
  layerTypes: LayerType[];
  /** Channels RoPE rotates at the front of each head (head_dim x partial_rotary_factor); the rest pass through. */
  rotaryDim: number;
  /** Gated DeltaNet sizes (linear_num_key_heads, linear_num_value_heads, linear_*_head_dim, linear_conv_kernel_dim). */
  linearNumKeyHeads: number;
  linearNumValueHeads: number;
  linearKeyHeadDim: number;
  linearValueHeadDim: number;
  linearConvKernel: number;
  /**
   * The multi-token-prediction head the config declares (what --speculative-config's mtp method runs:
   * engine/spec/mtp-load.ts): its layer count under the family's name for it (`field`: Qwen3.5's
   * mtp_num_hidden_layers, Qwen3-Next's num_nextn_predict_layers, prefixed text_config. where nested) and whether it
   * has embeddings of its own (mtp_use_dedicated_embeddings). Absent where the config names neither field.
   */
  mtp?: { numLayers: number; field: string; dedicatedEmbeddings: boolean };
}

/** A mixture-of-experts model's routing (loader/moe-config.ts). */
export interface MoeConfig {
  numExperts: number;
  /** Experts each token is routed to (num_experts_per_tok). */
  topK: number;
  /** Each expert's MLP width (moe_intermediate_size; Mixtral's intermediate_size). */
  expertIntermediateSize: number;
  /** Divide the top-k probabilities by their sum (norm_topk_prob; Mixtral and Qwen3.5-MoE always). */
  renormalize: boolean;
  /**
   * The shared expert's MLP width (shared_expert_intermediate_size): a SwiGLU MLP every token of a sparse layer runs
   * beside its routed experts, scaled by sigmoid(x shared_expert_gate^T) (Qwen3-Next, Qwen3.5-MoE); null where the
   * family has none (Qwen3-MoE, Mixtral).
   */
  sharedExpertIntermediateSize: number | null;
  /** Per layer: its feed-forward is the experts (else a dense MLP of intermediateSize). */
  sparseLayers: boolean[];
  /**
   * Only on an expert-parallel rank's config (parallel/sharded-source.ts, vLLM's --enable-expert-parallel): the whole
   * experts this rank holds of the router's numExperts; absent: all of them.
   */
  localExperts?: LocalExperts;
}

/**
 * The experts a rank holds under expert parallelism, as arithmetic so that a kernel maps a routed expert with no
 * table: local slot j < count holds global expert first + j * stride (vLLM's "linear" placement: stride 1;
 * "round_robin": first the rank, stride the ranks). A global expert outside them contributes nothing on this rank.
 */
export interface LocalExperts {
  first: number;
  stride: number;
  count: number;
}

export interface Llama3RopeScaling {
  type: 'llama3';
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositionEmbeddings: number;
}

/** Position interpolation: every frequency divided by factor (Llama 2 long-context fine-tunes). */
export interface LinearRopeScaling {
  type: 'linear';
  factor: number;
}

/** YaRN (Qwen3 and Qwen2.5 past 32K): frequencies blended between interpolation and extrapolation, q and k scaled. */
export interface YarnRopeScaling {
  type: 'yarn';
  factor: number;
  originalMaxPositionEmbeddings: number;
  betaFast: number;
  betaSlow: number;
  /** Multiplies the rotated q and k (so the attention scores by its square). */
  attentionFactor: number;
  truncate: boolean;
}

export type RopeScaling = Llama3RopeScaling | LinearRopeScaling | YarnRopeScaling;

/**
 * Block FP8 (config.json's quantization_config {"quant_method": "fp8", "weight_block_size": [128, 128]}, as
 * Qwen3-*-FP8 and DeepSeek-V3 are stored): each q/k/v/o and gate/up/down projection not in modulesToNotConvert is
 * e4m3 [N, K] with an f32 weight_scale_inv [N / 128, K / 128], computed W8A8 as vLLM does (src/model/fp8-linear.ts).
 */
export interface Fp8BlockQuantization {
  method: 'fp8';
  weightBlockSize: [128, 128];
  /** Modules kept in the checkpoint's dtype; an entry matches whole dot-separated parts of a name (fp8Module). */
  modulesToNotConvert: string[];
}

/** config.json normalised: every field the forward pass needs, nothing optional. */
export interface ModelConfig {
  architecture: Architecture;
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  maxPositionEmbeddings: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: RopeScaling | null;
  tieWordEmbeddings: boolean;
  /** Qwen3: per-head RMSNorm on q and k before RoPE. */
  qkNorm: boolean;
  /** Biases on q, k and v (Qwen2; Llama and Qwen3 with attention_bias). */
  qkvBias: boolean;
  /** A bias on o (Llama and Qwen3 with attention_bias). */
  oBias: boolean;
  /**
   * Keys a query attends to at most (sliding-window attention), or null. Quire computes full attention, which is
   * the same while every sequence fits the window: the context is held to it (defaultMaxModelLen, the engine's check).
   */
  slidingWindow: number | null;
  /** Phi-3: q, k and v stored as one qkv_proj, gate and up as one gate_up_proj. */
  fusedProjections: boolean;
  /** dtype the checkpoint declares (torch_dtype / dtype): of every tensor but block-FP8 projections. */
  dtype: FloatDType;
  /** Block-FP8 projections, or null (every weight of dtype). */
  quantization: Fp8BlockQuantization | null;
  /** Mixture-of-experts routing, or null for a dense model. */
  moe: MoeConfig | null;
  /** A hybrid linear-attention model's layer kinds and DeltaNet sizes, or null (every layer full attention). */
  hybrid: HybridConfig | null;
  /**
   * Only on a tensor-parallel rank's config (parallel/sharded-source.ts): its embed_tokens and lm_head hold `rows`
   * rows of the vocabulary padded to size x rows (vLLM's VocabParallelEmbedding and ParallelLMHead); the model sums
   * the embedding over the ranks and joins every rank's logits.
   */
  vocabParallel?: { size: number; rows: number };
  /**
   * Only on a pipeline stage's config (parallel/pipeline.ts): its layers (numLayers of them, numbered from 0) are the
   * whole model's from firstLayer on. Only the first stage holds embed_tokens, only the last the final norm and
   * lm_head (tied: the embedding table, read as the lm_head).
   */
  pipelineStage?: { stage: number; numStages: number; firstLayer: number };
}

/** A tensor as stored in a checkpoint: raw little-endian bytes of its dtype. */
export interface HostTensor {
  name: string;
  dtype: DType;
  shape: number[];
  data: Uint8Array;
}

/** llama.cpp's block-quantized types a backend may keep as stored (Backend.uploadGguf). */
export type GgufBlockType = 'Q8_0' | 'Q4_0' | 'Q4_K' | 'Q5_K' | 'Q6_K';

/**
 * A 2-D GGUF tensor [N, K] as llama.cpp stores it: N rows of K / blockElems blocks each (gguf-quants.ts's layouts),
 * row after row. Its values are what dequantize() gives for the same bytes.
 */
export interface GgufBlocks {
  name: string;
  type: GgufBlockType;
  shape: [number, number];
  data: Uint8Array;
}

/** Bytes [offset, offset + bytes) of checkpoint tensor `name` (a streamed upload's piece: weight-parts.ts). */
export interface ByteSegment {
  name: string;
  offset: number;
  bytes: number;
}

/** Where weights come from: a safetensors directory, or memory in tests. */
export interface WeightSource {
  names(): string[];
  has(name: string): boolean;
  /** Shape and dtype without reading the data. */
  info(name: string): { dtype: DType; shape: number[]; file: string };
  /** Reads one tensor (positioned read; the file is never loaded whole). */
  read(name: string): HostTensor;
  /** Reads dest.length bytes of tensor `name`, from its byte `offset`, straight into dest (e.g. pinned memory). */
  readInto?(name: string, offset: number, dest: Uint8Array): void;
  /**
   * A GGUF file's projection as its raw blocks (rows in Hugging Face order: llama.cpp's q/k permutation undone), or
   * null where the tensor is not a 2-D one of a GgufBlockType. read() still gives the same tensor dequantized.
   */
  readGgufBlocks?(name: string): GgufBlocks | null;
  /** The bytes readGgufBlocks would hand out for `name` (its blocks as stored), without reading them; null as it. */
  ggufBlockBytes?(name: string): number | null;
}

/** generation_config.json defaults. */
export interface GenerationDefaults {
  eosTokenIds: number[];
  bosTokenId: number | null;
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  repetitionPenalty?: number;
}

/** What the layers above need of a tokenizer (tokenizer.json + tokenizer_config.json). */
export interface Tokenizer {
  readonly vocabSize: number;
  /** Ids of special / added tokens marked special. */
  readonly specialTokenIds: ReadonlySet<number>;
  readonly bosTokenId: number | null;
  readonly eosTokenIds: number[];
  encode(text: string, opts?: { addSpecialTokens?: boolean }): number[];
  decode(ids: readonly number[], opts?: { skipSpecialTokens?: boolean }): string;
  /** Token id -> its string form in the vocabulary (e.g. "Ġthe"), for logprobs. */
  idToToken(id: number): string | undefined;
}

export interface ChatMessage {
  role: string;
  content: string;
  /** An assistant turn's earlier tool calls (arguments as objects), for templates that render them. */
  tool_calls?: Record<string, unknown>[];
  /** A `tool` turn's answer to this call id. */
  tool_call_id?: string;
  name?: string;
  /** An assistant turn's thinking, sent back for templates that render it (Qwen3 in tool loops). */
  reasoning_content?: string;
}
