/**
 * The integration checklist (pure): the phases in the order the integration guide requires
 * (cache → CLI → CP → TP → TE-P → VAE-P → hybrid), each with a status from the latest results,
 * and the gating rule: a phase is offered only when every earlier phase passed or was overridden.
 * A cache phase that cached no step, or a parallel phase that split or sharded nothing
 * (`not_exercised`), has not passed: it keeps later phases locked.
 * `kernels` phases (another attention backend / torch.compile on the plain pipeline) verify no
 * integration step, so no checklist phase counts them. In a `verify --tune` run, the cache points
 * that failed their PSNR or cached nothing only explored a setting: while another point of the
 * same checklist phase passed, they do not decide it (a failed no-cache control always does).
 */
import type { PhaseResult, PhaseSpec, VerificationResult } from '../contract/verification';

export type ChecklistPhaseId = 'cache' | 'cli' | 'cp' | 'tp' | 'tep' | 'vaep' | 'hybrid';

export interface ChecklistPhase {
  id: ChecklistPhaseId;
  label: string;
  /** runtime phase kinds that verify it (none: the CLI example is checked by generation) */
  kinds: readonly PhaseResult['kind'][];
}

export const CHECKLIST: readonly ChecklistPhase[] = [
  { id: 'cache', label: 'Cache (DBCache)', kinds: ['cache'] },
  { id: 'cli', label: 'CLI example', kinds: [] },
  { id: 'cp', label: 'Context parallelism (Ulysses / Ring)', kinds: ['ulysses', 'ring', 'uaa'] },
  { id: 'tp', label: 'Tensor parallelism', kinds: ['tp'] },
  { id: 'tep', label: 'Text-encoder parallelism (TE-P)', kinds: ['tp_tep'] },
  { id: 'vaep', label: 'VAE parallelism (VAE-P)', kinds: ['vae_p'] },
  { id: 'hybrid', label: 'Hybrid (CP × TP)', kinds: ['hybrid'] },
];

export function isChecklistPhaseId(value: unknown): value is ChecklistPhaseId {
  return typeof value === 'string' && CHECKLIST.some((p) => p.id === value);
}

export interface Override {
  phase: ChecklistPhaseId;
  reason: string;
  /** ISO time */
  at: string;
}

export type Outcome = 'passed' | 'failed' | 'not-exercised' | 'not-run' | 'not-applicable';
export type Gate = 'done' | 'available' | 'locked';

export interface ChecklistItem {
  phase: ChecklistPhase;
  outcome: Outcome;
  gate: Gate;
  /** one line: numbers of the deciding run, or why it is locked */
  detail: string;
  override?: Override;
  /** output dir of the run that decided the outcome */
  runOutputDir?: string;
}

export interface ChecklistInputs {
  /** newest first */
  results: readonly VerificationResult[];
  overrides: readonly Override[];
  /** the CLI example: generated (checkout target), or not applicable (standalone module) */
  cli: 'generated' | 'missing' | 'not-applicable';
}

/** A no-cache control that did not reproduce the baseline fails its phase, whatever the verdict. */
function controlFailed(p: PhaseResult): boolean {
  return p.control?.verdict === 'fail';
}

function phaseOk(p: PhaseResult): boolean {
  return p.status === 'ok' && (p.verdict === 'pass' || p.verdict === 'warn') && !controlFailed(p);
}

function phaseNotExercised(p: PhaseResult): boolean {
  return p.status === 'ok' && p.verdict === 'not_exercised' && !controlFailed(p);
}

function phaseFailed(p: PhaseResult): boolean {
  return (
    p.status === 'failed' ||
    p.status === 'timeout' ||
    (p.status === 'ok' && (p.verdict === 'fail' || p.verdict === 'garbled' || controlFailed(p)))
  );
}

function cachedText(p: PhaseResult): string {
  if (p.cachedSteps === null || p.cachedSteps === undefined) return 'cached no step';
  return `cached ${p.cachedSteps}${p.steps ? `/${p.steps}` : ''} steps`;
}

