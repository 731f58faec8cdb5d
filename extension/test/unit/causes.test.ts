/**
 * Failures map to causes: every error code the runtime documents has its own plain-language
 * cause and (except a cancel) a next step; failing verdicts say what to check; the detail view's
 * next-step message only carries known action ids; the plan review shows the registry blocker the
 * analysis found before anything runs.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import type { AnalysisReport, IntegrationPlan } from '../../src/contract/analysis';
import type { PhaseResult } from '../../src/contract/verification';
import { planBlockers, reviewModel, defaultChoices } from '../../src/plan/review';
import {
  CAUSE_CODES,
  calibratedCacheSettings,
  causeOfError,
  causeOfPhase,
  causeOfVerdict,
} from '../../src/results/causes';
import { runLabel, runStyle } from '../../src/results/format';
import { parseDetailMessage, parseGateMessage } from '../../src/webview/messages';
import { FIXTURES, readJson } from './helpers';

const SCHEMA = path.join(
  __dirname,
  '..',
  '..',
  '..',
  'cdit_runtime',
  'contract',
  'verification.schema.json',
);

function documentedCodes(): string[] {
  const schema = JSON.parse(fs.readFileSync(SCHEMA, 'utf8')) as {
    $defs: { ErrorInfo: { properties: { code: { description: string } } } };
  };
  return schema.$defs.ErrorInfo.properties.code.description.split('|').map((c) => c.trim());
}

describe('failure causes', () => {
  it('gives every documented error code a cause of its own and a next step', () => {
    const codes = documentedCodes();
    assert.ok(codes.includes('PIPELINE_CALL') && codes.includes('SOURCE_IMPORT'));
    for (const code of codes) {
      assert.ok(CAUSE_CODES.includes(code), `${code} has no cause`);
      const cause = causeOfError({ code, message: 'm', hint: 'h' });
      assert.ok(cause.title.length > 0);
      assert.equal(cause.explanation, 'h');
      if (code !== 'CANCELLED') assert.ok(cause.next, `${code} has no next step`);
    }
    // a code this version does not know still reads as a cause, with the logs as next step
    assert.equal(causeOfError({ code: 'NEW_CODE', message: 'm' }).next?.action, 'openLogs');
  });

  it('sends argument and import failures to the gate check, registry ones to the plan', () => {
    assert.equal(
      causeOfError({ code: 'PIPELINE_CALL', message: '' }).next?.action,
      'openGateCheck',
    );
    assert.equal(
      causeOfError({ code: 'SOURCE_IMPORT', message: '' }).next?.action,
      'openGateCheck',
    );
    assert.equal(
      causeOfError({ code: 'REGISTERED_ADAPTER', message: '' }).next?.action,
      'reviewPlan',
    );
  });

  it('explains failing verdicts: a failed control blames the integration, not the cache', () => {
    const base: PhaseResult = { name: 'cache', kind: 'cache', status: 'ok', verdict: 'fail' };
    const control = causeOfVerdict({
      ...base,
      control: { status: 'ok', verdict: 'fail', reason: 'PSNR 77 dB <= 80' },
    });
    assert.match(control?.title ?? '', /changes the math/);
    assert.equal(control?.next?.action, 'reviewPlan');
    assert.equal(causeOfVerdict(base)?.next?.action, 'cacheSettings');
    assert.match(
      causeOfVerdict({ ...base, name: 'ulysses-2', kind: 'ulysses' })?.title ?? '',
      /parallel plan/,
    );
    const idle = causeOfVerdict({ ...base, verdict: 'not_exercised' });
    assert.match(idle?.title ?? '', /No step/);
    assert.equal(idle?.next?.action, 'calibrateCache');
    assert.match(idle?.next?.label ?? '', /Calibrate to cache 50% of the steps and run again/);
    assert.equal(causeOfVerdict({ ...base, verdict: 'pass' }), undefined);
    // an error wins over the verdict of a phase that did not run
    const failed = causeOfPhase({
      ...base,
      status: 'failed',
      verdict: null,
      error: { code: 'OOM', message: 'CUDA out of memory', hint: 'x' },
    });
    assert.equal(failed?.title, 'Out of memory');
  });

  it('accepts only known next-step ids from the page', () => {
    assert.deepEqual(parseDetailMessage({ type: 'next', action: 'openLogs' }), {
      type: 'next',
      action: 'openLogs',
    });
    assert.equal(
      parseDetailMessage({ type: 'next', action: 'workbench.action.terminal.new' }),
      undefined,
    );
    assert.equal(parseDetailMessage({ type: 'next' }), undefined);
  });
});

describe('plan blockers', () => {
  const analysis = readJson<AnalysisReport>(path.join(FIXTURES, 'analysis-demo.json'));
  const plan = readJson<IntegrationPlan>(path.join(FIXTURES, 'plan-demo.json'));
  const shadowed = (): AnalysisReport => {
    const copy = JSON.parse(JSON.stringify(analysis)) as AnalysisReport;
    const t = copy.transformers[0];
    assert.ok(t);
    t.registry = {
      ...(t.registry ?? {}),
      checkoutName: null,
      checkoutNameReason: "cache-dit already registers 'Demo', a prefix of both classes",
      warnings: ["cache-dit registers BlockAdapter 'Demo' ..."],
    };
    return copy;
  };

  it('shows a registered prefix of both classes as a blocker for the checkout target', () => {
    const checkout: IntegrationPlan = {
      ...plan,
      target: { kind: 'cache-dit-checkout', root: '/ws/cache-dit' },
    };
    const report = shadowed();
    const blockers = planBlockers(checkout, report.transformers[0]);
    assert.equal(blockers.length, 2);
    assert.match(blockers[0]?.text ?? '', /^Register name: cache-dit already registers 'Demo'/);
    assert.ok(blockers.every((b) => b.severity === 'error'));
    const m = reviewModel(checkout, report, undefined, defaultChoices(checkout));
    assert.equal(m.blockers.length, 2);
  });

  it('has no blocker for the standalone target, which passes its own adapter', () => {
    const report = shadowed();
    assert.equal(plan.target.kind, 'standalone');
    assert.deepEqual(planBlockers(plan, report.transformers[0]), []);
  });
});

describe('gate-check fix message', () => {
  it('names a fix by field and index only, within bounds', () => {
    assert.deepEqual(parseGateMessage({ type: 'fix', field: 'transformerSource', index: 1 }), {
      type: 'fix',
      field: 'transformerSource',
      index: 1,
    });
    assert.equal(parseGateMessage({ type: 'fix', field: 'nope', index: 0 }), undefined);
    assert.equal(
      parseGateMessage({ type: 'fix', field: 'transformerSource', index: -1 }),
      undefined,
    );
    assert.equal(
      parseGateMessage({ type: 'fix', field: 'transformerSource', index: 1.5 }),
      undefined,
    );
    assert.equal(
      parseGateMessage({ type: 'fix', field: 'transformerSource', index: 0, command: 'x' })?.type,
      'fix',
    );
  });
});

describe('run icon', () => {
  const phase = (
    name: string,
    verdict: PhaseResult['verdict'],
    status: PhaseResult['status'] = 'ok',
  ): PhaseResult => ({
    name,
    kind: name === 'baseline' ? 'baseline' : 'cache',
    status,
    verdict,
  });
  const run = (phases: PhaseResult[], status: 'completed' | 'failed' = 'completed') => ({
    status,
    outputDir: '/o',
    phases,
  });
  it('is red when a phase failed, though the run completed (0/1 passed is not neutral)', () => {
    const failed = run([phase('baseline', 'reference'), phase('cache', 'fail')]);
    assert.equal(runLabel(failed).endsWith('completed · 0/1 passed'), true);
    assert.deepEqual(runStyle(failed), { icon: 'error', color: 'testing.iconFailed' });
  });
  it('is amber when a check had nothing to check, green when every phase passed', () => {
    assert.equal(
      runStyle(run([phase('baseline', 'reference'), phase('cache', 'not_exercised')])).icon,
      'warning',
    );
    assert.deepEqual(runStyle(run([phase('baseline', 'reference'), phase('cache', 'pass')])), {
      icon: 'pass',
      color: 'testing.iconPassed',
    });
    assert.equal(runStyle(run([phase('cache', null, 'failed')])).icon, 'error');
  });

  it('the calibrate next step keeps the other cache options and caps the warmup at one step', () => {
    assert.deepEqual(calibratedCacheSettings(undefined), {
      calibrateShare: 0.5,
      maxWarmupSteps: 1,
    });
    assert.deepEqual(
      calibratedCacheSettings({ Fn: 2, residualDiffThreshold: 0.3, maxWarmupSteps: 8 }),
      { Fn: 2, calibrateShare: 0.5, maxWarmupSteps: 1 },
    );
    assert.deepEqual(calibratedCacheSettings({ maxWarmupSteps: 0, control: false }), {
      maxWarmupSteps: 0,
      control: false,
      calibrateShare: 0.5,
    });
    assert.deepEqual(calibratedCacheSettings(['not', 'an object']), {
      calibrateShare: 0.5,
      maxWarmupSteps: 1,
    });
  });
});
