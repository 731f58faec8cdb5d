/**
 * `cdit: Tune acceleration settings (verify --tune)`: the request, the setting, the `kernels`
 * phase kind everywhere the extension names kinds, the live run whose phases the runtime chooses,
 * the checklist, the detail view's tune section and its messages. The captured documents
 * (golden/result-tune-cpu.json, golden/progress-tune.jsonl) come from a real CPU run of
 * `cdit-integrate verify --tiny skimage-dit --tune`.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import Ajv2020 from 'ajv/dist/2020';
import { checklist, worldSize } from '../../src/checklist/model';
import { DEFAULT_SETTINGS, parseSettings } from '../../src/common/settings';
import { parseTuneReport } from '../../src/contract/guards';
import type {
  PhaseResult,
  ProgressEvent,
  VerificationRequest,
  VerificationResult,
} from '../../src/contract/verification';
import { EMPTY_ANSWERS } from '../../src/gatecheck/answers';
import { detailState, tuneState, type DetailState } from '../../src/results/detailState';
import {
  phaseKindLabel,
  phaseMetrics,
  tuneRows,
  tuneSettingsText,
  tuneSummary,
} from '../../src/results/format';
import { applyEvent, kindFromId, mergeLive, pendingResult, phaseId } from '../../src/results/live';
import { deviceOptions, specsFor, tuneDeviceOptions } from '../../src/runs/picks';
import { DEFAULT_TUNE_BUDGET_S, buildRequest, tuneOptions } from '../../src/runs/request';
import { parseDetailMessage } from '../../src/webview/messages';
import { FIXTURES, ROOT, golden, goldenLines, readJson } from './helpers';

const schema = readJson<Record<string, unknown>>(
  path.join(ROOT, 'cdit_runtime', 'contract', 'verification.schema.json'),
);
const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addSchema(schema);
function valid(def: string, doc: unknown): string[] {
  const fn = ajv.getSchema(`${schema.$id as string}#/$defs/${def}`);
  assert.ok(fn);
  return fn(doc) ? [] : (fn.errors ?? []).map((e) => `${e.instancePath} ${e.message ?? ''}`);
}

const answers = {
  ...EMPTY_ANSWERS,
  localPath: 'tiny-demo-mmdit',
  pipelineClass: 'DemoMMDiTPipeline',
  transformerClass: 'DemoMMDiTTransformer2DModel',
  pipelineSource: 'pipelines/demo_mmdit_pipeline.py',
  transformerSource: 'models/demo_mmdit.py',
  targetPath: 'demo_mmdit_cdit.py',
  registerName: 'DemoMMDiT',
};
const smoke = { steps: 4, height: 64, width: 64 };
const tuned = (): VerificationResult => golden<VerificationResult>('result-tune-cpu.json');

describe('tune: the request', () => {
  it('carries the time box and keeps the smoke sizes on CPU, like the smoke run', () => {
    const request = buildRequest(
      answers,
      {
        phases: [],
        device: 'cpu',
        smoke,
        options: { cache: { maxWarmupSteps: 1 } },
        tune: tuneOptions(600, false),
      },
      '/ws',
      '/ws/.cdit/runs/t1',
    );
    assert.deepEqual(valid('VerificationRequest', request), []);
    assert.deepEqual(request.tune, { budgetS: 600, parallel: false });
    // the runtime replaces the phases with its grid; the request names the baseline only
    assert.deepEqual(request.phases, [{ kind: 'baseline' }]);
    assert.equal(request.device, 'cpu');
    assert.deepEqual([request.steps, request.height, request.width], [4, 64, 64]);
    assert.deepEqual(request.cache, { maxWarmupSteps: 1 });
    assert.equal('dtype' in request, false);
  });

  it('on GPUs: the pipeline sizes, and the parallel points as chosen', () => {
    const request = buildRequest(
      answers,
      { phases: [], device: 'cuda', smoke, tune: tuneOptions(undefined, true) },
      '/ws',
      '/ws/.cdit/runs/t2',
    );
    assert.deepEqual(valid('VerificationRequest', request), []);
    assert.deepEqual(request.tune, { budgetS: DEFAULT_TUNE_BUDGET_S, parallel: true });
    assert.equal(request.steps, undefined);
  });

  it('no tune unless asked; a bad time box falls back to the runtime default', () => {
    const plain = buildRequest(answers, { phases: [], device: 'cpu', smoke }, '/ws', '/ws/o');
    assert.equal('tune' in plain, false);
    assert.equal(DEFAULT_TUNE_BUDGET_S, 900);
    for (const bad of [0, -5, Number.NaN, Number.POSITIVE_INFINITY, undefined])
      assert.equal(tuneOptions(bad, false).budgetS, 900, String(bad));
    const budgetDefault = (
      schema.$defs as Record<string, { properties: Record<string, { default?: unknown }> }>
    ).TuneOptions?.properties.budgetS?.default;
    assert.equal(budgetDefault, DEFAULT_TUNE_BUDGET_S, "the runtime's default");
  });

  it('cdit.tune.budgetS: read, checked, and offered by the manifest with the same default', () => {
    const get = (values: Record<string, unknown>) => ({ get: (k: string) => values[k] });
    assert.equal(DEFAULT_SETTINGS.tune.budgetS, 900);
    assert.equal(parseSettings(get({ 'tune.budgetS': 120 })).settings.tune.budgetS, 120);
    const bad = parseSettings(get({ 'tune.budgetS': -1 }));
    assert.equal(bad.settings.tune.budgetS, 900);
    assert.match(bad.problems.join('\n'), /cdit\.tune\.budgetS: expected a number of seconds/);
    const manifest = readJson<{
      contributes: {
        commands: { command: string; title: string }[];
        configuration: { properties: Record<string, { default?: unknown }> };
        menus: Record<string, { command: string; when?: string }[]>;
      };
    }>(path.join(ROOT, 'package.json'));
    const c = manifest.contributes;
    assert.equal(c.configuration.properties['cdit.tune.budgetS']?.default, 900);
    const command = c.commands.find((x) => x.command === 'cdit.verifyTune');
    assert.equal(command?.title, 'Tune acceleration settings (verify --tune)');
    assert.ok(
      c.menus['view/title']?.some(
        (m) => m.command === 'cdit.verifyTune' && m.when === 'view == cdit.results',
      ),
    );
  });

  it('where to tune: the CPU smoke run of the other commands, one GPU, or every GPU', () => {
    const options = tuneDeviceOptions();
    assert.deepEqual(
      options.map((o) => [o.device, o.parallel]),
      [
        ['cpu', false],
        ['cuda', false],
        ['cuda', true],
      ],
    );
    assert.equal(options[0]?.label, deviceOptions(['cache'])[0]?.label);
  });
});

describe('tune: the kernels phase kind', () => {
  it('has a label, as every kind of the contract does', () => {
    assert.equal(phaseKindLabel('kernels'), 'kernels (attention backend / torch.compile)');
    const defs = schema.$defs as Record<
      string,
      { properties: Record<string, { enum?: string[] }> }
    >;
    const kinds = defs.PhaseSpec?.properties.kind?.enum ?? [];
    assert.ok(kinds.includes('kernels'));
    for (const kind of kinds)
      if (kind !== 'baseline') assert.notEqual(phaseKindLabel(kind), kind, kind);
    assert.equal(phaseKindLabel('future_kind'), 'future_kind');
  });

  it('is a single-process phase named by its kind, like the runtime (SINGLE_KINDS)', () => {
    assert.equal(phaseId({ kind: 'kernels' }), 'kernels');
    assert.equal(worldSize([{ kind: 'baseline' }, { kind: 'kernels', attentionBackend: 'x' }]), 1);
    const cpu = deviceOptions(['cache'])[0];
    assert.ok(cpu);
    assert.deepEqual(specsFor(['cache'], cpu).skipped, []);
  });

  it('phase ids of a tune give their kinds before results.json does', () => {
    assert.equal(kindFromId('kernels-_native_math'), 'kernels');
    assert.equal(kindFromId('kernels-flash-compile'), 'kernels');
    assert.equal(kindFromId('cache-fn1-bn0-rdt0.12-ws4'), 'cache');
    assert.equal(kindFromId('tuned-native-compile-fn1-bn0-rdt0.12-ws4'), 'cache');
    assert.equal(kindFromId('parallel-ulysses-4'), 'ulysses');
    assert.equal(kindFromId('parallel-tp-8-fn1-bn0-rdt0.12-ws4'), 'tp');
    assert.equal(kindFromId('tp_tep-2'), 'tp_tep');
    assert.equal(kindFromId('baseline'), 'baseline');
  });

  it('the metrics of a kernels phase name its backend and first call', () => {
    const kernels = (tuned().phases ?? []).find((p) => p.kind === 'kernels');
    assert.ok(kernels);
    const rows = Object.fromEntries(phaseMetrics(kernels).map((r) => [r.label, r.value]));
    assert.equal(rows['Attention backend'], '_native_math');
    assert.match(rows['First call'] ?? '', /^\d+\.\d{3} s$/);
    assert.equal(rows['torch.compile'], undefined, 'not compiled: no compile time');
    const compiled: PhaseResult = { ...kernels, compileS: 42.12 };
    assert.equal(phaseMetrics(compiled).find((r) => r.label === 'torch.compile')?.value, '42.1 s');
  });
});

describe('tune: a live run whose phases the runtime chooses', () => {
  const request: VerificationRequest = {
    model: { source: 'tiny', family: 'skimage-dit' },
    outputDir: '/ws/.cdit/runs/r6',
    phases: [{ kind: 'baseline' }],
    tune: { budgetS: 900 },
  };

  it('replaying the captured events lists every grid point with its kind and verdict', () => {
    let live = pendingResult(request);
    assert.deepEqual(
      live.phases?.map((p) => p.name),
      ['baseline'],
    );
    for (const e of goldenLines('progress-tune.jsonl')) live = applyEvent(live, e as ProgressEvent);
    const expected = tuned();
    assert.equal(live.status, 'completed');
    assert.deepEqual(
      live.phases?.map((p) => [p.name, p.kind, p.status, p.verdict ?? null]),
      expected.phases?.map((p) => [p.name, p.kind, p.status, p.verdict ?? null]),
    );
  });

  it('the intermediate results.json brings the grid in its order; running phases stay live', () => {
    let live = pendingResult(request);
    live = applyEvent(live, { event: 'phase_started', time: 1, phase: 'baseline' });
    const disk = tuned();
    const partial: VerificationResult = {
      ...disk,
      status: 'running',
      tune: null,
      phases: (disk.phases ?? []).map((p) => ({ name: p.name, kind: p.kind, status: 'pending' })),
    };
    const merged = mergeLive(live, partial);
    assert.deepEqual(
      merged.phases?.map((p) => [p.name, p.kind, p.status]),
      (disk.phases ?? []).map((p) => [
        p.name,
        p.kind,
        p.name === 'baseline' ? 'running' : 'pending',
      ]),
    );
    // a phase the file does not list yet (stage 2) stays, after the file's
    const started = applyEvent(merged, {
      event: 'phase_started',
      time: 2,
      phase: 'tuned-native-compile-fn1-bn0-rdt0.3-ws4',
    });
    const again = mergeLive(started, partial);
    assert.equal(again.phases?.at(-1)?.name, 'tuned-native-compile-fn1-bn0-rdt0.3-ws4');
    assert.equal(again.phases?.at(-1)?.status, 'running');
    assert.equal(again.phases?.at(-1)?.kind, 'cache');
  });
});

describe('tune: the checklist', () => {
  /** The captured tune with one cache point made to fail its PSNR (an aggressive threshold). */
  function withFailingPoint(control: 'pass' | 'fail' = 'pass'): VerificationResult {
    const r = structuredClone(tuned());
    for (const p of r.phases ?? []) {
      if (p.name === 'cache-fn1-bn0-rdt0.3-ws4') {
        p.verdict = 'fail';
        p.verdictReason = 'PSNR 24.0 dB < 25.0';
      }
      if (p.name === 'cache-fn1-bn0-rdt0.08-ws4' && p.control) p.control.verdict = control;
    }
    return r;
  }
  const cacheItem = (results: VerificationResult[]) =>
    checklist({ results, overrides: [], cli: 'not-applicable' }).find(
      (i) => i.phase.id === 'cache',
    );

  it('the captured tune verifies the cache phase; kernels phases verify no checklist phase', () => {
    const item = cacheItem([tuned()]);
    assert.equal(item?.outcome, 'passed');
    assert.doesNotMatch(item?.detail ?? '', /kernels/);
  });

  it('a cache point that only failed its PSNR does not fail the cache phase of a tune', () => {
    assert.equal(cacheItem([withFailingPoint()])?.outcome, 'passed');
    // the same phases in an ordinary run do
    const plain = { ...withFailingPoint(), tune: null };
    assert.equal(cacheItem([plain])?.outcome, 'failed');
  });

  it('a failed no-cache control fails it, tune or not', () => {
    const item = cacheItem([withFailingPoint('fail')]);
    assert.equal(item?.outcome, 'failed');
    assert.match(item?.detail ?? '', /no-cache control failed/);
  });

  it('a tune where no cache point passed decides as any run', () => {
    const r = structuredClone(tuned());
    for (const p of r.phases ?? []) if (p.kind === 'cache') p.verdict = 'not_exercised';
    assert.equal(cacheItem([r])?.outcome, 'not-exercised');
  });
});

