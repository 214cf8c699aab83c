// A speculative verify step's tokens attended on the decode kernel (QUIRE_VERIFY_DECODE_MAX_SEQS, verifyAsDecode): each
// token a row of its own, with its own context (its position + 1), on the plain and the tensor-core (_mma) builds,
// gives the logits the prefill kernel gives the same row, within bf16 rounding (other sums, not their bits), on the
// bundled demo model over a 300-token context (so that the decode kernel splits it over blocks).

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModelDir } from '../../src/loader/model-dir.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { Model } from '../../src/model/model.js';
import type { CudaBackendOptions } from '../../src/backend/cuda/cuda-backend.js';
import { batchOf } from '../backend/helpers.js';
import { newCuda, noCuda } from './cuda-helpers.js';

describe('verify steps on the decode kernel', { skip: noCuda }, () => {
  test('a row of 6 tokens after 300: the prefill kernel\'s logits within bf16 rounding, on each decode build', () => {
    const { config, weights } = loadModelDir(defaultModelDir());
    const V = config.vocabSize;
    const prompt = Array.from({ length: 300 }, (_, i) => (i * 37 + 11) % V);
    const row = [5, 17, 99, 3, 250, 8];  // a request's last token and 5 proposals
    const pages = Array.from({ length: 20 }, (_, i) => i + 1);
    const logitsOf = (opts: CudaBackendOptions): Float32Array => {
      const cuda = newCuda(opts);
      try {
        const model = Model.load(config, weights, cuda);
        cuda.allocateKvCache(model.kvCacheSpec(32, 16));
        model.forward(batchOf([{ ids: prompt, start: 0, pages }], 16, [prompt.length - 1]));
        const verify = batchOf([{ ids: row, start: prompt.length, pages }], 16, row.map((_, i) => i));
        verify.verify = true;
        return model.forward(verify);
      } finally {
        cuda.dispose();
      }
    };
    const argmax = (x: Float32Array, r: number) => {
      let best = r * V;
      for (let j = r * V; j < (r + 1) * V; j++) if (x[j]! > x[best]!) best = j;
      return best - r * V;
    };
    const prefill = logitsOf({ verifyDecodeMaxSeqs: 0 });
    for (const decodeMma of ['off', 'all'] as const) {
      const decode = logitsOf({ verifyDecodeMaxSeqs: 8, decodeMma });
      assert.equal(decode.length, prefill.length);
      let same = 0;
      for (let r = 0; r < row.length; r++) {
        let [err, norm] = [0, 0];
        for (let j = r * V; j < (r + 1) * V; j++) {
          assert.ok(Number.isFinite(decode[j]!), `${decodeMma}: logit ${j} is ${decode[j]}`);
          err += (decode[j]! - prefill[j]!) ** 2;
          norm += prefill[j]! ** 2;
        }
        assert.ok(Math.sqrt(err / norm) < 0.02, `${decodeMma}, row ${r}: relative RMS ${Math.sqrt(err / norm)}`);
        if (argmax(decode, r) === argmax(prefill, r)) same++;
      }
      assert.ok(same >= row.length - 1, `${decodeMma}: ${same} of ${row.length} argmaxes as the prefill kernel's`);
    }
  });
});
