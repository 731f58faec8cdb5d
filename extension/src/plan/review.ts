/**
 * The plan review (pure): the integration guide's TODO template filled in from the plan and the
 * analysis, with the evidence behind each decision, the choices the user may change (only where
 * the analysis offers alternatives, plus the on/off decisions) and the approval record.
 */
import type {
  AnalysisReport,
  Evidence,
  IntegrationPlan,
  PlanBlockList,
  TransformerAnalysis,
} from '../contract/analysis';
import { FORWARD_PATTERNS } from '../contract/analysis';
import { isRecord } from '../contract/guards';

export interface PlanChoices {
  /** block-list attr -> ForwardPattern */
  forwardPatterns: Record<string, string>;
  hasSeparateCfg: boolean;
  patchFunctor: boolean;
  cpEnabled: boolean;
  ulyssesAnything: boolean;
  tpEnabled: boolean;
  tpStrategy: string;
}

export interface ReviewItem {
  text: string;
  evidence: Evidence[];
  severity?: 'error' | 'warning' | 'info';
}

export interface ReviewBlockList {
  attr: string;
  blockClass: string;
  pattern: string;
  /** patterns the user may pick (the analysis' choice first); one entry: nothing to choose */
  options: string[];
  confidence: number;
  blockCount?: number | null;
  evidence: Evidence[];
}

export interface ReviewModel {
  /**
   * Known causes of a failed run, found before anything runs (e.g. a registered adapter that
   * `cache_dit.enable_cache(pipe)` would apply instead of this integration): shown first.
   */
  blockers: ReviewItem[];
  transformerClass: string;
  registerName: string;
  target: string;
  blockLists: ReviewBlockList[];
  patchFunctor: { needed: boolean; reasons: ReviewItem[] };
  separateCfg: { value: boolean | null; evidence: Evidence[] };
  cp: {
    approach: string;
    hooks: string[];
    maskNote: string;
    uaaRecommended: boolean;
    warnings: ReviewItem[];
    patches: string[];
  };
  tp: {
    strategy: string;
    strategies: string[];
    reasons: string[];
    layers: [string, string][];
    shardDivAttrs: string[];
    warnings: ReviewItem[];
  };
  components: string[];
  files: { path: string; created: boolean }[];
  generatorNotes: string[];
  choices: PlanChoices;
  /** every path the view may open (evidence links are checked against it) */
  linkTargets: string[];
}

/**
 * The plan's own decisions as choices. `has_separate_cfg` comes from the analysis when it read the
 * pipeline (the plan assumes False when it was built without one).
 */
export function defaultChoices(plan: IntegrationPlan, analysis?: TransformerAnalysis): PlanChoices {
  const forwardPatterns: Record<string, string> = {};
  for (const b of plan.cache.blockLists ?? []) forwardPatterns[b.attr] = b.forwardPattern;
  const separate = analysis?.separateCfg.value;
  return {
    forwardPatterns,
    hasSeparateCfg: typeof separate === 'boolean' ? separate : (plan.cache.hasSeparateCfg ?? false),
    patchFunctor: plan.cache.patchFunctor?.enabled ?? false,
    cpEnabled: plan.contextParallel?.enabled ?? false,
    ulyssesAnything: plan.contextParallel?.ulyssesAnything ?? false,
    tpEnabled: plan.tensorParallel?.enabled ?? false,
    tpStrategy: plan.tensorParallel?.attentionStrategy ?? '',
  };
}

/** The plan with the user's choices applied (a copy). */
export function applyChoices(plan: IntegrationPlan, choices: PlanChoices): IntegrationPlan {
  const out = JSON.parse(JSON.stringify(plan)) as IntegrationPlan;
  for (const b of out.cache.blockLists ?? []) {
    const chosen = choices.forwardPatterns[b.attr];
    if (chosen && (FORWARD_PATTERNS as readonly string[]).includes(chosen))
      b.forwardPattern = chosen as PlanBlockList['forwardPattern'];
  }
  out.cache.hasSeparateCfg = choices.hasSeparateCfg;
  out.cache.patchFunctor = { ...(out.cache.patchFunctor ?? {}), enabled: choices.patchFunctor };
  out.contextParallel = {
    ...(out.contextParallel ?? {}),
    enabled: choices.cpEnabled,
    ulyssesAnything: choices.ulyssesAnything,
  };
  out.tensorParallel = { ...(out.tensorParallel ?? {}), enabled: choices.tpEnabled };
  return out;
}

/** The answers `cdit.buildPlan` reads for the choices it decides (CP/TP on/off, UAA, strategy). */
export function answersWithChoices(
  answers: Record<string, unknown>,
  choices: PlanChoices | undefined,
): Record<string, unknown> {
  if (!choices) return answers;
  return {
    ...answers,
    contextParallel: { enabled: choices.cpEnabled, ulyssesAnything: choices.ulyssesAnything },
    tensorParallel: {
      enabled: choices.tpEnabled,
      ...(choices.tpStrategy ? { strategy: choices.tpStrategy } : {}),
    },
  };
}

