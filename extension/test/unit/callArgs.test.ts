/**
 * Pipeline call arguments (issue 17, item 1): stored with the gate-check answers, prefilled and
 * validated against the pipeline's `__call__` signature (the golden signatures are the analysis'
 * own output on real diffusers pipelines, kept current by tests/test_call_signature.py), merged
 * over the `cdit.callArgs` / `cdit.inputs` settings into every run's request.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import type { CallSignature } from '../../src/contract/analysis';
import { fromStored, toStored, type GateAnswers } from '../../src/gatecheck/answers';
import {
  INPUT_EXTENSIONS,
  RUNTIME_SUPPLIED,
  callHints,
  didYouMean,
  parseCallSignature,
  parseRunConfig,
  pickSignature,
  prefillRows,
  rowsFromRunConfig,
  rowsKey,
  runConfigFromRows,
  validateCallRows,
  type CallRows,
  type CallValidationDeps,
} from '../../src/gatecheck/callArgs';
import { buildRequest, mergeRunConfig, type RunChoice } from '../../src/runs/request';
import { parseGateMessage } from '../../src/webview/messages';
import { EMPTY_ANSWERS } from '../../src/gatecheck/answers';
import { FIXTURES, ROOT, readJson } from './helpers';

const GOLDEN = readJson<Record<string, unknown>>(path.join(FIXTURES, 'call-signatures.json'));

function sig(key: string): CallSignature {
  const parsed = parseCallSignature(GOLDEN[key]);
  assert.ok(parsed, `no signature ${key} in call-signatures.json`);
  return parsed;
}

const ANSWERS: GateAnswers = {
  localPath: 'tiny',
  pipelineClass: 'SanaVideoPipeline',
  transformerClass: 'SanaVideoTransformer3DModel',
  pipelineSource: 'pipelines/pipeline_sana_video.py',
  transformerSource: 'models/transformer_sana_video.py',
  targetKind: 'standalone',
  targetPath: 'sana_video_cdit.py',
  registerName: 'SanaVideo',
};

function deps(files: string[], dirs: string[] = []): CallValidationDeps {
  return {
    root: '/ws',
    kind: async (p) => (files.includes(p) ? 'file' : dirs.includes(p) ? 'dir' : undefined),
  };
}

const rows = (args: [string, string][] = [], inputs: [string, string][] = []): CallRows => ({
  args: args.map(([name, value]) => ({ name, value })),
  inputs: inputs.map(([name, p]) => ({ name, path: p })),
});

describe('call arguments: stored with the gate-check answers', () => {
  it('round-trip through .cdit/integration.json (input paths workspace-relative)', () => {
    const stored = toStored(
      {
        answers: ANSWERS,
        overrides: [],
        run: {
          callArgs: { frames: 9, use_resolution_binning: false, negative_prompt: 'blur' },
          inputs: { image: '/ws/inputs/cat.png', audio: '/elsewhere/a.wav' },
        },
      },
      '/ws',
    );
    assert.deepEqual(stored.run, {
      callArgs: { frames: 9, use_resolution_binning: false, negative_prompt: 'blur' },
      inputs: { image: 'inputs/cat.png', audio: '/elsewhere/a.wav' },
    });
    const back = fromStored(JSON.parse(JSON.stringify(stored)));
    assert.deepEqual(back.run, stored.run);
    assert.deepEqual(back.answers, ANSWERS);
  });

  it('are left out when empty, and malformed parts are dropped on load', () => {
    const stored = toStored(
      { answers: ANSWERS, overrides: [], run: { callArgs: {}, inputs: {} } },
      '/ws',
    );
    assert.equal('run' in stored, false);
    assert.equal(fromStored(stored).run, undefined);
    const back = fromStored({
      run: {
        callArgs: { ok: 1, 'not a name': 2, nested: { a: [1, null] } },
        inputs: { image: 'a.png', empty: ' ', num: 3 },
      },
    });
    assert.deepEqual(back.run, {
      callArgs: { ok: 1, nested: { a: [1, null] } },
      inputs: { image: 'a.png' },
    });
    assert.deepEqual(parseRunConfig('junk'), { callArgs: {}, inputs: {} });
  });

  it('rows are JSON text of the stored values and parse back', () => {
    const run = {
      callArgs: { frames: 9, flag: false, name: 'x', list: [1, 2] },
      inputs: { image: 'a.png' },
    };
    const r = rowsFromRunConfig(run);
    assert.deepEqual(r.args, [
      { name: 'frames', value: '9' },
      { name: 'flag', value: 'false' },
      { name: 'name', value: '"x"' },
      { name: 'list', value: '[1,2]' },
    ]);
    assert.deepEqual(
      runConfigFromRows(r, (p) => p),
      run,
    );
    assert.notEqual(rowsKey(r), rowsKey(rows([['frames', '9']])));
  });
});

describe('call arguments: the signature from the analysis', () => {
  it('picks the pipeline class from the analyze reply, else the analysis choice', () => {
    const report = GOLDEN.demoReport;
    assert.equal(pickSignature(report, 'DemoMMDiTPipeline')?.className, 'DemoMMDiTPipeline');
    assert.equal(pickSignature(report, '')?.className, 'DemoMMDiTPipeline');
    const two = {
      pipeline: { callSignature: GOLDEN.sanaVideo, otherCallSignatures: [GOLDEN.wanI2V] },
    };
    assert.equal(
      pickSignature(two, 'WanImageToVideoPipeline')?.className,
      'WanImageToVideoPipeline',
    );
    assert.equal(pickSignature(two, 'Other')?.className, 'SanaVideoPipeline');
    assert.equal(pickSignature({ pipeline: null }, 'X'), undefined);
    assert.equal(parseCallSignature({ className: 'X', parameters: [{ name: 1 }] }), undefined);
  });
});

describe('call arguments: prefill and hints', () => {
  it('a required file input without a default becomes a row; runtime-supplied ones do not', () => {
    const { rows: r, added } = prefillRows(rows(), sig('wanI2V'));
    assert.deepEqual(added, ['image']);
    assert.deepEqual(r, rows([], [['image', '']]));
    // prompt is required by the demo pipeline, but the runtime passes it
    const demo = pickSignature(GOLDEN.demoReport, '');
    assert.ok(demo?.required.includes('prompt'));
    assert.deepEqual(prefillRows(rows(), demo).added, []);
  });

  it('a required argument already given (rows or settings) is not added again', () => {
    assert.deepEqual(prefillRows(rows([], [['image', 'a.png']]), sig('wanI2V')).added, []);
    assert.deepEqual(
      prefillRows(rows(), sig('wanI2V'), { callArgs: {}, inputs: { image: 'a.png' } }).added,
      [],
    );
    const custom: CallSignature = {
      ...sig('sanaVideo'),
      parameters: [
        ...sig('sanaVideo').parameters,
        {
          name: 'seed_frames',
          kind: 'keyword_only',
          annotation: 'int',
          hasDefault: false,
          default: null,
          defaultText: null,
          defaultIsLiteral: false,
          required: true,
          role: 'frames',
          inputKind: null,
          line: 1,
        },
      ],
    };
    assert.deepEqual(prefillRows(rows(), custom).rows, rows([['seed_frames', '']]));
  });

  it('frames/resolution with their defaults and the use_resolution_binning switch as hints', () => {
    const hints = callHints(sig('sanaVideo'), rows());
    const by = Object.fromEntries(hints.map((h) => [h.name, h]));
    assert.equal(by.use_resolution_binning?.value, 'false');
    assert.match(by.use_resolution_binning?.reason ?? '', /Invalid sample size/);
    assert.equal(by.frames?.value, '81');
    assert.equal(by.frames?.role, 'frames');
    assert.match(by.height?.reason ?? '', /pipeline default 480.*smoke/);
    assert.equal(by.num_inference_steps, undefined); // steps come from cdit.smokeRun
    // given ones are not repeated
    const fewer = callHints(sig('sanaVideo'), rows([['frames', '9']]), {
      callArgs: { use_resolution_binning: false },
      inputs: {},
    });
    assert.deepEqual(fewer.map((h) => h.name).sort(), ['height', 'width']);
  });

  it('an audio pipeline: the duration with its default, the optional audio input', () => {
    const hints = callHints(sig('stableAudio'), rows());
    const by = Object.fromEntries(hints.map((h) => [h.name, h]));
    assert.equal(by.audio_end_in_s?.role, 'duration');
    assert.equal(by.audio_end_in_s?.value, ''); // default None: nothing to prefill
    assert.match(by.audio_end_in_s?.reason ?? '', /pipeline default null/);
    assert.equal(by.audio_start_in_s?.value, '0');
    assert.equal(by.initial_audio_waveforms?.kind, 'input');
  });
});

describe('call arguments: validation against the signature', () => {
  it('unknown names are errors with a "did you mean"', async () => {
    const v = await validateCallRows(
      rows([
        ['num_frames', '9'],
        ['frame', '9'],
        ['use_resolution_bining', 'false'],
      ]),
      sig('sanaVideo'),
      deps([]),
    );
    assert.equal(v.passed, false);
    assert.match(v.args[0]?.message ?? '', /no parameter num_frames.*did you mean frames\?/);
    assert.match(v.args[1]?.message ?? '', /did you mean frames\?/);
    assert.match(v.args[2]?.message ?? '', /did you mean use_resolution_binning\?/);
    assert.equal(didYouMean('guidance', ['guidance_scale', 'height']), 'guidance_scale');
    assert.equal(didYouMean('zzz', ['guidance_scale', 'height']), undefined);
  });

  it('with **kwargs any name is passed', async () => {
    const v = await validateCallRows(rows([['anything_goes', '1']]), sig('pixart'), deps([]));
    assert.equal(v.passed, true);
    assert.deepEqual(v.args[0], { status: 'ok', message: 'taken by **kwargs' });
  });

  it('values must be JSON; a bare word gets the quoted form', async () => {
    const v = await validateCallRows(
      rows([
        ['frames', '9'],
        ['negative_prompt', 'blurry'],
        ['max_sequence_length', ''],
        ['use_resolution_binning', 'False'],
      ]),
      sig('sanaVideo'),
      deps([]),
    );
    assert.deepEqual(v.args[0], { status: 'ok', message: '9 (pipeline default 81)' });
    assert.match(v.args[1]?.message ?? '', /not valid JSON.*"blurry"/);
    assert.match(v.args[2]?.message ?? '', /give a value for max_sequence_length/);
    assert.equal(v.args[3]?.status, 'error'); // Python's False is not JSON
    assert.equal(v.passed, false);
    const ok = await validateCallRows(
      rows([
        ['use_resolution_binning', 'false'],
        ['frames', '"9"'],
      ]),
      sig('sanaVideo'),
      deps([]),
    );
    assert.equal(ok.passed, true);
    assert.equal(ok.args[0]?.status, 'ok');
    assert.deepEqual(ok.args[1], { status: 'warning', message: 'frames is annotated int' });
  });

  it('required parameters must be given; names once; runtime-owned names refused', async () => {
    const missing = await validateCallRows(rows(), sig('wanI2V'), deps([]));
    assert.equal(missing.passed, false);
    assert.deepEqual(missing.general, [
      'image is required by WanImageToVideoPipeline.__call__ (no default): add it as a file input',
    ]);
    const fromSettings = await validateCallRows(rows(), sig('wanI2V'), deps(['/ws/a.png']), {
      callArgs: {},
      inputs: { image: 'a.png' },
    });
    assert.equal(fromSettings.passed, true);
    const twice = await validateCallRows(
      rows([['num_frames', '9']], [['num_frames', 'a.npy']]),
      sig('wanI2V'),
      deps(['/ws/a.npy']),
    );
    assert.match(twice.args[0]?.message ?? '', /given twice/);
    const owned = await validateCallRows(
      rows([
        ['num_inference_steps', '4'],
        ['height', '64'],
      ]),
      sig('wanI2V'),
      deps([]),
    );
    assert.match(owned.args[0]?.message ?? '', /set by the runtime/);
    assert.equal(owned.args[0]?.status, 'error');
    assert.equal(owned.args[1]?.status, 'warning'); // replaces the smoke-run height
  });

  it('file inputs must exist and be of a type the runtime loads', async () => {
    const v = await validateCallRows(
      rows(
        [],
        [
          ['image', 'inputs/cat.png'],
          ['last_image', 'missing.png'],
          ['image', 'x'],
        ],
      ),
      sig('wanI2V'),
      deps(['/ws/inputs/cat.png']),
    );
    assert.match(v.inputs[0]?.message ?? '', /given twice/);
    assert.match(v.inputs[1]?.message ?? '', /missing.png does not exist/);
    const types = await validateCallRows(
      rows(
        [],
        [
          ['image', 'inputs/cat.png'],
          ['last_image', 'inputs/notes.txt'],
        ],
      ),
      sig('wanI2V'),
      deps(['/ws/inputs/cat.png', '/ws/inputs/notes.txt']),
    );
    assert.deepEqual(types.inputs[0], { status: 'ok', message: 'loaded as image' });
    assert.match(types.inputs[1]?.message ?? '', /cannot load \.txt/);
    assert.equal(types.passed, false);
    const audio = await validateCallRows(
      rows([], [['initial_audio_waveforms', 'a.png']]),
      sig('stableAudio'),
      deps(['/ws/a.png']),
    );
    assert.equal(audio.inputs[0]?.status, 'warning');
    assert.match(audio.inputs[0]?.message ?? '', /looks like an audio input/);
  });

  it('without a signature only the form of the rows is checked', async () => {
    const v = await validateCallRows(
      rows([
        ['whatever', '1'],
        ['2bad', '1'],
      ]),
      undefined,
      deps([]),
    );
    assert.equal(v.args[0]?.status, 'ok');
    assert.match(v.args[1]?.message ?? '', /not a Python identifier/);
  });

  it('settings the pipeline does not take are reported, not blocking', async () => {
    const v = await validateCallRows(rows(), sig('sanaVideo'), deps([]), {
      callArgs: { num_frames: 9 },
      inputs: {},
    });
    assert.equal(v.passed, true);
    assert.deepEqual(v.warnings, [
      'cdit.callArgs gives num_frames, which SanaVideoPipeline.__call__ does not take (the runtime drops it)',
    ]);
  });
});

describe('call arguments: passed on every run', () => {
  it('the stored ones win over the settings per name, also across arguments and inputs', () => {
    const merged = mergeRunConfig(
      {
        callArgs: { num_frames: 9, frames: 5, image: 'x' },
        inputs: { mask: 'settings-mask.png', video: 'v.mp4' },
      },
      { callArgs: { frames: 17, video: [1] }, inputs: { image: 'stored.png' } },
    );
    assert.deepEqual(merged, {
      callArgs: { num_frames: 9, frames: 17, video: [1] },
      inputs: { mask: 'settings-mask.png', image: 'stored.png' },
    });
    assert.deepEqual(mergeRunConfig({ callArgs: { a: 1 }, inputs: {} }, undefined), {
      callArgs: { a: 1 },
      inputs: {},
    });
    assert.deepEqual(mergeRunConfig({}, undefined), { callArgs: {}, inputs: {} });
  });

  it('the merged values reach the request of every kind of run', () => {
    const merged = mergeRunConfig(
      { callArgs: { frames: 81 }, inputs: {} },
      { callArgs: { frames: 9, use_resolution_binning: false }, inputs: { image: 'in/cat.png' } },
    );
    const base: RunChoice = {
      phases: [{ kind: 'cache' }],
      device: 'cpu',
      smoke: { steps: 4, height: 64, width: 64 },
      options: merged,
    };
    const choices: RunChoice[] = [
      base,
      { ...base, phases: [{ kind: 'cache' }, { kind: 'ulysses', size: 2 }] },
      { ...base, device: 'cuda' },
      { ...base, phases: [], tune: { budgetS: 60, parallel: false } },
    ];
    for (const choice of choices) {
      const request = buildRequest(ANSWERS, choice, '/ws', '/ws/.cdit/runs/x');
      assert.deepEqual(request.extraCallKwargs, { frames: 9, use_resolution_binning: false });
      assert.deepEqual(request.inputs, { image: '/ws/in/cat.png' });
    }
  });
});

describe('gate check: webview messages carry their sequence number', () => {
  it('keeps a whole non-negative seq and drops any other', () => {
    const seq = (raw: unknown) =>
      (parseGateMessage({ type: 'edit', answers: EMPTY_ANSWERS, seq: raw }) as { seq?: number })
        .seq;
    assert.equal(seq(3), 3);
    assert.equal(seq(0), 0);
    assert.equal(seq(-1), undefined);
    assert.equal(seq(1.5), undefined);
    assert.equal(seq('2'), undefined);
  });
});

describe('call arguments: webview messages', () => {
  it('carry the rows, bounded; junk is dropped', () => {
    const call = rows([['frames', '9']], [['image', 'a.png']]);
    assert.deepEqual(parseGateMessage({ type: 'check', answers: EMPTY_ANSWERS, call }), {
      type: 'check',
      answers: EMPTY_ANSWERS,
      confirmed: [],
      call,
    });
    assert.equal(
      parseGateMessage({
        type: 'save',
        answers: EMPTY_ANSWERS,
        call: { args: [{ name: 1 }], inputs: [] },
      }),
      undefined,
    );
    const many = {
      args: Array.from({ length: 65 }, () => ({ name: 'a', value: '1' })),
      inputs: [],
    };
    assert.equal(parseGateMessage({ type: 'edit', answers: EMPTY_ANSWERS, call: many }), undefined);
    assert.deepEqual(parseGateMessage({ type: 'browseInput', index: 2 }), {
      type: 'browseInput',
      index: 2,
    });
    assert.equal(parseGateMessage({ type: 'browseInput', index: -1 }), undefined);
    assert.equal(parseGateMessage({ type: 'browseInput', index: 1.5 }), undefined);
  });
});

describe('call arguments: the runtime contract', () => {
  it('the names the runtime supplies are the ones it sets', () => {
    const controller = fs.readFileSync(path.join(ROOT, 'cdit_runtime', 'controller.py'), 'utf8');
    const worker = fs.readFileSync(path.join(ROOT, 'cdit_runtime', 'worker.py'), 'utf8');
    const settings = controller.slice(controller.indexOf('def _call_settings'));
    const call = worker.slice(worker.indexOf('def _call('));
    for (const [name, info] of Object.entries(RUNTIME_SUPPLIED)) {
      if (info.overwritten)
        assert.match(call, new RegExp(`kwargs\\["${name}"\\] =`), `${name} in worker _call`);
      else assert.ok(settings.includes(`"${name}"`), `${name} in controller _call_settings`);
    }
  });

  it("the input file types are the runtime loader's", () => {
    const inputs = fs.readFileSync(path.join(ROOT, 'cdit_runtime', 'inputs.py'), 'utf8');
    for (const [kind, list] of Object.entries(INPUT_EXTENSIONS)) {
      const line = inputs.match(new RegExp(`"${kind}": \\(([^)]*)\\)`));
      assert.ok(line, `${kind} in cdit_runtime/inputs.py EXTENSIONS`);
      assert.deepEqual(
        [...(line[1] ?? '').matchAll(/"(\.[a-z0-9]+)"/g)].map((m) => m[1]),
        [...list],
        kind,
      );
    }
  });
});
