/**
 * Why a phase failed, in plain words, and what to do next (pure). Every runtime error code and
 * every failing verdict maps to a cause; the next step is an action id from a fixed list (the
 * detail view asks the extension to run it by id, never by a command name from the page).
 */
import type { ErrorInfo, PhaseResult } from '../contract/verification';

export type NextAction =
  | 'openGateCheck'
  | 'reviewPlan'
  | 'openLogs'
  | 'cacheSettings'
  | 'calibrateCache'
  | 'runSettings'
  | 'tuneSettings'
  | 'verifyOnGpus';

export const NEXT_ACTIONS: readonly NextAction[] = [
  'openGateCheck',
  'reviewPlan',
  'openLogs',
  'cacheSettings',
  'calibrateCache',
  'runSettings',
  'tuneSettings',
  'verifyOnGpus',
];

export interface Cause {
  /** one line: what went wrong */
  title: string;
  /** the runtime's explanation (hint), or ours for a verdict */
  explanation: string;
  next?: { label: string; action: NextAction };
}

/** The share of the steps `calibrateCache` asks the threshold calibration to cache. */
export const CALIBRATED_SHARE = 0.5;

/**
 * The workspace's cdit.cache after the `calibrateCache` next step: a threshold calibrated to cache
 * CALIBRATED_SHARE of the steps and at most one warmup step; every other option is kept.
 */
export function calibratedCacheSettings(current: unknown): Record<string, unknown> {
  const base =
    current && typeof current === 'object' && !Array.isArray(current)
      ? { ...(current as Record<string, unknown>) }
      : {};
  delete base.residualDiffThreshold; // the calibration chooses it
  const warmup = base.maxWarmupSteps;
  return {
    ...base,
    calibrateShare: CALIBRATED_SHARE,
    maxWarmupSteps: typeof warmup === 'number' && warmup >= 0 && warmup <= 1 ? warmup : 1,
  };
}

const BY_CODE: Record<string, Omit<Cause, 'explanation'>> = {
  PIPELINE_CALL: {
    title: 'The pipeline rejected its call arguments',
    next: { label: 'Edit the pipeline call arguments', action: 'openGateCheck' },
  },
  SOURCE_IMPORT: {
    title: 'A model source file could not be imported',
    next: { label: 'Open the gate check (use the installed module)', action: 'openGateCheck' },
  },
  REGISTERED_ADAPTER: {
    title: "cache-dit applied another model's registered adapter",
    next: { label: 'Review the plan (choose the standalone target)', action: 'reviewPlan' },
  },
  INTEGRATION: {
    title: 'The integration did not apply',
    next: { label: 'Review the plan', action: 'reviewPlan' },
  },
  NOT_GENERATED: {
    title: 'The integration does not provide this part',
    next: { label: 'Review the plan', action: 'reviewPlan' },
  },
  MODEL_LOAD: {
    title: 'The model could not be loaded',
    next: { label: 'Check the model folder and classes', action: 'openGateCheck' },
  },
  NO_MODEL_INDEX: {
    title: 'The model folder has no model_index.json',
    next: { label: 'Choose the model folder', action: 'openGateCheck' },
  },
  BAD_INPUT: {
    title: 'A file input could not be read',
    next: { label: 'Edit the pipeline call arguments', action: 'openGateCheck' },
  },
  BAD_REQUEST: {
    title: 'The run request is invalid',
    next: { label: 'Open the run settings', action: 'runSettings' },
  },
  CACHE_OPTIONS: {
    title: 'The DBCache settings do not fit the model',
    next: { label: 'Open the cache settings', action: 'cacheSettings' },
  },
  OOM: {
    title: 'Out of memory',
    next: { label: 'Open the run settings (sizes)', action: 'runSettings' },
  },
  TIMEOUT: {
    title: 'The phase ran past its timeout',
    next: { label: 'Open the run settings', action: 'runSettings' },
  },
  BUDGET: {
    title: "The tune's time box was spent",
    next: { label: 'Open the tune settings', action: 'tuneSettings' },
  },
  MISSING_GPUS: {
    title: 'Not enough GPUs for this phase',
    next: { label: 'Verify on GPUs', action: 'verifyOnGpus' },
  },
  WORLD_TOO_SMALL: {
    title: 'This phase needs more processes',
    next: { label: 'Verify on GPUs', action: 'verifyOnGpus' },
  },
  NEEDS_ACCELERATOR: {
    title: 'This step has no CPU implementation',
    next: { label: 'Verify on GPUs', action: 'verifyOnGpus' },
  },
  UAA_UNEVEN_GLOO: {
    title: 'Uneven UAA shards cannot be gathered on CPU',
    next: { label: 'Verify on GPUs', action: 'verifyOnGpus' },
  },
  DIST_INIT: {
    title: 'The process group did not start',
    next: { label: 'Open the rank logs', action: 'openLogs' },
  },
  RENDEZVOUS: {
    title: 'The nodes did not meet',
    next: { label: 'Open the rank logs', action: 'openLogs' },
  },
  WORKER_DIED: {
    title: 'A worker process ended abruptly',
    next: { label: 'Open the rank logs', action: 'openLogs' },
  },
  CANCELLED: { title: 'The run was cancelled' },
  PHASE_FAILED: {
    title: 'The phase raised an error',
    next: { label: 'Open the rank logs', action: 'openLogs' },
  },
};