function cpHookText(key: string, value: unknown): string[] {
  const where = key === '' ? 'forward (root)' : key;
  if (!isRecord(value)) return [`${where}: ${JSON.stringify(value)}`];
  if (typeof value.gather_dim === 'number') {
    return [
      `${where}: gather output on dim ${value.gather_dim}${typeof value.reason === 'string' ? ` — ${value.reason}` : ''}`,
    ];
  }
  const out: string[] = [];
  for (const [input, spec] of Object.entries(value)) {
    const specs = Array.isArray(spec) ? spec : [spec];
    for (const s of specs) {
      if (!isRecord(s)) continue;
      const dims = typeof s.expected_dims === 'number' ? `, expected_dims ${s.expected_dims}` : '';
      const output = s.split_output === true ? ', split_output' : '';
      const reason = typeof s.reason === 'string' ? ` — ${s.reason}` : '';
      out.push(`${where}: split ${input} on dim ${String(s.split_dim)}${dims}${output}${reason}`);
    }
  }
  return out;
}

export function reviewModel(
  plan: IntegrationPlan,
  analysis: AnalysisReport,
  dryRun:
    | { files?: { path: string; created: boolean }[]; review?: string[]; warnings?: string[] }
    | undefined,
  choices: PlanChoices,
): ReviewModel {
  const t: TransformerAnalysis | undefined = analysis.transformers.find(
    (x) => x.className === plan.model.transformerClass,
  );
  const sourcePath = analysis.source.path;
  const withPath = (e: Evidence): Evidence => ({ ...e, path: e.path || sourcePath });
  const blockLists: ReviewBlockList[] = (plan.cache.blockLists ?? []).map((b) => {
    const a = t?.blockLists.find((x) => x.attr === b.attr);
    const analysed = a?.forwardPattern ?? b.forwardPattern;
    const options = [analysed, ...(a?.alternatives ?? [])].filter(
      (p, i, all) => all.indexOf(p) === i,
    );
    if (!options.includes(b.forwardPattern)) options.unshift(b.forwardPattern);
    return {
      attr: b.attr,
      blockClass: b.blockClass ?? a?.blockClass ?? '?',
      pattern: choices.forwardPatterns[b.attr] ?? b.forwardPattern,
      options,
      confidence: a?.confidence ?? 1,
      blockCount: a?.blockCount,
      evidence: (a?.evidence ?? []).map(withPath),
    };
  });
  const patchReasons: ReviewItem[] = (t?.patchFunctor.reasons ?? [])
    .filter((r) => r.active !== false)
    .map((r) => ({
      text: `${r.kind}: ${r.message}`,
      evidence: [{ message: r.message, path: r.path ?? sourcePath, line: r.line }],
    }));
  const cpPlan = plan.contextParallel?.plan ?? t?.contextParallel.plan ?? {};
  const hooks = Object.entries(cpPlan).flatMap(([k, v]) => cpHookText(k, v));
  const mask = t?.contextParallel.attentionMask;
  const maskNote = !mask
    ? 'unknown'
    : mask.present
      ? `attention mask present${mask.reorderNeeded ? ' — needs reordering into all-to-all order' : ''}`
      : 'no attention mask';
  const diag = (d: {
    severity: 'error' | 'warning' | 'info';
    code: string;
    message: string;
    path: string;
    line: number;
  }): ReviewItem => ({
    text: `${d.code}: ${d.message}`,
    severity: d.severity,
    evidence: [withPath(d)],
  });
  const strategies = [
    plan.tensorParallel?.attentionStrategy ?? t?.tensorParallel.attentionStrategy ?? '',
    ...Object.keys(t?.tensorParallel.alternatives ?? {}),
  ].filter((s, i, all) => s !== '' && all.indexOf(s) === i);
  const components: string[] = [];
  for (const c of plan.components ?? [])
    components.push(
      `${c.kind === 'vae' ? 'VAE-P' : 'TE-P'}: ${c.component} (${c.class}) — ${c.generate ? 'planner generated' : 'not supported, left out'}`,
    );
  const support = t?.tensorParallel.components;
  for (const e of support?.textEncoders ?? [])
    if (e.supported) components.push(`TE-P: ${e.component} (${e.class}) — supported by cache-dit`);
  for (const e of support?.vaes ?? [])
    if (e.supported) components.push(`VAE-P: ${e.component} (${e.class}) — supported by cache-dit`);
  const target =
    plan.target.kind === 'standalone'
      ? `standalone module ${plan.target.path}`
      : `cache-dit checkout ${plan.target.root}`;
  const model: ReviewModel = {
    blockers: planBlockers(plan, t),
    transformerClass: plan.model.transformerClass,
    registerName: plan.registerName,
    target,
    blockLists,
    patchFunctor: { needed: t?.patchFunctor.needed ?? false, reasons: patchReasons },
    separateCfg: {
      value: t?.separateCfg.value ?? null,
      evidence: (t?.separateCfg.evidence ?? []).map(withPath),
    },
    cp: {
      approach: plan.contextParallel?.approach ?? t?.contextParallel.approach ?? 'none',
      hooks,
      maskNote,
      uaaRecommended: t?.contextParallel.uaaRecommended ?? false,
      warnings: (t?.contextParallel.warnings ?? []).map(diag),
      patches: plan.contextParallel?.patches ?? [],
    },
    tp: {
      strategy: choices.tpStrategy || (plan.tensorParallel?.attentionStrategy ?? ''),
      strategies,
      reasons: t?.tensorParallel.strategyReasons ?? [],
      layers: Object.entries(plan.tensorParallel?.layers ?? {}).sort(([a], [b]) =>
        a.localeCompare(b),
      ),
      shardDivAttrs: plan.tensorParallel?.shardDivAttrs ?? [],
      warnings: (t?.tensorParallel.warnings ?? []).map(diag),
    },
    components,
    files: dryRun?.files ?? [],
    generatorNotes: [...(dryRun?.review ?? []), ...(dryRun?.warnings ?? [])],
    choices,
    linkTargets: [],
  };
  const targets = new Set<string>([sourcePath]);
  const collect = (items: { evidence: Evidence[] }[]): void => {
    for (const i of items) for (const e of i.evidence) targets.add(e.path);
  };
  collect(blockLists);
  collect(patchReasons);
  collect([{ evidence: model.separateCfg.evidence }]);
  collect(model.cp.warnings);
  collect(model.tp.warnings);
  collect(model.blockers);
  for (const f of model.files) targets.add(f.path);
  model.linkTargets = [...targets];
  return model;
}

