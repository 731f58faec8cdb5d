/**
 * The verdicts of issue 11 in the UI: the amber not_exercised state, the no-cache control, the
 * final-latent comparison and the audio / latents-only output kinds — in the results tree rows,
 * the detail view state, the checklist gating and the Markdown export. The documents in
 * extension/test/fixtures/results/ follow the runtime's schema (checked in contract.test.ts).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { checklist, checklistIcon } from '../../src/checklist/model';
import { isVerificationResult } from '../../src/contract/guards';
import type {
  PhaseResult,
  ProgressEvent,
  VerificationRequest,
  VerificationResult,
} from '../../src/contract/verification';
import { applyEvent, pendingResult } from '../../src/results/live';
import { detailState, type DetailState } from '../../src/results/detailState';
import {
  formatCachedSteps,
  formatMaxAbs,
  markdownChecks,
  markdownReport,
  markdownTable,
  phaseMetrics,
  phaseRows,
  phaseSummary,
  phaseTooltip,
  runLabel,
  runTally,
  thresholdText,
  verdictStyle,
} from '../../src/results/format';
import { FIXTURES, ROOT, golden, goldenLines, readJson } from './helpers';

function fixture(name: string): VerificationResult {
  return readJson<VerificationResult>(path.join(FIXTURES, 'results', `${name}.json`));
}

function cachePhase(result: VerificationResult): PhaseResult {
  const phase = (result.phases ?? []).find((p) => p.kind === 'cache');
  assert.ok(phase, 'no cache phase');
  return phase;
}

/** The detail state of the cache phase, with the image paths the view asked URIs for. */
function detail(result: VerificationResult): { state: DetailState; asked: string[] } {
  const asked: string[] = [];
  const state = detailState(
    { id: 'r1', result, outputDir: result.outputDir },
    'cache',
    'python3 -m cdit_runtime verify r.json',
    (rel) => {
      asked.push(rel);
      return `webview://${rel}`;
    },
  );
  assert.ok(!('missing' in state), 'the cache phase is missing');
  return { state, asked };
}

function metrics(rows: { label: string; value: string }[]): Record<string, string> {
  return Object.fromEntries(rows.map((r) => [r.label, r.value]));
}

