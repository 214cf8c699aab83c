import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, truncateSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ModelLoadError } from '../../src/loader/errors.js';
import { openSafetensors, openShardedSafetensors } from '../../src/loader/safetensors.js';
import { writeSafetensors } from '../../src/loader/safetensors-write.js';
import type { HostTensor } from '../../src/loader/types.js';
import { randomBytes, tempDir, writeRawSafetensors } from './helpers.js';

const tensors: HostTensor[] = [
  { name: 'model.embed_tokens.weight', dtype: 'bf16', shape: [5, 3], data: randomBytes(30, 1) },
  { name: 'model.norm.weight', dtype: 'f32', shape: [3], data: randomBytes(12, 2) },
  { name: 'lm_head.weight', dtype: 'f16', shape: [5, 3], data: randomBytes(30, 3) },
  { name: 'scalar', dtype: 'f32', shape: [], data: randomBytes(4, 4) },
];

function assertLoadError(fn: () => unknown, ...parts: (string | RegExp)[]): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ModelLoadError, `expected ModelLoadError, got ${String(err)}`);
    for (const p of parts) {
      if (typeof p === 'string') assert.ok(err.message.includes(p), `"${err.message}" lacks "${p}"`);
      else assert.match(err.message, p);
    }
    return true;
  });
}

test('write then read back: names, shapes, dtypes and bytes', async () => {
  const file = join(tempDir(), 'model.safetensors');
  const numBytes = await writeSafetensors(file, tensors);
  assert.equal(readFileSync(file).byteLength, numBytes);
  const weights = openSafetensors(file);
  assert.deepEqual(weights.names().sort(), tensors.map((t) => t.name).sort());
  for (const t of tensors) {
    assert.ok(weights.has(t.name));
    assert.deepEqual(weights.info(t.name), { dtype: t.dtype, shape: t.shape, file });
    assert.deepEqual(weights.read(t.name), t);
  }
  assert.equal(weights.has('nope'), false);
});

test('block FP8 (as Qwen3-*-FP8 stores it): F8_E4M3 at a byte an element, beside its F32 weight_scale_inv', async () => {
  const file = join(tempDir(), 'model.safetensors');
  const fp8: HostTensor[] = [
    { name: 'model.layers.0.mlp.up_proj.weight', dtype: 'f8_e4m3', shape: [5, 3], data: randomBytes(15, 5) },
    { name: 'model.layers.0.mlp.up_proj.weight_scale_inv', dtype: 'f32', shape: [1, 1], data: randomBytes(4, 6) },
  ];
  await writeSafetensors(file, fp8);
  const bytes = readFileSync(file);
  const header = JSON.parse(bytes.subarray(8, 8 + Number(bytes.readBigUInt64LE(0))).toString('utf8'));
  assert.deepEqual(header[fp8[0]!.name], { dtype: 'F8_E4M3', shape: [5, 3], data_offsets: [0, 15] });
  const weights = openSafetensors(file);
  for (const t of fp8) assert.deepEqual(weights.read(t.name), t);
});

test('readInto reads any byte range of a tensor straight into the given buffer', async () => {
  const file = join(tempDir(), 'model.safetensors');
  await writeSafetensors(file, tensors);
  const weights = openSafetensors(file);
  const t = tensors[2]!;
  for (const [offset, len] of [[0, 30], [7, 11], [29, 1], [0, 0]] as const) {
    const dest = new Uint8Array(len + 4).fill(0xee).subarray(2, 2 + len);
    weights.readInto(t.name, offset, dest);
    assert.deepEqual(dest, t.data.subarray(offset, offset + len));
    assert.equal(dest.buffer.byteLength, len + 4);
    assert.deepEqual([...new Uint8Array(dest.buffer, 0, 2)], [0xee, 0xee], 'nothing written before dest');
  }
  assert.throws(() => weights.readInto(t.name, 25, new Uint8Array(6)), /bytes \[25, 31\) of 30/);
});