/**
 * A tune's point with DBCache settings that failed its PSNR or cached nothing: a setting the tune
 * tried, not a defect of the integration (its no-cache control, when it has one, still passed).
 */
function exploratory(result: VerificationResult, p: PhaseResult): boolean {
  if (!result.tune || p.status !== 'ok' || controlFailed(p)) return false;
  if (p.verdict !== 'fail' && p.verdict !== 'garbled' && p.verdict !== 'not_exercised')
    return false;
  const point = (result.tune.points ?? []).find((t) => t.phase === p.name);
  return p.kind === 'cache' || (point?.cache !== null && point?.cache !== undefined);
}

/** The outcome of a checklist phase in the newest run that ran one of its kinds. */
export function phaseOutcome(
  phase: ChecklistPhase,
  results: readonly VerificationResult[],
): { outcome: Outcome; detail: string; outputDir?: string } {
  for (const result of results) {
    const relevant = (result.phases ?? []).filter((p) => phase.kinds.includes(p.kind));
    // the generated integration declares this part absent (its NOT_GENERATED, with the reason):
    // nothing to verify, and later phases are not held back by it
    const absent = relevant.filter(
      (p) => p.status === 'skipped' && p.error?.code === 'NOT_GENERATED',
    );
    if (absent.length > 0 && absent.length === relevant.length) {
      const why = (absent[0] as PhaseResult).error?.message ?? '';
      return {
        outcome: 'not-applicable',
        detail: `not generated: ${why}`,
        outputDir: result.outputDir,
      };
    }
    let finished = relevant.filter((p) => phaseOk(p) || phaseFailed(p) || phaseNotExercised(p));
    if (finished.length === 0) continue;
    const decisive = finished.filter((p) => !exploratory(result, p));
    if (decisive.some(phaseOk)) finished = decisive;
    const failed = finished.filter(phaseFailed);
    if (failed.length > 0) {
      const f = failed[0] as PhaseResult;
      let why: string;
      if (f.error) why = `${f.error.code}: ${f.error.message}`;
      else if (controlFailed(f))
        why = `no-cache control failed: ${f.control?.reason || 'differs from the baseline'}`;
      else why = `${f.verdict ?? f.status}: ${f.verdictReason ?? ''}`;
      return { outcome: 'failed', detail: `${f.name} ${why}`.trim(), outputDir: result.outputDir };
    }
    const idle = finished.filter(phaseNotExercised);
    if (idle.length > 0) {
      const f = idle[0] as PhaseResult;
      return {
        outcome: 'not-exercised',
        detail:
          f.kind === 'cache' || f.name.endsWith('-cache')
            ? `${f.name} not exercised (${cachedText(f)}): lower the threshold or set cdit.cache.calibrateShare`
            : `${f.name} not exercised: ${f.verdictReason ?? 'the plan parallelized nothing'}`,
        outputDir: result.outputDir,
      };
    }
    const names = finished.map((p) => p.name).join(', ');
    return { outcome: 'passed', detail: `${names} passed`, outputDir: result.outputDir };
  }
  return { outcome: 'not-run', detail: 'not verified yet' };
}