describe('not_exercised: a cache phase that cached no step', () => {
  const result = fixture('not-exercised');
  const phase = cachePhase(result);

  it('is amber, apart from pass, warn and fail', () => {
    const style = verdictStyle(phase);
    assert.deepEqual(style, { icon: 'unverified', color: 'charts.orange', label: 'not_exercised' });
    const others = (['pass', 'warn', 'fail', 'garbled'] as const).map(
      (verdict) => verdictStyle({ status: 'ok', verdict }).color,
    );
    assert.ok(!others.includes(style.color), `${style.color} is also used by ${others.join(', ')}`);
    // the detail view colours it with the same theme colour
    const css = fs.readFileSync(path.join(ROOT, 'extension', 'media', 'common.css'), 'utf8');
    assert.match(css, /\.verdict-not_exercised\s*\{[^}]*var\(--vscode-charts-orange\)/);
  });

  it('says so in the tree, with the cached steps, the latents and the control', () => {
    assert.equal(
      phaseSummary(phase),
      '5.023 s · 1.00× · PSNR inf dB · SSIM 1.0000 · latents inf dB · cached 0/4 steps · control pass · not exercised',
    );
    assert.match(phaseTooltip(phase), /^cache: not exercised — no step was cached \(0\/4\)/);
    assert.equal(metrics(phaseMetrics(phase))['Cached steps'], '0/4');
  });

  it('counts neither as passed nor as failed', () => {
    assert.deepEqual(runTally(result), { passed: 0, judged: 1, failed: 0, notExercised: 1 });
    assert.match(runLabel(result), / · completed · 0\/1 passed · 1 not exercised$/);
  });

  it('the detail view explains it and what to change', () => {
    const { state } = detail(result);
    assert.equal(state.verdict, 'not_exercised');
    assert.equal(state.verdictText, 'not exercised');
    assert.match(state.notExercised ?? '', /cached 0\/4 steps/);
    assert.match(state.notExercised ?? '', /cdit\.cache\.calibrateShare/);
    assert.equal(detail(fixture('control-pass')).state.notExercised, null);
  });

  it('keeps the checklist from unlocking the phases after the cache', () => {
    const items = checklist({ results: [result], overrides: [], cli: 'not-applicable' });
    const cache = items[0];
    assert.equal(cache?.outcome, 'not-exercised');
    assert.equal(cache?.gate, 'available');
    assert.match(cache?.detail ?? '', /cache not exercised \(cached 0\/4 steps\)/);
    assert.deepEqual(checklistIcon(cache), {
      icon: 'unverified',
      color: 'charts.orange',
    });
    assert.deepEqual(
      items.slice(2).map((i) => i.gate),
      ['locked', 'locked', 'locked', 'locked', 'locked'],
    );
    assert.match(items[2]?.detail ?? '', /locked until "Cache \(DBCache\)" passes/);
  });

  it('a newer run that cached nothing outranks an older pass', () => {
    const older = { ...fixture('control-pass'), startedAt: 1 };
    const newer = { ...result, startedAt: 2 };
    const items = checklist({ results: [newer, older], overrides: [], cli: 'not-applicable' });
    assert.equal(items[0]?.outcome, 'not-exercised');
    assert.equal(items[2]?.gate, 'locked');
    // and a newer pass unlocks context parallelism again
    const again = checklist({
      results: [{ ...older, startedAt: 3 }, newer],
      overrides: [],
      cli: 'not-applicable',
    });
    assert.equal(again[0]?.outcome, 'passed');
    assert.equal(again[2]?.gate, 'available');
  });

  it('the export says the phase did not verify caching', () => {
    const text = markdownReport(result, undefined);
    assert.match(
      text,
      /\| cache \| ok \| 5\.023 \| 1\.00 \| inf \| 1\.0000 \| - \| not_exercised \|/,
    );
    assert.match(text, /Not exercised: cache cached no step, so caching was not verified\./);
    assert.match(text, /\| cache \| image \| inf \| 0 \| 0\/4 \| pass \| inf \| inf \|/);
  });
});

