import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SerialRestarter } from '../../src/common/restart';

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('SerialRestarter', () => {
  it('runs one restart at a time and collapses a burst into one more', async () => {
    const calls: string[][] = [];
    const gates: { resolve: () => void }[] = [];
    let running = 0;
    let maxRunning = 0;
    const restarter = new SerialRestarter(async (reasons) => {
      calls.push([...reasons]);
      running += 1;
      maxRunning = Math.max(maxRunning, running);
      const d = deferred();
      gates.push(d);
      await d.promise;
      running -= 1;
    });
    const first = restarter.request('a');
    const second = restarter.request('b');
    const third = restarter.request('c');
    assert.equal(second, third, 'queued requests share one promise');
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(calls, [['a']]);
    gates[0]?.resolve();
    await first;
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(calls, [['a'], ['b', 'c']]);
    gates[1]?.resolve();
    await second;
    assert.equal(maxRunning, 1);
    assert.equal(restarter.busy, false);
  });

  it('keeps serving after a failed restart', async () => {
    let n = 0;
    const restarter = new SerialRestarter(async () => {
      n += 1;
      if (n === 1) throw new Error('boom');
    });
    await assert.rejects(restarter.request('x'), /boom/);
    await restarter.request('y');
    assert.equal(n, 2);
  });
});
