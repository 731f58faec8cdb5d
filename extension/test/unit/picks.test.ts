import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ALL_PHASES, deviceOptions, specsFor } from '../../src/runs/picks';

describe('run pickers', () => {
  it('offers a CPU smoke run for every phase (all kinds run on gloo), none for the CLI alone', () => {
    assert.equal(deviceOptions(['cache', 'cp'])[0]?.device, 'cpu');
    assert.equal(deviceOptions(['tp'])[0]?.device, 'cpu');
    assert.equal(deviceOptions(['hybrid'])[0]?.device, 'cpu');
    assert.equal(deviceOptions(['cli'])[0]?.device, 'cuda');
  });

  it('verify all on CPU runs every phase, hybrid on 2 x 2 processes', () => {
    const smoke = deviceOptions(ALL_PHASES).find((o) => o.device === 'cpu');
    assert.ok(smoke);
    const { specs, skipped } = specsFor(ALL_PHASES, smoke);
    assert.deepEqual(
      specs.map((s) => s.kind),
      ['cache', 'ulysses', 'ring', 'tp', 'tp_tep', 'vae_p', 'hybrid'],
    );
    assert.deepEqual(specs.at(-1), { kind: 'hybrid', cpSize: 2, tpSize: 2 });
    assert.deepEqual(skipped, []);
  });

  it('the Ulysses phase runs as UAA where the approved plan chose Ulysses Anything', () => {
    const smoke = deviceOptions(['cp']).find((o) => o.device === 'cpu');
    assert.ok(smoke);
    assert.deepEqual(specsFor(['cp'], smoke, { ulyssesAnything: true }).specs, [
      { kind: 'uaa', size: 2 },
      { kind: 'ring', size: 2 },
    ]);
    assert.deepEqual(
      specsFor(['cp'], smoke, { ulyssesAnything: false }).specs.map((s) => s.kind),
      ['ulysses', 'ring'],
    );
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