describe('the no-cache control', () => {
  it('a passing control: green row first under the phase, its metrics in the detail view', () => {
    const result = fixture('control-pass');
    const phase = cachePhase(result);
    assert.equal(
      phaseSummary(phase),
      '3.900 s · 1.29× · PSNR 33.53 dB · SSIM 0.9872 · latents 41.20 dB · cached 3/4 steps · control pass · pass',
    );
    const [first, ...rest] = phaseRows(phase);
    assert.deepEqual(first, {
      kind: 'control',
      label: 'No-cache control',
      value: 'pass · PSNR inf dB · latents inf dB',
      style: { icon: 'pass-filled', color: 'testing.iconPassed', label: 'pass' },
    });
    assert.ok(rest.every((r) => r.kind === 'metric' && r.style === undefined));
    const { state } = detail(result);
    assert.equal(state.control?.verdict, 'pass');
    assert.deepEqual(metrics(state.control?.rows ?? []), {
      Verdict: 'pass',
      PSNR: 'inf dB',
      SSIM: '1.0000',
      'Latent PSNR': 'inf dB',
      'Latent max |Δ|': '0',
      'Cached steps': '0 (must be 0)',
      Latency: '5.102 s',
      Reason: 'reproduces the baseline: PSNR inf dB, final latents identical',
    });
    const items = checklist({ results: [result], overrides: [], cli: 'not-applicable' });
    assert.deepEqual(
      items.slice(0, 3).map((i) => [i.outcome, i.gate]),
      [
        ['passed', 'done'],
        ['not-applicable', 'done'],
        ['not-run', 'available'],
      ],
    );
  });

  it('a failing control: red row with the reason, the phase fails in the checklist', () => {
    const result = fixture('control-fail');
    const phase = cachePhase(result);
    assert.match(phaseSummary(phase), / · cached 3\/4 steps · control FAIL · fail$/);
    const control = phaseRows(phase)[0];
    assert.equal(control?.kind, 'control');
    assert.equal(control?.style?.color, 'testing.iconFailed');
    assert.match(
      control?.value ?? '',
      /^FAIL — differs from the baseline with caching disabled: PSNR 33\.02 dB/,
    );
    assert.match(phaseTooltip(phase), /no-cache control: FAIL — differs from the baseline/);
    const { state } = detail(result);
    assert.equal(state.control?.verdict, 'fail');
    assert.equal(metrics(state.control?.rows ?? []).PSNR, '33.02 dB');
    const items = checklist({ results: [result], overrides: [], cli: 'not-applicable' });
    assert.equal(items[0]?.outcome, 'failed');
    assert.match(items[0]?.detail ?? '', /no-cache control failed: differs from the baseline/);
    assert.equal(items[2]?.gate, 'locked');
  });

  it('a failed control fails the phase even where the verdict says pass', () => {
    const result = fixture('control-fail');
    const phase = { ...cachePhase(result), verdict: 'pass' as const };
    const doc = { ...result, phases: [(result.phases ?? [])[0] as PhaseResult, phase] };
    const items = checklist({ results: [doc], overrides: [], cli: 'not-applicable' });
    assert.equal(items[0]?.outcome, 'failed');
    assert.equal(items[2]?.gate, 'locked');
  });

  it('a control that could not run shows its error', () => {
    const phase: PhaseResult = {
      ...cachePhase(fixture('control-pass')),
      control: {
        status: 'failed',
        verdict: null,
        error: { code: 'OOM', message: 'out of memory in the control run' },
      },
    };
    const row = phaseRows(phase)[0];
    assert.equal(row?.value, 'failed — OOM: out of memory in the control run');
    assert.equal(row?.style?.color, 'testing.iconFailed');
    assert.match(phaseSummary(phase), / · control failed · pass$/);
  });

  it('the export has a second table with the latents and the control', () => {
    const pass = markdownReport(fixture('control-pass'), undefined);
    assert.match(pass, /Dtype: float32/);
    assert.match(
      pass,
      /\| Phase \| Output \| Latent PSNR \(dB\) \| Latent max abs diff \| Cached steps \| No-cache control \| Control PSNR \(dB\) \| Control latent PSNR \(dB\) \|/,
    );
    assert.match(pass, /\| cache \| image \| 41\.20 \| 0\.0123 \| 3\/4 \| pass \| inf \| inf \|/);
    const fail = markdownChecks(fixture('control-fail')) ?? '';
    assert.match(
      fail,
      /\| cache \| image \| 38\.12 \| 0\.0431 \| 3\/4 \| fail: differs from the baseline with caching disabled: PSNR 33\.02 dB, latents 37\.90 dB < 80\.0 \(float32\) \| 33\.02 \| 37\.90 \|/,
    );
    // a run with no judged phase has no evidence table (as report.render_checks)
    const baselineOnly = { ...fixture('control-pass') };
    baselineOnly.phases = (baselineOnly.phases ?? []).slice(0, 1);
    assert.equal(markdownChecks(baselineOnly), undefined);
  });
});