export function checklist(inputs: ChecklistInputs): ChecklistItem[] {
  const items: ChecklistItem[] = [];
  let blockedBy: ChecklistPhase | undefined;
  for (const phase of CHECKLIST) {
    const override = [...inputs.overrides].reverse().find((o) => o.phase === phase.id);
    let outcome: Outcome;
    let detail: string;
    let runOutputDir: string | undefined;
    if (phase.id === 'cli') {
      outcome =
        inputs.cli === 'generated'
          ? 'passed'
          : inputs.cli === 'not-applicable'
            ? 'not-applicable'
            : 'not-run';
      detail =
        inputs.cli === 'generated'
          ? 'CLI example generated'
          : inputs.cli === 'not-applicable'
            ? 'not needed for a standalone module'
            : 'generate the integration into the cache-dit checkout';
    } else {
      const o = phaseOutcome(phase, inputs.results);
      outcome = o.outcome;
      detail = o.detail;
      runOutputDir = o.outputDir;
    }
    const satisfied = outcome === 'passed' || outcome === 'not-applicable';
    // A phase that already ran shows what its run found (one fact, one icon), never "locked":
    // the lock only keeps phases that have not run from being started out of order.
    const ran = outcome !== 'not-run';
    let gate: Gate;
    if (satisfied) gate = 'done';
    else if (!blockedBy || override || ran) gate = 'available';
    else gate = 'locked';
    if (gate === 'locked')
      detail = `locked until "${(blockedBy as ChecklistPhase).label}" passes (or override the gate)`;
    else if (override && blockedBy && !satisfied)
      detail = `gate overridden (${override.reason}) · ${detail}`;
    else if (blockedBy && !satisfied)
      detail = `${detail} · "${blockedBy.label}" has not passed yet`;
    items.push({
      phase,
      outcome,
      gate,
      detail,
      override: blockedBy && !satisfied ? override : undefined,
      runOutputDir,
    });
    if (!satisfied && !blockedBy) blockedBy = phase;
  }
  return items;
}

/** The icon of a checklist item (codicon id and theme colour): amber when not exercised. */
export function checklistIcon(item: ChecklistItem): { icon: string; color?: string } {
  if (item.outcome === 'passed') return { icon: 'pass-filled', color: 'testing.iconPassed' };
  if (item.outcome === 'not-applicable')
    return { icon: 'circle-slash', color: 'disabledForeground' };
  if (item.override) return { icon: 'unlock', color: 'list.warningForeground' };
  if (item.outcome === 'failed') return { icon: 'error', color: 'testing.iconFailed' };
  // run, but caching was not exercised: the same amber as in the results view
  if (item.outcome === 'not-exercised') return { icon: 'unverified', color: 'charts.orange' };
  if (item.gate === 'locked') return { icon: 'lock', color: 'disabledForeground' };
  return { icon: 'circle-large-outline' };
}

/** The runtime phases that verify a checklist phase with `gpus` devices (CPU: gloo, 2 ranks). */
/** What the approved plan decides about the phases to run. */
export interface PlanChoices {
  /** the plan chose Ulysses Anything (sequence lengths need not divide by the CP size) */
  ulyssesAnything?: boolean;
}

export function phaseSpecs(
  id: ChecklistPhaseId,
  gpus: number,
  cpu: boolean,
  plan: PlanChoices = {},
): PhaseSpec[] {
  const size = cpu ? 2 : Math.max(2, gpus);
  switch (id) {
    case 'cache':
      return [{ kind: 'cache' }];
    case 'cp':
      // the Ulysses phase runs as the plan generated it: UAA where the plan chose it
      return [
        { kind: plan.ulyssesAnything ? 'uaa' : 'ulysses', size },
        { kind: 'ring', size },
      ];
    case 'tp':
      return [{ kind: 'tp', size }];
    case 'tep':
      return [{ kind: 'tp_tep', size }];
    case 'vaep':
      return [{ kind: 'vae_p', size, vaeBase: 'tp' }];
    case 'hybrid': {
      const cp = 2;
      const tp = Math.max(2, Math.floor(Math.max(4, gpus) / cp));
      return [{ kind: 'hybrid', cpSize: cp, tpSize: tp }];
    }
    case 'cli':
      return [];
  }
}

/** The largest world size the phases need. */
export function worldSize(specs: readonly PhaseSpec[]): number {
  let most = 1;
  for (const s of specs) {
    if (s.kind === 'hybrid') most = Math.max(most, (s.cpSize ?? 2) * (s.tpSize ?? 2));
    else if (s.kind !== 'baseline' && s.kind !== 'kernels' && s.kind !== 'cache')
      most = Math.max(most, s.size ?? 2);
  }
  return most;
}
