// serve(), the package's server entry: its options are checked before anything loads (the rest of it is run by
// test/package/consumer.test.ts against the packed package).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { serve } from '../src/serve.js';

test('serve() refuses an unknown option, naming it and the ones it takes', async () => {
  await assert.rejects(serve({ prot: 8000 } as never),
    /serve: unknown option prot; it takes model, host, port, servedModelName, apiKey, engine\./);
  await assert.rejects(serve({ engine: { max_len: 3 } } as never), /unknown engine option max_len/);
});
