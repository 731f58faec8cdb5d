import assert from 'node:assert/strict';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import type { AnalysisReport, IntegrationPlan } from '../../src/contract/analysis';
import {
  answersWithChoices,
  applyChoices,
  approvedPlan,
  defaultChoices,
  readApproval,
  reviewModel,
  staleReason,
} from '../../src/plan/review';
import { FIXTURES, readJson } from './helpers';

const analysis = readJson<AnalysisReport>(path.join(FIXTURES, 'analysis-demo.json'));
const plan = readJson<IntegrationPlan>(path.join(FIXTURES, 'plan-demo.json'));
const transformer = analysis.transformers[0];

describe('plan review', () => {
  it('fills the TODO template from the plan and the analysis, with evidence', () => {
    const choices = defaultChoices(plan, transformer);
    const m = reviewModel(
      plan,
      analysis,
      {
        files: [{ path: '/ws/demo_mmdit_cdit.py', created: true }],
        review: ['patch JointAttnProcessor2_0'],
      },
      choices,
    );
    assert.deepEqual(
      m.blockLists.map((b) => [b.attr, b.pattern, b.options]),
      [
        ['transformer_blocks', 'Pattern_1', ['Pattern_1']],
        ['single_transformer_blocks', 'Pattern_3', ['Pattern_3']],
      ],
    );
    assert.ok((m.blockLists[0]?.evidence.length ?? 0) > 0);
    assert.equal(m.separateCfg.value, true);
    assert.equal(m.cp.approach, 'root_split');
    assert.ok(m.cp.hooks.some((h) => h.startsWith('forward (root): split hidden_states on dim 1')));
    assert.ok(m.cp.hooks.some((h) => h.startsWith('proj_out: gather output on dim 1')));
    assert.ok(m.cp.warnings.some((w) => w.text.startsWith('CDIT212')));
    assert.equal(m.tp.strategy, 'mha');
    assert.ok(m.tp.layers.length > 10);
    assert.deepEqual(m.files, [{ path: '/ws/demo_mmdit_cdit.py', created: true }]);
    assert.ok(m.linkTargets.includes('/ws/models/demo_mmdit.py'));
    assert.ok(m.linkTargets.includes('/ws/pipelines/demo_mmdit_pipeline.py'));
  });

  it('offers the analysis alternatives for a pattern', () => {
    const a = JSON.parse(JSON.stringify(analysis)) as AnalysisReport;
    const b0 = a.transformers[0]?.blockLists[0];
    if (b0) b0.alternatives = ['Pattern_0'];
    const m = reviewModel(plan, a, undefined, defaultChoices(plan));
    assert.deepEqual(m.blockLists[0]?.options, ['Pattern_1', 'Pattern_0']);
  });

  it('has_separate_cfg follows the analysis of the pipeline', () => {
    const noCfg = { ...plan, cache: { ...plan.cache, hasSeparateCfg: false } };
    assert.equal(defaultChoices(noCfg, transformer).hasSeparateCfg, true);
    assert.equal(defaultChoices(noCfg).hasSeparateCfg, false);
  });

  it('applies the user choices to a copy of the plan', () => {
    const choices = {
      ...defaultChoices(plan, transformer),
      forwardPatterns: { transformer_blocks: 'Pattern_0', single_transformer_blocks: 'Pattern_3' },
      tpEnabled: false,
      hasSeparateCfg: false,
    };
    const edited = applyChoices(plan, choices);
    assert.equal(edited.cache.blockLists?.[0]?.forwardPattern, 'Pattern_0');
    assert.equal(edited.cache.hasSeparateCfg, false);
    assert.equal(edited.tensorParallel?.enabled, false);
    assert.equal(
      plan.cache.blockLists?.[0]?.forwardPattern,
      'Pattern_1',
      'the original is untouched',
    );
    const answers = answersWithChoices({ registerName: 'X' }, choices);
    assert.deepEqual(answers.tensorParallel, { enabled: false, strategy: 'mha' });
  });

  it('records the approval with the plan and notices when it goes stale', () => {
    const approval = {
      approvedAt: '2026-11-29T20:00:00Z',
      analysisSha256: analysis.source.sha256,
      answersDigest: 'abc',
      choices: defaultChoices(plan),
    };
    const stored = approvedPlan(plan, approval);
    assert.deepEqual(readApproval(JSON.parse(JSON.stringify(stored))), approval);
    assert.equal(
      (stored.provenance as Record<string, unknown>).analysisPath,
      (plan.provenance as Record<string, unknown>).analysisPath,
    );
    assert.equal(staleReason(approval, analysis.source.sha256, 'abc'), undefined);
    assert.match(staleReason(approval, 'other', 'abc') ?? '', /transformer source changed/);
    assert.match(staleReason(approval, analysis.source.sha256, 'xyz') ?? '', /answers changed/);
    assert.equal(readApproval(plan), undefined);
  });
});