test('the written header is standard: u64 LE length, JSON, 8-byte aligned data, contiguous offsets', async () => {
  const file = join(tempDir(), 'model.safetensors');
  await writeSafetensors(file, tensors);
  const bytes = readFileSync(file);
  const headerBytes = Number(bytes.readBigUInt64LE(0));
  assert.equal((8 + headerBytes) % 8, 0);
  const header = JSON.parse(bytes.subarray(8, 8 + headerBytes).toString('utf8'));
  assert.deepEqual(header.__metadata__, { format: 'pt' });
  let offset = 0;
  for (const t of tensors) {
    const e = header[t.name];
    assert.equal(e.dtype, { bf16: 'BF16', f16: 'F16', f32: 'F32', f8_e4m3: 'F8_E4M3' }[t.dtype]);
    assert.deepEqual(e.data_offsets, [offset, offset + t.data.byteLength]);
    assert.deepEqual(new Uint8Array(bytes.subarray(8 + headerBytes + offset, 8 + headerBytes + offset + t.data.byteLength)), t.data);
    offset += t.data.byteLength;
  }
  assert.equal(bytes.byteLength, 8 + headerBytes + offset);
});

test('streamed writing in chunks, async or not, gives the same file as whole tensors', async () => {
  const dir = tempDir();
  await writeSafetensors(join(dir, 'a.safetensors'), tensors);
  await writeSafetensors(join(dir, 'b.safetensors'), {
    specs: tensors.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
    chunks: async function* (_spec, i) {
      const data = tensors[i]!.data;
      for (let start = 0; start < data.byteLength; start += 7) yield data.subarray(start, start + 7);
    },
  });
  assert.deepEqual(readFileSync(join(dir, 'b.safetensors')), readFileSync(join(dir, 'a.safetensors')));
});

test('writing rejects a tensor whose bytes do not match its shape and dtype', async () => {
  const file = join(tempDir(), 'bad.safetensors');
  await assert.rejects(
    writeSafetensors(file, [{ name: 'w', dtype: 'bf16', shape: [4], data: new Uint8Array(6) }]),
    /tensor "w" produced 6 bytes, its shape and dtype need 8/,
  );
});

test('truncated file: names the file, the tensor and its range', async () => {
  const file = join(tempDir(), 'model.safetensors');
  const numBytes = await writeSafetensors(file, tensors);
  truncateSync(file, numBytes - 3);
  assertLoadError(() => openSafetensors(file), 'model.safetensors: tensor "scalar" data [72, 76) lies beyond the end of the file', 'truncated');
});

test('file shorter than the length prefix, or a length larger than the file', () => {
  const dir = tempDir();
  writeFileSync(join(dir, 'tiny.safetensors'), new Uint8Array(5));
  assertLoadError(() => openSafetensors(join(dir, 'tiny.safetensors')), 'tiny.safetensors', 'too short');
  const huge = new Uint8Array(64);
  new DataView(huge.buffer).setBigUint64(0, 1000n, true);
  writeFileSync(join(dir, 'huge.safetensors'), huge);
  assertLoadError(() => openSafetensors(join(dir, 'huge.safetensors')), 'huge.safetensors', 'header length 1000');
});

test('malformed header JSON, or not an object', () => {
  const dir = tempDir();
  writeRawSafetensors(join(dir, 'a.safetensors'), null, new Uint8Array(0), '{"w": {"dtype": "F32",');
  assertLoadError(() => openSafetensors(join(dir, 'a.safetensors')), 'a.safetensors: header is not valid JSON');
  writeRawSafetensors(join(dir, 'b.safetensors'), [1, 2], new Uint8Array(0));
  assertLoadError(() => openSafetensors(join(dir, 'b.safetensors')), 'b.safetensors: header is not a JSON object');
});