describe('final latents, calibration and thresholds', () => {
  it('latent PSNR and the largest difference beside PSNR/SSIM', () => {
    const rows = metrics(phaseMetrics(cachePhase(fixture('control-pass'))));
    assert.equal(rows.PSNR, '33.53 dB');
    assert.equal(rows.SSIM, '0.9872');
    assert.equal(rows['Latent PSNR (callback)'], '41.20 dB');
    assert.equal(rows['Latent max |Δ|'], '0.0123');
    assert.equal(rows['Cached steps'], '3/4');
    assert.match(
      phaseTooltip(cachePhase(fixture('control-pass'))),
      /final latents \(callback\): PSNR 41\.20 dB · max \|Δ\| 0\.0123/,
    );
  });

  it('formats small differences and step counts', () => {
    assert.equal(formatMaxAbs(0), '0');
    // Python's format(x, '.3g'), as the runtime's table writes it
    assert.equal(formatMaxAbs(3.05e-6), '3.05e-06');
    assert.equal(formatMaxAbs(0.0123456), '0.0123');
    assert.equal(formatMaxAbs(0.4396612197160721), '0.44');
    assert.equal(formatMaxAbs(9.996), '10');
    assert.equal(formatMaxAbs(1234.5), '1.23e+03');
    assert.equal(formatMaxAbs(123.4), '123');
    assert.equal(formatMaxAbs(null), '-');
    assert.equal(formatCachedSteps(3, 6), '3/6');
    assert.equal(formatCachedSteps(3, null), '3');
    assert.equal(formatCachedSteps(undefined, 6), '-');
  });

  it('the calibration of the residual-diff threshold is in the detail view', () => {
    const { state } = detail(fixture('control-pass'));
    assert.deepEqual(metrics(state.calibration ?? []), {
      'Target share': '50% of the steps',
      Threshold: '0.3',
      'Eligible steps': '2, 3, 4',
      'Probe diffs': '2: 0.2512, 3: 0.3104, 4: 0.4428',
      Reason: 'threshold 0.3 caches 2 of the 3 eligible steps',
    });
    assert.deepEqual(state.cacheStats, [
      'transformer_blocks: cached steps 2, 3, 4; residual diffs 2: 0.2512, 3: 0.3104, 4: 0.2871',
    ]);
    assert.deepEqual(detail(fixture('control-fail')).state.cacheStats, [
      'transformer_blocks: cached steps 2, 3, 4 (forced: threshold >= 1, diffs not measured)',
    ]);
  });

  it('the thresholds that applied at the run dtype', () => {
    const result = fixture('control-pass');
    assert.equal(
      thresholdText(result.thresholds, 'float32'),
      'cache PSNR > 30 dB, warn from 25 dB, parallel PSNR > 80 dB (float32), no-cache control PSNR > 80 dB (float32), SSIM > 0.9',
    );
    assert.equal(
      thresholdText(result.thresholds, 'bfloat16'),
      'cache PSNR > 30 dB, warn from 25 dB, parallel PSNR > 35 dB (bfloat16), no-cache control PSNR > 45 dB (bfloat16), SSIM > 0.9',
    );
    assert.match(
      thresholdText(result.thresholds, null),
      /parallel PSNR > 35 dB, parallel PSNR > 80 dB in float32, no-cache control PSNR > 45 dB/,
    );
    assert.match(detail(result).state.thresholds, /parallel PSNR > 80 dB \(float32\)/);
  });
});

describe('output kinds', () => {
  it('audio: SNR instead of SSIM, the waveform previews shown', () => {
    const result = fixture('audio');
    const phase = cachePhase(result);
    assert.equal(
      phaseSummary(phase),
      '5.023 s · 1.41× · PSNR 44.87 dB · SNR 31.40 dB · latents 45.50 dB · cached 2/4 steps · control pass · pass',
    );
    const rows = metrics(phaseMetrics(phase));
    assert.equal(rows.Output, 'audio');
    assert.equal(rows.SNR, '31.40 dB');
    assert.equal(rows.SSIM, undefined);
    assert.equal(rows['Latent PSNR (transformer)'], '45.50 dB');
    const { state, asked } = detail(result);
    assert.deepEqual(asked, ['images/baseline.png', 'images/cache.png', 'images/cache.diff.png']);
    assert.deepEqual(state.images, {
      baseline: 'webview://images/baseline.png',
      output: 'webview://images/cache.png',
      diff: 'webview://images/cache.diff.png',
    });
    assert.equal(state.captions.output, 'cache (waveform)');
    assert.equal(state.previewMessage, null);
    // no preview written: a message, not an empty frame
    const bare = {
      ...result,
      phases: (result.phases ?? []).map((p) => ({ ...p, images: {} })),
    };
    assert.equal(
      detail(bare).state.previewMessage,
      'No waveform preview was written for this phase.',
    );
  });

  it('latents only: no image at all, a clear message instead', () => {
    const result = fixture('latents');
    const phase = cachePhase(result);
    assert.equal(
      phaseSummary(phase),
      '5.023 s · 1.00× · latents 36.02 dB · cached 2/4 steps · control pass · pass',
    );
    const rows = metrics(phaseMetrics(phase));
    assert.equal(rows.Output, 'latents');
    assert.equal(rows.PSNR, undefined);
    assert.equal(rows['Latent PSNR (callback)'], '36.02 dB');
    const { state, asked } = detail(result);
    assert.deepEqual(asked, []);
    assert.deepEqual(state.images, { baseline: null, output: null, diff: null });
    assert.match(state.previewMessage ?? '', /not an image, video or audio.*final latents alone/);
    assert.match(
      phaseTooltip(phase),
      /output: not an image, video or audio; compared on the final latents alone/,
    );
  });

  it('an image run from before the output kinds keeps its images', () => {
    const { state } = detail(golden<VerificationResult>('result-cached-steps.json'));
    assert.equal(state.images.output, 'webview://images/cache.png');
    assert.equal(state.images.baseline, 'webview://images/baseline.png');
    assert.equal(state.captions.diff, 'difference (amplified to the largest error)');
    assert.equal(state.control, null);
    assert.equal(state.calibration, null);
  });
});