/**
 * What the analysis already knows will fail with this plan. For the cache-dit checkout target the
 * registry decides which adapter `cache_dit.enable_cache(pipe)` applies: a registered adapter that
 * prefixes both classes takes precedence over any name this plan registers (the analysis' CDIT202
 * / `checkoutNameReason`), so the cache phase would fail on that adapter's assertion.
 */
export function planBlockers(
  plan: IntegrationPlan,
  t: TransformerAnalysis | undefined,
): ReviewItem[] {
  const out: ReviewItem[] = [];
  if (plan.target.kind !== 'cache-dit-checkout' || !t?.registry) return out;
  const registry = t.registry;
  const at = (code: string): Evidence[] =>
    t.diagnostics
      .filter((d) => d.code === code)
      .slice(0, 1)
      .map((d) => ({ message: d.message, path: d.path, line: d.line }));
  if (registry.checkoutName === null && registry.checkoutNameReason)
    out.push({
      text: `Register name: ${registry.checkoutNameReason}`,
      severity: 'error',
      evidence: at('CDIT201'),
    });
  for (const warning of registry.warnings ?? [])
    out.push({
      text: `cache-dit registry (CDIT202): ${warning}`,
      severity: 'error',
      evidence: at('CDIT202'),
    });
  return out;
}

export interface Approval {
  approvedAt: string;
  analysisSha256: string | null;
  /** a digest of the gate-check answers the plan was built from */
  answersDigest: string;
  choices: PlanChoices;
}

/** The approved plan: the approval recorded in `provenance.approval` (the schema keeps it free-form). */
export function approvedPlan(plan: IntegrationPlan, approval: Approval): IntegrationPlan {
  return { ...plan, provenance: { ...(plan.provenance ?? {}), approval } };
}

export function readApproval(plan: unknown): Approval | undefined {
  if (!isRecord(plan) || !isRecord(plan.provenance) || !isRecord(plan.provenance.approval))
    return undefined;
  const a = plan.provenance.approval;
  if (
    typeof a.approvedAt !== 'string' ||
    typeof a.answersDigest !== 'string' ||
    !isRecord(a.choices)
  )
    return undefined;
  return a as unknown as Approval;
}

/** Why an approved plan no longer fits (the transformer changed, or the answers did), or undefined. */
export function staleReason(
  approval: Approval,
  currentSha: string | undefined,
  answersDigest: string,
): string | undefined {
  if (approval.answersDigest !== answersDigest)
    return 'the gate-check answers changed since the plan was approved';
  if (currentSha && approval.analysisSha256 && approval.analysisSha256 !== currentSha) {
    return 'the transformer source changed since the plan was approved';
  }
  return undefined;
}
