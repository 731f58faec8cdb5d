import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CHECKLIST, checklist, phaseOutcome, phaseSpecs } from '../../src/checklist/model';
import type { PhaseResult, VerificationResult } from '../../src/contract/verification';
import { golden } from './helpers';

function run(phases: Partial<PhaseResult>[], startedAt = 1): VerificationResult {
  return {
    status: 'completed',
    outputDir: `/ws/.cdit/runs/${startedAt}`,
    startedAt,
    phases: phases.map((p) => ({
      name: p.name ?? p.kind ?? 'x',
      kind: p.kind ?? 'cache',
      status: p.status ?? 'ok',
      verdict: p.verdict ?? null,
      ...p,
    })),
  };
}

describe('integration checklist', () => {
  it('lists the phases in the order the guide requires', () => {
    assert.deepEqual(
      CHECKLIST.map((p) => p.id),
      ['cache', 'cli', 'cp', 'tp', 'tep', 'vaep', 'hybrid'],
    );
  });

  it('offers only the first phase that has not passed', () => {
    const items = checklist({ results: [], overrides: [], cli: 'not-applicable' });
    assert.deepEqual(
      items.map((i) => i.gate),
      ['available', 'done', 'locked', 'locked', 'locked', 'locked', 'locked'],
    );
    assert.match(items[2]?.detail ?? '', /locked until "Cache \(DBCache\)" passes/);
  });

  it('a passed cache phase (golden run) unlocks CP; the CLI gates CP for a checkout', () => {
    const results = [golden<VerificationResult>('result-smoke-pass.json')];
    const standalone = checklist({ results, overrides: [], cli: 'not-applicable' });
    assert.deepEqual(
      standalone.slice(0, 4).map((i) => [i.phase.id, i.outcome, i.gate]),
      [
        ['cache', 'passed', 'done'],
        ['cli', 'not-applicable', 'done'],
        ['cp', 'not-run', 'available'],
        ['tp', 'not-run', 'locked'],
      ],
    );
    const checkout = checklist({ results, overrides: [], cli: 'missing' });
    assert.deepEqual(
      checkout.slice(1, 3).map((i) => i.gate),
      ['available', 'locked'],
    );
  });

  it('a part the integration does not generate is not applicable and unlocks the next phase', () => {
    const passed = golden<VerificationResult>('result-smoke-pass.json');
    const refused = (kind: string) => ({
      name: `${kind}-2`,
      kind,
      status: 'skipped' as const,
      verdict: null,
      error: {
        code: 'NOT_GENERATED',
        message: `${kind}-2: context parallelism is not part of this integration: CDIT220 mask`,
      },
    });
    const cpRun: VerificationResult = {
      ...passed,
      phases: [refused('ulysses'), refused('ring')] as VerificationResult['phases'],
    };
    const items = checklist({ results: [cpRun, passed], overrides: [], cli: 'not-applicable' });
    const cp = items.find((i) => i.phase.id === 'cp');
    assert.equal(cp?.outcome, 'not-applicable');
    assert.equal(cp?.gate, 'done');
    assert.match(cp?.detail ?? '', /^not generated: ulysses-2: .*CDIT220 mask/);
    assert.equal(items.find((i) => i.phase.id === 'tp')?.gate, 'available');
    // one refused and one failed: the failure decides
    const mixed: VerificationResult = {
      ...cpRun,
      phases: [
        refused('ulysses'),
        { name: 'ring-2', kind: 'ring', status: 'failed', verdict: null },
      ] as VerificationResult['phases'],
    };
    const again = checklist({ results: [mixed, passed], overrides: [], cli: 'not-applicable' });
    assert.equal(again.find((i) => i.phase.id === 'cp')?.outcome, 'failed');
  });

  it('a phase that ran shows what it found, never "locked" (one fact, one icon)', () => {
    // cache cached nothing (not exercised), CP ran anyway and failed, TP never ran
    const results = [
      run([
        { kind: 'baseline', verdict: 'reference' },
        { kind: 'cache', verdict: 'not_exercised' },
        { kind: 'ulysses', name: 'ulysses-2', verdict: 'fail', verdictReason: 'PSNR 20 dB' },
      ]),
    ];
    const items = checklist({ results, overrides: [], cli: 'not-applicable' });
    const cp = items.find((i) => i.phase.id === 'cp');
    const tp = items.find((i) => i.phase.id === 'tp');
    assert.equal(cp?.outcome, 'failed');
    assert.equal(cp?.gate, 'available');
    assert.doesNotMatch(cp?.detail ?? '', /locked/);
    assert.match(cp?.detail ?? '', /"Cache \(DBCache\)" has not passed yet/);
    assert.equal(tp?.gate, 'locked');
  });

  it("a parallel phase that split nothing is not exercised, with the runtime's reason", () => {
    const reason = 'tensor parallelism sharded no weight: each rank held 1.00x the baseline';
    const results = [
      run([
        { kind: 'baseline', verdict: 'reference' },
        { kind: 'cache', verdict: 'pass' },
        { kind: 'ulysses', name: 'ulysses-2', verdict: 'pass' },
        { kind: 'tp', name: 'tp-2', verdict: 'not_exercised', verdictReason: reason },
      ]),
    ];
    const items = checklist({ results, overrides: [], cli: 'not-applicable' });
    const tp = items.find((i) => i.phase.id === 'tp');
    assert.equal(tp?.outcome, 'not-exercised');
    assert.equal(tp?.detail, `tp-2 not exercised: ${reason}`);
    assert.doesNotMatch(tp?.detail ?? '', /calibrateShare/);
  });

  it('a failed phase stays offered for a new run and keeps later ones locked', () => {
    const items = checklist({
      results: [golden<VerificationResult>('result-phase-failed.json')],
      overrides: [],
      cli: 'not-applicable',
    });
    assert.equal(items[0]?.outcome, 'failed');
    assert.equal(items[0]?.gate, 'available');
    assert.match(items[0]?.detail ?? '', /INTEGRATION/);
    assert.equal(items[2]?.gate, 'locked');
  });

  it('the newest run decides; warn passes; garbled fails', () => {
    const older = run([{ kind: 'cache', verdict: 'fail' }], 1);
    const newer = run([{ kind: 'cache', verdict: 'warn' }], 2);
    assert.equal(
      phaseOutcome(CHECKLIST[0] as (typeof CHECKLIST)[0], [newer, older]).outcome,
      'passed',
    );
    const garbled = run(
      [
        { kind: 'ulysses', name: 'ulysses-2', verdict: 'garbled' },
        { kind: 'ring', name: 'ring-2', verdict: 'pass' },
      ],
      3,
    );
    assert.equal(phaseOutcome(CHECKLIST[2] as (typeof CHECKLIST)[0], [garbled]).outcome, 'failed');
  });

  it('an override unlocks one locked phase and is recorded', () => {
    const overrides = [
      {
        phase: 'tp' as const,
        reason: 'CP needs 4 GPUs we do not have',
        at: '2026-11-29T20:00:00Z',
      },
    ];
    const items = checklist({
      results: [golden<VerificationResult>('result-smoke-pass.json')],
      overrides,
      cli: 'not-applicable',
    });
    const tp = items.find((i) => i.phase.id === 'tp');
    assert.equal(tp?.gate, 'available');
    assert.equal(tp?.override?.reason, 'CP needs 4 GPUs we do not have');
    assert.match(tp?.detail ?? '', /gate overridden/);
    assert.equal(items.find((i) => i.phase.id === 'tep')?.gate, 'locked');
  });

  it('phase specs per device', () => {
    assert.deepEqual(phaseSpecs('cp', 0, true), [
      { kind: 'ulysses', size: 2 },
      { kind: 'ring', size: 2 },
    ]);
    assert.deepEqual(phaseSpecs('tp', 4, false), [{ kind: 'tp', size: 4 }]);
    assert.deepEqual(phaseSpecs('hybrid', 8, false), [{ kind: 'hybrid', cpSize: 2, tpSize: 4 }]);
  });
});
