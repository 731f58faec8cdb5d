import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type {
  ProgressEvent,
  VerificationRequest,
  VerificationResult,
} from '../../src/contract/verification';
import { applyEvent, mergeLive, pendingResult, phaseId } from '../../src/results/live';
import { golden, goldenLines } from './helpers';

describe('live results from progress events', () => {
  it('phase ids match the runtime (PhaseSpec.id)', () => {
    assert.equal(phaseId({ kind: 'baseline' }), 'baseline');
    assert.equal(phaseId({ kind: 'ulysses', size: 4 }), 'ulysses-4');
    assert.equal(phaseId({ kind: 'ring', size: 2, cache: true }), 'ring-2-cache');
    assert.equal(phaseId({ kind: 'hybrid', cpSize: 2, tpSize: 4 }), 'hybrid-u2-tp4');
    assert.equal(phaseId({ kind: 'vae_p', size: 2 }), 'vae_p-tp2');
    assert.equal(phaseId({ kind: 'tp', name: 'mine' }), 'mine');
  });

  for (const [events, final] of [
    ['progress-smoke.jsonl', 'result-smoke-pass.json'],
    ['progress-phase-failed.jsonl', 'result-phase-failed.json'],
  ] as const) {
    it(`replaying ${events} ends with the statuses and verdicts of ${final}`, () => {
      const request = golden<VerificationRequest>(
        events.includes('failed') ? 'request-missing-integration.json' : 'request-smoke.json',
      );
      let live = pendingResult(request);
      assert.deepEqual(
        live.phases?.map((p) => p.status),
        ['pending', 'pending'],
      );
      for (const e of goldenLines(events)) live = applyEvent(live, e as ProgressEvent);
      const expected = golden<VerificationResult>(final);
      assert.equal(live.status, expected.status);
      assert.deepEqual(
        live.phases?.map((p) => [p.name, p.status, p.verdict ?? null]),
        expected.phases?.map((p) => [p.name, p.status, p.verdict ?? null]),
      );
    });
  }

  it('a step event shows the step count on the running phase', () => {
    const live = applyEvent(pendingResult(golden<VerificationRequest>('request-smoke.json')), {
      event: 'step',
      time: 1,
      phase: 'cache',
      step: 3,
      total: 4,
    });
    const cache = live.phases?.find((p) => p.name === 'cache');
    assert.equal(cache?.status, 'running');
    assert.deepEqual(cache?.notes, ['step 3/4']);
  });
});

describe('live results merged with the intermediate results.json', () => {
  it('finished phases take the measured numbers, running ones stay live', () => {
    const request = golden<VerificationRequest>('request-smoke.json');
    let live = pendingResult(request);
    live = applyEvent(live, { event: 'phase_started', time: 1, phase: 'baseline' });
    live = applyEvent(live, {
      event: 'phase_finished',
      time: 2,
      phase: 'baseline',
      status: 'ok',
      verdict: 'reference',
    });
    live = applyEvent(live, { event: 'phase_started', time: 3, phase: 'cache' });
    const disk = golden<VerificationResult>('result-smoke-pass.json');
    const partial = {
      ...disk,
      status: 'running' as const,
      phases: [
        disk.phases?.[0],
        { name: 'cache', kind: 'cache' as const, status: 'pending' as const },
      ].filter((p) => p !== undefined),
    };
    const merged = mergeLive(live, partial);
    assert.equal(merged.status, 'running');
    assert.equal(merged.phases?.[0]?.latencyS, disk.phases?.[0]?.latencyS);
    assert.equal(merged.phases?.[1]?.status, 'running');
  });
});