describe('the new documents through the guards and the runtime table', () => {
  for (const name of ['not-exercised', 'control-pass', 'control-fail', 'audio', 'latents']) {
    it(`${name} is read as a VerificationResult`, () => {
      assert.ok(isVerificationResult(fixture(name)));
    });
  }

  it('rejects an unknown verdict, output kind or control verdict', () => {
    const good = fixture('control-pass');
    const phase = cachePhase(good);
    const withPhase = (p: Record<string, unknown>): unknown => ({
      ...good,
      phases: [{ ...phase, ...p }],
    });
    assert.equal(isVerificationResult(withPhase({ verdict: 'maybe' })), false);
    assert.equal(isVerificationResult(withPhase({ outputKind: 'hologram' })), false);
    assert.equal(
      isVerificationResult(withPhase({ control: { status: 'ok', verdict: 'ok' } })),
      false,
    );
    assert.equal(isVerificationResult(withPhase({ latentPsnrDb: 'high' })), false);
  });

  it('the runtime table names the verdicts as the runtime does', () => {
    assert.match(markdownTable(fixture('control-fail')), /\| cache \| ok \| .* \| fail \|\n$/);
  });
});

describe('captured CPU runs of the example workspace (runtime with the no-cache control)', () => {
  it('default cache options on 4 steps: not exercised, context parallelism stays locked', () => {
    const result = golden<VerificationResult>('result-not-exercised.json');
    const phase = cachePhase(result);
    assert.match(
      phaseSummary(phase),
      / · PSNR inf dB · SSIM 1\.0000 · latents inf dB · cached 0\/4 steps · control pass · not exercised$/,
    );
    assert.equal(phaseRows(phase)[0]?.value, 'pass · PSNR inf dB · latents inf dB');
    assert.match(runLabel(result), / · 0\/1 passed · 1 not exercised$/);
    const items = checklist({ results: [result], overrides: [], cli: 'not-applicable' });
    assert.equal(items[0]?.outcome, 'not-exercised');
    assert.equal(items[2]?.gate, 'locked');
  });

  it('replaying its progress events ends not exercised', () => {
    let live = pendingResult(golden<VerificationRequest>('request-smoke.json'));
    for (const e of goldenLines('progress-not-exercised.jsonl'))
      live = applyEvent(live, e as ProgressEvent);
    assert.deepEqual(
      live.phases?.map((p) => [p.name, p.verdict]),
      [
        ['baseline', 'reference'],
        ['cache', 'not_exercised'],
      ],
    );
    assert.equal(verdictStyle(cachePhase(live)).color, 'charts.orange');
  });

  it('a calibrated threshold caches 3 of 4 steps: warn, the control passes, CP is offered', () => {
    const result = golden<VerificationResult>('result-cache-calibrated.json');
    const phase = cachePhase(result);
    assert.match(
      phaseSummary(phase),
      / · PSNR 33\.53 dB · SSIM 0\.9872 · latents 28\.33 dB · cached 3\/4 steps · control pass · warn$/,
    );
    const { state } = detail(result);
    assert.equal(state.control?.verdict, 'pass');
    const calibration = metrics(state.calibration ?? []);
    assert.equal(calibration['Target share'], '50% of the steps');
    assert.equal(calibration.Threshold, '1');
    assert.equal(calibration['Eligible steps'], '1, 2, 3');
    const items = checklist({ results: [result], overrides: [], cli: 'not-applicable' });
    assert.deepEqual([items[0]?.outcome, items[2]?.gate], ['passed', 'available']);
  });
});
