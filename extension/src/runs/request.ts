/**
 * Gate-check answers + the user's choices -> a VerificationRequest (pure). The request is the
 * runtime's contract (cdit_runtime/contract/__init__.py); the server checks it again before running.
 */
import type { PhaseSpec, TuneOptions, VerificationRequest } from '../contract/verification';
import type { GateAnswers } from '../gatecheck/answers';
import { toAbsolute } from '../gatecheck/answers';
import type { CacheSettings, DType, SmokeRun, Thresholds } from '../common/settings';
import type { RunConfig } from '../gatecheck/callArgs';

/** What the settings add to every run; unset values keep the runtime's defaults. */
export interface RunOptions {
  /** '' or absent: the runtime resolves it (float32 on CPU, bfloat16 on GPUs) */
  dtype?: DType | '';
  cache?: CacheSettings;
  /** `extraCallKwargs` */
  callArgs?: Record<string, unknown>;
  /** name -> file path (relative: to the workspace root) */
  inputs?: Record<string, string>;
  thresholds?: Thresholds;
}

export interface RunChoice {
  /** phases besides the baseline, which always runs first */
  phases: PhaseSpec[];
  /** 'cpu': a smoke run (few steps, small images); 'cuda': the pipeline's sizes */
  device: 'cpu' | 'cuda';
  smoke: SmokeRun;
  options?: RunOptions;
  /**
   * `verify --tune`: the runtime replaces the phases with the baseline and its grid, measures
   * every point and recommends the fastest that passes (`VerificationResult.tune`).
   */
  tune?: TuneOptions;
}

/**
 * The call arguments and file inputs of a run: the `cdit.callArgs` / `cdit.inputs` settings with
 * the gate check's stored ones (`.cdit/integration.json` `run`) over them — the stored entry wins
 * per name, also across the two kinds (a stored call argument replaces a settings input of the
 * same name and the other way round: the runtime would otherwise let the input win).
 */
export function mergeRunConfig(
  settings: { callArgs?: Record<string, unknown>; inputs?: Record<string, string> },
  stored: RunConfig | undefined,
): { callArgs: Record<string, unknown>; inputs: Record<string, string> } {
  const storedArgs = stored?.callArgs ?? {};
  const storedInputs = stored?.inputs ?? {};
  const callArgs: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(settings.callArgs ?? {}))
    if (!(name in storedInputs)) callArgs[name] = value;
  const inputs: Record<string, string> = {};
  for (const [name, p] of Object.entries(settings.inputs ?? {}))
    if (!(name in storedArgs)) inputs[name] = p;
  return { callArgs: { ...callArgs, ...storedArgs }, inputs: { ...inputs, ...storedInputs } };
}

/** The runtime's default time box of a tune (TuneOptions.budgetS). */
export const DEFAULT_TUNE_BUDGET_S = 900;

/**
 * The tune options of a run: the time box, and no parallel points when the user chose one GPU
 * (on several the runtime measures Ulysses, Ring and TP over every visible GPU). The grid itself
 * keeps the runtime's defaults (the attention backends this machine has, torch.compile on GPUs,
 * Fn 1, Bn 0, thresholds 0.08/0.12/0.2/0.3 at the cdit.cache warmup).
 */
export function tuneOptions(budgetS: number | undefined, parallel: boolean): TuneOptions {
  const budget =
    budgetS !== undefined && Number.isFinite(budgetS) && budgetS > 0
      ? budgetS
      : DEFAULT_TUNE_BUDGET_S;
  return { budgetS: budget, parallel };
}

export function buildRequest(
  answers: GateAnswers,
  choice: RunChoice,
  workspaceRoot: string,
  outputDir: string,
): VerificationRequest {
  const abs = (p: string): string => toAbsolute(p, workspaceRoot);
  const sourceFiles = [answers.transformerSource, answers.pipelineSource]
    .filter((p) => p.trim() !== '')
    .map(abs)
    .filter((p) => p === workspaceRoot || p.startsWith(workspaceRoot + '/'));
  const phases: PhaseSpec[] = [
    { kind: 'baseline' },
    ...choice.phases.filter((p) => p.kind !== 'baseline'),
  ];
  const request: VerificationRequest = {
    schemaVersion: 1,
    model: {
      source: 'local',
      path: abs(answers.localPath),
      pipelineClass: answers.pipelineClass || null,
      sourceFiles: [...new Set(sourceFiles)],
    },
    integration:
      answers.targetKind === 'standalone'
        ? { kind: 'standalone', path: abs(answers.targetPath) }
        : { kind: 'cache-dit-checkout', path: abs(answers.targetPath) },
    outputDir,
    phases,
    device: choice.device,
  };
  const o = choice.options ?? {};
  // no dtype unless the user chose one: the runtime picks float32 on CPU and bfloat16 on GPUs,
  // and the float32 thresholds depend on knowing which it was
  if (o.dtype) request.dtype = o.dtype;
  if (choice.device === 'cpu') {
    request.steps = choice.smoke.steps;
    request.height = choice.smoke.height;
    request.width = choice.smoke.width;
  }
  if (o.cache && Object.keys(o.cache).length > 0) request.cache = { ...o.cache };
  if (o.callArgs && Object.keys(o.callArgs).length > 0) request.extraCallKwargs = { ...o.callArgs };
  if (o.inputs && Object.keys(o.inputs).length > 0)
    request.inputs = Object.fromEntries(
      Object.entries(o.inputs).map(([name, p]) => [name, abs(p)]),
    );
  // the server merges the thresholds it knows; the request carries all the user set
  if (o.thresholds && Object.keys(o.thresholds).length > 0)
    request.thresholds = { ...o.thresholds };
  if (choice.tune) request.tune = { ...choice.tune };
  return request;
}

/** A run id that sorts by time: `20261129-203112`. */
export function runFolderName(now: Date): string {
  const pad = (n: number): string => String(n).padStart(2, '0');
  return (
    `${now.getFullYear()}${pad(now.getMonth() + 1)}${pad(now.getDate())}-` +
    `${pad(now.getHours())}${pad(now.getMinutes())}${pad(now.getSeconds())}`
  );
}
