import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ALL_PHASES, deviceOptions, specsFor } from '../../src/runs/picks';

describe('run pickers', () => {
  it('offers a CPU smoke run only when no phase needs an accelerator', () => {
    assert.equal(deviceOptions(['cache', 'cp'])[0]?.device, 'cpu');
    assert.equal(deviceOptions(['tp'])[0]?.device, 'cuda');
  });

  it('verify all on CPU runs cache and CP, and says what it skipped', () => {
    const smoke = deviceOptions(ALL_PHASES).find((o) => o.device === 'cpu');
    assert.ok(smoke);
    const { specs, skipped } = specsFor(ALL_PHASES, smoke);
    assert.deepEqual(
      specs.map((s) => s.kind),
      ['cache', 'ulysses', 'ring'],
    );
    assert.deepEqual(skipped, ['tp', 'tep', 'vaep', 'hybrid']);
  });

  it('GPU counts limit the parallel phases', () => {
    const two = deviceOptions(ALL_PHASES).find((o) => o.gpus === 2);
    assert.ok(two);
    const { specs, skipped } = specsFor(ALL_PHASES, two);
    assert.deepEqual(
      specs.map((s) => s.kind),
      ['cache', 'ulysses', 'ring', 'tp', 'tp_tep', 'vae_p'],
    );
    assert.deepEqual(skipped, ['hybrid']);
    const one = deviceOptions(ALL_PHASES).find((o) => o.gpus === 1);
    assert.ok(one);
    assert.deepEqual(
      specsFor(ALL_PHASES, one).specs.map((s) => s.kind),
      ['cache'],
    );
  });
});