test('entry problems: unsupported dtype, bad shape, offsets inconsistent with shape', () => {
  const dir = tempDir();
  const cases: [unknown, string][] = [
    [{ w: { dtype: 'I64', shape: [2], data_offsets: [0, 16] } }, 'tensor "w" has dtype I64, which is not supported'],
    [{ w: { dtype: 'F8_E5M2', shape: [2], data_offsets: [0, 2] } }, 'dtype F8_E5M2'],
    [{ w: { dtype: 'F8_E4M3', shape: [2, 2], data_offsets: [0, 8] } }, 'is 8 bytes, but shape [2, 2] of F8_E4M3 needs 4'],
    [{ w: { dtype: 'F32', shape: [2, -1], data_offsets: [0, 16] } }, 'shape [2,-1]'],
    [{ w: { dtype: 'F32', shape: [2], data_offsets: [0, 12] } }, 'tensor "w" data [0, 12) is 12 bytes, but shape [2] of F32 needs 8'],
    [{ w: { dtype: 'F32', shape: [2], data_offsets: [8, 0] } }, 'data_offsets [8,0]'],
    [{ w: { dtype: 'F32', shape: [2] } }, 'data_offsets undefined'],
  ];
  cases.forEach(([header, message], i) => {
    const file = join(dir, `case${i}.safetensors`);
    writeRawSafetensors(file, header, new Uint8Array(16));
    assertLoadError(() => openSafetensors(file), `case${i}.safetensors: `, message);
  });
});

test('missing file and missing tensor', async () => {
  const dir = tempDir();
  assertLoadError(() => openSafetensors(join(dir, 'model.safetensors')), 'model.safetensors: file not found');
  await writeSafetensors(join(dir, 'model.safetensors'), tensors);
  const weights = openSafetensors(join(dir, 'model.safetensors'));
  assertLoadError(() => weights.read('model.layers.0.mlp.up_proj.weight'), 'model.safetensors', 'tensor "model.layers.0.mlp.up_proj.weight" not found');
  assertLoadError(() => weights.info('x'), 'not found');
});

test('sharded: the index maps tensors to shards, read from the right file', async () => {
  const dir = tempDir();
  const shards = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'];
  await writeSafetensors(join(dir, shards[0]!), tensors.slice(0, 2));
  await writeSafetensors(join(dir, shards[1]!), tensors.slice(2));
  const weightMap = Object.fromEntries(tensors.map((t, i) => [t.name, shards[i < 2 ? 0 : 1]]));
  const index = join(dir, 'model.safetensors.index.json');
  writeFileSync(index, JSON.stringify({ metadata: { total_size: 76 }, weight_map: weightMap }));
  const weights = openShardedSafetensors(index);
  assert.deepEqual(weights.names().sort(), tensors.map((t) => t.name).sort());
  tensors.forEach((t, i) => {
    assert.equal(weights.info(t.name).file, join(dir, shards[i < 2 ? 0 : 1]!));
    assert.deepEqual(weights.read(t.name), t);
  });
});

test('sharded: missing shard, tensor not in its shard, malformed index', async () => {
  const dir = tempDir();
  await writeSafetensors(join(dir, 'model-00001-of-00002.safetensors'), tensors.slice(0, 2));
  const index = join(dir, 'model.safetensors.index.json');
  writeFileSync(
    index,
    JSON.stringify({ weight_map: { [tensors[0]!.name]: 'model-00001-of-00002.safetensors', [tensors[2]!.name]: 'model-00002-of-00002.safetensors' } }),
  );
  assertLoadError(() => openShardedSafetensors(index), 'model.safetensors.index.json', 'shard "model-00002-of-00002.safetensors", which does not exist');
  writeFileSync(index, JSON.stringify({ weight_map: { 'lm_head.weight': 'model-00001-of-00002.safetensors' } }));
  assertLoadError(() => openShardedSafetensors(index), 'model-00001-of-00002.safetensors: tensor "lm_head.weight" listed in the index is not in this shard');
  writeFileSync(index, JSON.stringify({ metadata: {} }));
  assertLoadError(() => openShardedSafetensors(index), 'weight_map is missing');
  writeFileSync(index, '{ not json');
  assertLoadError(() => openShardedSafetensors(index), 'model.safetensors.index.json: cannot read the index');
  unlinkSync(index);
  assertLoadError(() => openShardedSafetensors(index), 'model.safetensors.index.json');
});
