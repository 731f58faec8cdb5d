/**
 * The TypeScript side reads the runtime's documents through the same JSON schema the Python side
 * generates (cdit_runtime/contract/verification.schema.json) and the same golden documents, captured from
 * real `python -m cdit_runtime verify` runs on CPU.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import Ajv2020 from 'ajv/dist/2020';
import { isProgressEvent, isVerificationResult, parseRunProgress } from '../../src/contract/guards';
import { buildRequest } from '../../src/runs/request';
import { RUN_PROGRESS, SERVER_COMMANDS } from '../../src/common/serverCommands';
import { EMPTY_ANSWERS } from '../../src/gatecheck/answers';
import type { VerificationResult } from '../../src/contract/verification';
import { FIXTURES, GOLDEN, ROOT, golden, goldenLines, readJson } from './helpers';

const schema = readJson<Record<string, unknown>>(
  path.join(ROOT, 'cdit_runtime', 'contract', 'verification.schema.json'),
);
const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addSchema(schema);
const id = schema.$id as string;

function validator(def: string): (doc: unknown) => string[] {
  const fn = ajv.getSchema(`${id}#/$defs/${def}`);
  assert.ok(fn, `no $defs/${def} in the schema`);
  return (doc) =>
    fn(doc) ? [] : (fn.errors ?? []).map((e) => `${e.instancePath} ${e.message ?? ''}`);
}

const results = fs
  .readdirSync(GOLDEN)
  .filter((f) => f.startsWith('result-') && f.endsWith('.json'));
const requests = fs
  .readdirSync(GOLDEN)
  .filter((f) => f.startsWith('request-') && f.endsWith('.json'));
const progress = fs
  .readdirSync(GOLDEN)
  .filter((f) => f.startsWith('progress-') && f.endsWith('.jsonl'));
// hand-written documents for the states no CPU run of the example produces (control failures,
// audio and latents-only outputs); they must follow the same schema
const RESULT_FIXTURES = path.join(FIXTURES, 'results');
const fixtureResults = fs.readdirSync(RESULT_FIXTURES).filter((f) => f.endsWith('.json'));

describe('contract: generated TypeScript types', () => {
  it('verification.ts and plan.ts are generated from the current schemas', () => {
    const r = spawnSync(
      process.execPath,
      [path.join(ROOT, 'extension', 'scripts', 'gen-contract.mjs'), '--check'],
      { encoding: 'utf8' },
    );
    assert.equal(r.status, 0, r.stderr);
  });

  it('has golden documents of every kind', () => {
    assert.ok(
      results.length >= 3 && requests.length >= 2 && progress.length >= 2,
      [...results, ...requests, ...progress].join(', '),
    );
  });
});

describe('contract: golden documents against the schema and the guards', () => {
  for (const file of results) {
    it(`${file} is a VerificationResult`, () => {
      const doc = golden(file);
      assert.deepEqual(validator('VerificationResult')(doc), []);
      assert.ok(isVerificationResult(doc));
    });
  }
  for (const file of fixtureResults) {
    it(`fixtures/results/${file} is a VerificationResult`, () => {
      const doc = readJson(path.join(RESULT_FIXTURES, file));
      assert.deepEqual(validator('VerificationResult')(doc), []);
      assert.ok(isVerificationResult(doc));
    });
  }
  it('the fixtures cover every verdict and output kind the UI tells apart', () => {
    const phases = fixtureResults.flatMap(
      (f) => readJson<VerificationResult>(path.join(RESULT_FIXTURES, f)).phases ?? [],
    );
    const verdicts = new Set(phases.map((p) => p.verdict));
    const kinds = new Set(phases.map((p) => p.outputKind));
    const controls = new Set(phases.map((p) => p.control?.verdict));
    for (const v of ['reference', 'pass', 'fail', 'not_exercised'] as const)
      assert.ok(verdicts.has(v), v);
    for (const k of ['image', 'audio', 'latents'] as const) assert.ok(kinds.has(k), k);
    assert.ok(controls.has('pass') && controls.has('fail'));
  });
  for (const file of requests) {
    it(`${file} is a VerificationRequest`, () => {
      assert.deepEqual(validator('VerificationRequest')(golden(file)), []);
    });
  }
  for (const file of progress) {
    it(`${file} holds ProgressEvents`, () => {
      const check = validator('ProgressEvent');
      for (const line of goldenLines(file)) {
        assert.deepEqual(check(line), []);
        assert.ok(isProgressEvent(line), JSON.stringify(line));
        assert.ok(parseRunProgress({ runId: 'run-1', event: line }));
      }
    });
  }

  it('the guards reject what the schema rejects', () => {
    const good = golden<Record<string, unknown>>('result-smoke-pass.json');
    const bad = [
      { ...good, status: 'exploded' },
      { ...good, phases: [{ name: 'x', kind: 'cache', status: 'ok', psnrDb: 'high' }] },
      { ...good, phases: 'none' },
    ];
    for (const doc of bad) {
      assert.notDeepEqual(validator('VerificationResult')(doc), []);
      assert.equal(isVerificationResult(doc), false);
    }
    assert.equal(parseRunProgress({ runId: 1, event: {} }), undefined);
    assert.equal(parseRunProgress({ runId: 'r', event: { event: 'nope', time: 1 } }), undefined);
  });

  it('reads the final run report', () => {
    const done = parseRunProgress({
      runId: 'r',
      done: true,
      exitCode: 0,
      cancelled: false,
      result: golden('result-smoke-pass.json'),
    });
    assert.ok(done && 'done' in done && done.result?.status === 'completed');
    const none = parseRunProgress({
      runId: 'r',
      done: true,
      exitCode: 1,
      cancelled: false,
      result: null,
      stderrTail: ['x', 3],
    });
    assert.ok(none && 'done' in none && none.result === null);
    assert.deepEqual(none && 'done' in none ? none.stderrTail : undefined, ['x']);
  });
});

describe('contract: requests the extension builds', () => {
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

  it('a CPU smoke run request matches the schema and the golden request', () => {
    const request = buildRequest(
      answers,
      { phases: [{ kind: 'cache' }], device: 'cpu', smoke: { steps: 4, height: 64, width: 64 } },
      '/ws',
      '/ws/.cdit/runs/r1',
    );
    assert.deepEqual(validator('VerificationRequest')(request), []);
    const expected = golden<Record<string, unknown>>('request-smoke.json');
    for (const key of [
      'model',
      'integration',
      'phases',
      'device',
      'dtype',
      'steps',
      'height',
      'width',
      'outputDir',
    ] as const) {
      assert.deepEqual((request as unknown as Record<string, unknown>)[key], expected[key], key);
    }
  });

  it('a GPU request has the pipeline sizes and a checkout integration', () => {
    const request = buildRequest(
      { ...answers, targetKind: 'cache-dit-checkout', targetPath: '/src/cache-dit' },
      {
        phases: [{ kind: 'cache' }, { kind: 'ulysses', size: 4 }],
        device: 'cuda',
        smoke: { steps: 4, height: 64, width: 64 },
      },
      '/ws',
      '/ws/.cdit/runs/r2',
    );
    assert.deepEqual(validator('VerificationRequest')(request), []);
    // the runtime resolves the dtype (bfloat16 on GPUs)
    assert.equal('dtype' in request, false);
    assert.equal(request.steps, undefined);
    assert.deepEqual(request.integration, { kind: 'cache-dit-checkout', path: '/src/cache-dit' });
    assert.deepEqual(
      request.phases?.map((p) => p.kind),
      ['baseline', 'cache', 'ulysses'],
    );
  });

  it('no dtype on CPU either unless one is set: the runtime picks float32 there', () => {
    const smoke = { steps: 4, height: 64, width: 64 };
    const cpu = buildRequest(answers, { phases: [], device: 'cpu', smoke }, '/ws', '/ws/o');
    assert.equal('dtype' in cpu, false);
    const chosen = buildRequest(
      answers,
      { phases: [], device: 'cpu', smoke, options: { dtype: 'bfloat16' } },
      '/ws',
      '/ws/o',
    );
    assert.equal(chosen.dtype, 'bfloat16');
    const empty = buildRequest(
      answers,
      { phases: [], device: 'cuda', smoke, options: { dtype: '', cache: {}, inputs: {} } },
      '/ws',
      '/ws/o',
    );
    assert.deepEqual(
      Object.keys(empty).filter((k) => ['dtype', 'cache', 'inputs', 'thresholds'].includes(k)),
      [],
    );
  });

  it('cache options, call arguments, file inputs and thresholds from the settings', () => {
    const request = buildRequest(
      answers,
      {
        phases: [{ kind: 'cache' }],
        device: 'cpu',
        smoke: { steps: 4, height: 64, width: 64 },
        options: {
          cache: { residualDiffThreshold: 2, maxWarmupSteps: 1, calibrateShare: 0.5 },
          callArgs: { num_frames: 9 },
          inputs: { image: 'inputs/cat.png', audio: '/data/voice.wav' },
          thresholds: { controlPsnrDbFloat32: 90, parallelPsnrDbFloat32: 70 },
        },
      },
      '/ws',
      '/ws/.cdit/runs/r4',
    );
    assert.deepEqual(validator('VerificationRequest')(request), []);
    assert.deepEqual(request.cache, {
      residualDiffThreshold: 2,
      maxWarmupSteps: 1,
      calibrateShare: 0.5,
    });
    assert.deepEqual(request.extraCallKwargs, { num_frames: 9 });
    assert.deepEqual(request.inputs, { image: '/ws/inputs/cat.png', audio: '/data/voice.wav' });
    assert.deepEqual(request.thresholds, { controlPsnrDbFloat32: 90, parallelPsnrDbFloat32: 70 });
  });

  it('only workspace files are imported as model sources', () => {
    const request = buildRequest(
      { ...answers, pipelineSource: '/usr/lib/python3/site-packages/diffusers/pipeline.py' },
      { phases: [], device: 'cpu', smoke: { steps: 2, height: 32, width: 32 } },
      '/ws',
      '/ws/.cdit/runs/r3',
    );
    assert.deepEqual(request.model.sourceFiles, ['/ws/models/demo_mmdit.py']);
  });
});

describe('contract: server command ids', () => {
  it('match lsp_server/features/commands.py and runs.py', () => {
    const commands = fs.readFileSync(
      path.join(ROOT, 'lsp_server', 'features', 'commands.py'),
      'utf8',
    );
    const defined = new Set(
      [...commands.matchAll(/^[A-Z_]+ = "(cdit\.[\w.]+)"$/gm)].map((m) => m[1]),
    );
    for (const id of Object.values(SERVER_COMMANDS))
      assert.ok(defined.has(id), `${id} is not a server command (${[...defined].join(', ')})`);
    const runs = fs.readFileSync(path.join(ROOT, 'lsp_server', 'features', 'runs.py'), 'utf8');
    assert.ok(runs.includes(`RUN_PROGRESS = "${RUN_PROGRESS}"`));
  });
});
