import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import type { PhaseResult, VerificationResult } from '../../src/contract/verification';
import {
  formatMemory,
  formatPsnr,
  formatSpeedup,
  markdownReport,
  markdownTable,
  phaseMetrics,
  phaseSummary,
  reproduceCommand,
  resultsMarkdown,
  runLabel,
  runTally,
  shellQuote,
  verdictStyle,
} from '../../src/results/format';
import { FIXTURES, GOLDEN, golden, readJson } from './helpers';

describe('results formatting', () => {
  // captured before the runtime wrote its evidence table (latents, cached steps, control)
  for (const name of ['result-smoke-pass', 'result-phase-failed', 'result-cached-steps']) {
    it(`the Markdown table of ${name} equals the runtime's results.md`, () => {
      const result = golden<VerificationResult>(`${name}.json`);
      const expected = fs.readFileSync(path.join(GOLDEN, `${name}.md`), 'utf8');
      assert.equal(markdownTable(result), expected);
    });
  }
  // captured from the runtime with the no-cache control: results.md has both tables
  for (const name of ['result-not-exercised', 'result-cache-calibrated']) {
    it(`the Markdown of ${name} equals the runtime's results.md, evidence table included`, () => {
      const result = golden<VerificationResult>(`${name}.json`);
      const expected = fs.readFileSync(path.join(GOLDEN, `${name}.md`), 'utf8');
      assert.match(expected, /\| No-cache control \|/);
      assert.equal(resultsMarkdown(result), expected);
    });
  }
  // hand-written states (control failure, audio, latents only), tables rendered by report.py
  for (const name of ['not-exercised', 'control-pass', 'control-fail', 'audio', 'latents']) {
    it(`the Markdown of fixtures/results/${name} equals report.py's rendering`, () => {
      const dir = path.join(FIXTURES, 'results');
      const result = readJson<VerificationResult>(path.join(dir, `${name}.json`));
      assert.equal(resultsMarkdown(result), fs.readFileSync(path.join(dir, `${name}.md`), 'utf8'));
    });
  }

  it('formats numbers the way the runtime does', () => {
    assert.equal(formatPsnr('inf'), 'inf dB');
    assert.equal(formatPsnr(34.5678), '34.57 dB');
    assert.equal(formatPsnr(null), '-');
    assert.equal(formatSpeedup(1.8534), '1.85×');
    assert.equal(formatMemory([12.345, 11]), '12.35 / 11.00 GiB');
    assert.equal(formatMemory(null), '-');
  });

  it('one-line summaries and metric rows of a phase', () => {
    const result = golden<VerificationResult>('result-cached-steps.json');
    const [baseline, cache] = result.phases as [PhaseResult, PhaseResult];
    assert.equal(phaseSummary(baseline), '13.018 s · reference');
    assert.equal(phaseSummary(cache), '7.023 s · 1.85× · PSNR inf dB · SSIM 1.0000 · pass');
    const rows = Object.fromEntries(phaseMetrics(cache).map((r) => [r.label, r.value]));
    assert.equal(rows.Speedup, '1.85×');
    assert.equal(rows['Peak memory'], '-');
    assert.match(rows.Verdict ?? '', /^pass: PSNR inf dB > 30\.0/);
    const failed = (golden<VerificationResult>('result-phase-failed.json').phases ??
      [])[1] as PhaseResult;
    assert.match(phaseSummary(failed), /^failed · INTEGRATION: integration module/);
  });

  it('verdict colours', () => {
    assert.deepEqual(verdictStyle({ status: 'ok', verdict: 'pass' }), {
      icon: 'pass-filled',
      color: 'testing.iconPassed',
      label: 'pass',
    });
    assert.equal(verdictStyle({ status: 'ok', verdict: 'warn' }).color, 'list.warningForeground');
    assert.equal(verdictStyle({ status: 'ok', verdict: 'garbled' }).color, 'testing.iconFailed');
    assert.equal(verdictStyle({ status: 'failed', verdict: null }).label, 'failed');
    assert.equal(verdictStyle({ status: 'running' }).icon, 'sync~spin');
  });

  it('run labels count the judged phases', () => {
    assert.deepEqual(runTally(golden<VerificationResult>('result-smoke-pass.json')), {
      passed: 1,
      judged: 1,
      failed: 0,
      notExercised: 0,
    });
    assert.deepEqual(runTally(golden<VerificationResult>('result-phase-failed.json')), {
      passed: 0,
      judged: 1,
      failed: 1,
      notExercised: 0,
    });
    assert.match(
      runLabel(golden<VerificationResult>('result-smoke-pass.json')),
      /^\d{4}-\d\d-\d\d \d\d:\d\d · completed · 1\/1 passed$/,
    );
  });

  it('the reproduce command runs from the workspace with the same request', () => {
    assert.equal(
      reproduceCommand('/venv/bin/python', '/ws/.cdit/runs/r1/request.json', '/ws'),
      'cd /ws && /venv/bin/python -m cdit_runtime verify .cdit/runs/r1/request.json',
    );
    assert.equal(
      reproduceCommand('python3', '/elsewhere/request.json', '/ws'),
      'python3 -m cdit_runtime verify /elsewhere/request.json',
    );
    assert.equal(shellQuote("it's here"), `'it'\\''s here'`);
  });

  it('the PR report holds the table, the environment and the command', () => {
    const text = markdownReport(
      golden<VerificationResult>('result-smoke-pass.json'),
      'python3 -m cdit_runtime verify r.json',
    );
    assert.match(text, /Model: DemoMMDiTPipeline \/ DemoMMDiTTransformer2DModel/);
    assert.match(
      text,
      /Environment: torch 2\.13\.0\+cpu, diffusers 0\.42\.1, cache-dit 1\.5\.3, device cpu/,
    );
    assert.match(
      text,
      /Thresholds: cache PSNR > 30 dB, warn from 25 dB, parallel PSNR > 35 dB, SSIM > 0\.9/,
    );
    assert.ok(
      text.includes(fs.readFileSync(path.join(GOLDEN, 'result-smoke-pass.md'), 'utf8').trimEnd()),
    );
    assert.match(text, /```sh\npython3 -m cdit_runtime verify r\.json\n```/);
  });
});