/** The error codes with a cause of their own (every code the runtime documents). */
export const CAUSE_CODES: readonly string[] = Object.keys(BY_CODE);

const FALLBACK: Omit<Cause, 'explanation'> = {
  title: 'The phase raised an error',
  next: { label: 'Open the rank logs', action: 'openLogs' },
};

/** The cause of an error the runtime reported (a code it does not know reads as a phase error). */
export function causeOfError(error: Pick<ErrorInfo, 'code' | 'message' | 'hint'>): Cause {
  const known = BY_CODE[error.code] ?? FALLBACK;
  return { ...known, explanation: error.hint ?? '' };
}

const PARALLEL = new Set(['ulysses', 'ring', 'uaa', 'tp', 'tp_tep', 'vae_p', 'hybrid']);

/** The cause of a phase that ran and did not pass (undefined: it passed, or it did not run). */
export function causeOfVerdict(phase: PhaseResult): Cause | undefined {
  if (phase.status !== 'ok') return undefined;
  const verdict = phase.verdict;
  if (verdict === 'not_exercised') {
    if (phase.kind === 'vae_p')
      return {
        title: 'VAE-P had nothing to split',
        explanation:
          'The image is below the VAE tile size, so the tiled decode equals the untiled one. ' +
          'Verify at a larger resolution.',
        next: { label: 'Open the run settings (sizes)', action: 'runSettings' },
      };
    return {
      title: 'No step was cached, so caching was not verified',
      explanation:
        'Every residual diff stayed above the threshold, or the warmup covered the run. On random ' +
        'weights use a calibrated threshold (calibrateShare) or the bundled trained model; lower ' +
        'maxWarmupSteps below the number of steps.',
      next: {
        label: `Calibrate to cache ${CALIBRATED_SHARE * 100}% of the steps and run again`,
        action: 'calibrateCache',
      },
    };
  }
  if (verdict !== 'fail' && verdict !== 'garbled' && verdict !== 'warn') return undefined;
  if (phase.control && phase.control.verdict === 'fail')
    return {
      title: 'The integration changes the math (its no-cache control differs from the baseline)',
      explanation:
        `${phase.control.reason} With caching disabled the integration must reproduce the ` +
        'baseline: check the ForwardPattern, the PatchFunctor and has_separate_cfg in the plan.',
      next: { label: 'Review the plan', action: 'reviewPlan' },
    };
  if (verdict === 'warn')
    return {
      title: 'Caching costs more quality than the pass threshold allows',
      explanation: `${phase.verdictReason ?? ''} Lower the residual-diff threshold or raise Fn.`,
      next: { label: 'Open the cache settings', action: 'cacheSettings' },
    };
  if (phase.kind === 'cache' || phase.kind === 'kernels')
    return {
      title:
        phase.kind === 'cache'
          ? 'The cached output is too far from the baseline'
          : 'Other kernels changed the output beyond the threshold',
      explanation: phase.verdictReason ?? '',
      next:
        phase.kind === 'cache'
          ? { label: 'Open the cache settings', action: 'cacheSettings' }
          : undefined,
    };
  if (PARALLEL.has(phase.kind))
    return {
      title: 'The parallel plan does not reproduce the baseline',
      explanation:
        `${phase.verdictReason ?? ''} The same math split over ranks must match the baseline: ` +
        'check the CP split inputs and gathers or the TP layer styles in the plan.',
      next: { label: 'Review the plan', action: 'reviewPlan' },
    };
  return { title: 'The phase failed its verdict', explanation: phase.verdictReason ?? '' };
}

/** The cause of a phase, whichever way it failed (undefined: nothing to explain). */
export function causeOfPhase(phase: PhaseResult): Cause | undefined {
  if (phase.error && phase.status !== 'ok') return causeOfError(phase.error);
  return causeOfVerdict(phase);
}