describe('tune: the detail view and the tree', () => {
  const run = (result: VerificationResult) => ({
    id: 'r5',
    result,
    outputDir: result.outputDir,
  });
  const state = (result: VerificationResult, phase: string): DetailState => {
    const s = detailState(
      run(result),
      phase,
      'cd /ws && python -m cdit_runtime verify r',
      (rel) => `vscode-resource:${rel}`,
    );
    assert.ok(!('missing' in s));
    return s;
  };

  it('a tune run shows its plot, points and recommendation on every phase', () => {
    const s = state(tuned(), 'kernels-_native_math');
    assert.equal(s.kind, 'kernels');
    assert.equal(s.kindLabel, 'kernels (attention backend / torch.compile)');
    const t = s.tune;
    assert.ok(t);
    assert.match(t.svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    assert.match(t.svg, /data-phase="kernels-_native_math"[^>]*>.*tp-current-ring/);
    assert.equal(t.recommended, 'cache-fn1-bn0-rdt0.3-ws4');
    assert.match(
      t.recommendation,
      /^cache-fn1-bn0-rdt0\.3-ws4: 1\.\d\d× over the baseline at PSNR 34\.03 dB, SSIM 0\.9795 \(DBCache Fn1 Bn0 rdt 0\.3 warmup 4\)$/,
    );
    assert.match(t.python, /DBCacheConfig\(/);
    assert.match(t.cli, /^cdit-integrate verify .* --rdt 0\.3 --ws 4$/);
    assert.deepEqual(
      t.rows.map((r) => [r.phase, r.front, r.verdict]),
      [
        ['baseline', 'front', 'reference'],
        ['kernels-_native_math', '', 'pass'],
        ['cache-fn1-bn0-rdt0.08-ws4', 'front', 'pass'],
        ['cache-fn1-bn0-rdt0.12-ws4', 'front', 'pass'],
        ['cache-fn1-bn0-rdt0.3-ws4', 'recommended', 'pass'],
      ],
    );
    const base = t.rows[0];
    assert.equal(base?.psnr, 'reference');
    assert.equal(t.rows[1]?.settings, '_native_math');
    assert.equal(t.rows[1]?.psnr, '150.03 dB');
    assert.equal(t.rows[4]?.cached, '17');
    assert.deepEqual(
      t.phases,
      (tuned().phases ?? []).map((p) => p.name),
    );
  });

  it('an ordinary run has no tune section', () => {
    const plain = readJson<VerificationResult>(path.join(FIXTURES, 'results', 'control-pass.json'));
    assert.equal(state(plain, 'cache').tune, null);
    assert.equal(tuneState(plain), null);
  });

  it('without a recommendation it says to keep the defaults', () => {
    const r = tuned();
    const t = tuneState({ ...r, tune: { ...r.tune, recommended: null, python: '', cli: '' } });
    assert.ok(t);
    assert.equal(t.recommended, null);
    assert.match(t.recommendation, /keep the defaults/);
    assert.ok(t.rows.every((row) => row.front !== 'recommended'));
  });

  it('a malformed tune section keeps its good points and drops the rest', () => {
    const report = parseTuneReport({
      points: [
        { phase: 'ok', latencyS: 1, psnrDb: 'inf' },
        { phase: 'bad', latencyS: 'fast' },
        { latencyS: 1 },
        'x',
      ],
      front: ['ok', 3],
      recommended: 7,
    });
    assert.deepEqual(
      report?.points?.map((p) => p.phase),
      ['ok'],
    );
    assert.deepEqual(report?.front, ['ok']);
    assert.equal(report?.recommended, null);
    assert.equal(parseTuneReport(null), null);
    assert.equal(parseTuneReport([1]), null);
  });

  it('the page may copy the snippet and the command line, and open only the run’s phases', () => {
    const phases = ['baseline', 'cache-fn1-bn0-rdt0.3-ws4'];
    assert.deepEqual(parseDetailMessage({ type: 'copy', text: 'tunePython' }), {
      type: 'copy',
      text: 'tunePython',
    });
    assert.deepEqual(parseDetailMessage({ type: 'copy', text: 'tuneCli' }), {
      type: 'copy',
      text: 'tuneCli',
    });
    assert.equal(parseDetailMessage({ type: 'copy', text: 'print("hi")' }), undefined);
    assert.deepEqual(parseDetailMessage({ type: 'openPhase', phase: 'baseline' }, phases), {
      type: 'openPhase',
      phase: 'baseline',
    });
    assert.equal(parseDetailMessage({ type: 'openPhase', phase: 'other' }, phases), undefined);
    assert.equal(parseDetailMessage({ type: 'openPhase', phase: 'baseline' }), undefined);
    assert.equal(parseDetailMessage({ type: 'openPhase', phase: 3 }, phases), undefined);
  });

  it('the tree names the recommendation with its numbers', () => {
    const report = tuned().tune;
    assert.ok(report);
    const summary = tuneSummary(report);
    assert.equal(summary.label, 'tune: recommended cache-fn1-bn0-rdt0.3-ws4');
    assert.match(summary.description, /^1\.\d\d× · PSNR 34\.03 dB · 5 points$/);
    const none = tuneSummary({ ...report, recommended: null, skipped: ['a', 'b'] });
    assert.deepEqual(none, {
      label: 'tune: no recommendation',
      description: '5 points · 2 skipped',
    });
  });

  it('what each point changes, in words', () => {
    assert.equal(
      tuneSettingsText({
        phase: 'x',
        attentionBackend: 'flash',
        compile: true,
        parallel: 'ulysses-2',
        cache: { fn: 1, bn: 0, residualDiffThreshold: 0.12, maxWarmupSteps: 8 },
      }),
      'flash · torch.compile · ulysses-2 · DBCache Fn1 Bn0 rdt 0.12 warmup 8',
    );
    assert.equal(tuneSettingsText({ phase: 'baseline', verdict: 'reference' }), 'defaults');
    const rows = tuneRows({ points: [{ phase: 'c', compileS: 61.04, status: 'failed' }] });
    assert.equal(rows[0]?.compile, '61.0 s');
    assert.equal(rows[0]?.verdict, 'failed');
  });
});
