/**
 * Runtime checks for documents read from disk or received from the server (pure).
 *
 * The generated interfaces (verification.ts) describe the documents; these guards check just
 * enough of a document's shape that the UI code can rely on the fields it reads. The unit tests
 * validate the same golden documents against the runtime's JSON schema.
 */
import type {
  ControlResult,
  ErrorInfo,
  PhaseResult,
  ProgressEvent,
  TunePoint,
  TuneReport,
  VerificationResult,
} from './verification';

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const RUN_STATUSES = new Set(['running', 'completed', 'failed', 'cancelled']);
const PHASE_STATUSES = new Set([
  'pending',
  'running',
  'ok',
  'failed',
  'skipped',
  'timeout',
  'cancelled',
]);
const VERDICTS = new Set(['reference', 'pass', 'warn', 'fail', 'garbled', 'not_exercised']);
const OUTPUT_KINDS = new Set(['image', 'video', 'audio', 'latents']);
const EVENTS = new Set([
  'run_started',
  'launch_started',
  'phase_started',
  'step',
  'phase_finished',
  'error',
  'run_finished',
]);

function optionalNumber(value: unknown): boolean {
  return value === undefined || value === null || typeof value === 'number';
}

function optionalMetric(value: unknown): boolean {
  return optionalNumber(value) || value === 'inf';
}

export function isErrorInfo(value: unknown): value is ErrorInfo {
  return isRecord(value) && typeof value.code === 'string' && typeof value.message === 'string';
}

function optionalError(value: unknown): boolean {
  return value === undefined || value === null || isErrorInfo(value);
}

export function isControlResult(value: unknown): value is ControlResult {
  return (
    isRecord(value) &&
    typeof value.status === 'string' &&
    PHASE_STATUSES.has(value.status) &&
    (value.verdict === undefined ||
      value.verdict === null ||
      value.verdict === 'pass' ||
      value.verdict === 'fail') &&
    (value.reason === undefined || typeof value.reason === 'string') &&
    optionalMetric(value.psnrDb) &&
    optionalNumber(value.ssim) &&
    optionalMetric(value.latentPsnrDb) &&
    optionalNumber(value.latentMaxAbsDiff) &&
    optionalNumber(value.cachedSteps) &&
    optionalNumber(value.latencyS) &&
    optionalError(value.error)
  );
}

export function isPhaseResult(value: unknown): value is PhaseResult {
  return (
    isRecord(value) &&
    typeof value.name === 'string' &&
    typeof value.kind === 'string' &&
    typeof value.status === 'string' &&
    PHASE_STATUSES.has(value.status) &&
    optionalNumber(value.latencyS) &&
    optionalNumber(value.speedup) &&
    optionalMetric(value.psnrDb) &&
    optionalNumber(value.ssim) &&
    optionalMetric(value.snrDb) &&
    optionalMetric(value.latentPsnrDb) &&
    optionalNumber(value.latentMaxAbsDiff) &&
    optionalNumber(value.cachedSteps) &&
    optionalNumber(value.steps) &&
    (value.outputKind === undefined ||
      value.outputKind === null ||
      (typeof value.outputKind === 'string' && OUTPUT_KINDS.has(value.outputKind))) &&
    (value.control === undefined || value.control === null || isControlResult(value.control)) &&
    (value.calibration === undefined ||
      value.calibration === null ||
      isRecord(value.calibration)) &&
    (value.verdict === undefined ||
      value.verdict === null ||
      (typeof value.verdict === 'string' && VERDICTS.has(value.verdict))) &&
    (value.images === undefined || isRecord(value.images)) &&
    optionalError(value.error) &&
    (value.peakMemoryGib === undefined ||
      value.peakMemoryGib === null ||
      (Array.isArray(value.peakMemoryGib) &&
        value.peakMemoryGib.every((m) => typeof m === 'number')))
  );
}

export function isVerificationResult(value: unknown): value is VerificationResult {
  return (
    isRecord(value) &&
    typeof value.status === 'string' &&
    RUN_STATUSES.has(value.status) &&
    typeof value.outputDir === 'string' &&
    Array.isArray(value.phases) &&
    value.phases.every(isPhaseResult) &&
    (value.error === undefined || value.error === null || isErrorInfo(value.error))
  );
}

function optionalString(value: unknown): value is string | null | undefined {
  return value === undefined || value === null || typeof value === 'string';
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

function tunePoint(value: unknown): TunePoint | undefined {
  if (!isRecord(value) || typeof value.phase !== 'string') return undefined;
  const ok =
    optionalNumber(value.stage) &&
    optionalString(value.attentionBackend) &&
    (value.compile === undefined || typeof value.compile === 'boolean') &&
    (value.cache === undefined || value.cache === null || isRecord(value.cache)) &&
    optionalString(value.parallel) &&
    (value.status === undefined ||
      (typeof value.status === 'string' && PHASE_STATUSES.has(value.status))) &&
    (value.verdict === undefined ||
      value.verdict === null ||
      (typeof value.verdict === 'string' && VERDICTS.has(value.verdict))) &&
    optionalNumber(value.latencyS) &&
    optionalNumber(value.compileS) &&
    optionalNumber(value.speedup) &&
    optionalMetric(value.psnrDb) &&
    optionalNumber(value.ssim) &&
    optionalNumber(value.cachedSteps) &&
    (value.onFront === undefined || typeof value.onFront === 'boolean');
  return ok ? (value as unknown as TunePoint) : undefined;
}

/**
 * The `tune` section of a results.json, checked field by field (null: none, or not an object).
 * Points that do not have the contract's shape are dropped rather than failing the whole run.
 */
export function parseTuneReport(value: unknown): TuneReport | null {
  if (!isRecord(value)) return null;
  const points = Array.isArray(value.points)
    ? value.points.map(tunePoint).filter((p): p is TunePoint => p !== undefined)
    : [];
  return {
    points,
    front: strings(value.front),
    recommended: typeof value.recommended === 'string' ? value.recommended : null,
    python: typeof value.python === 'string' ? value.python : '',
    cli: typeof value.cli === 'string' ? value.cli : '',
    skipped: strings(value.skipped),
    notes: strings(value.notes),
  };
}

export function isProgressEvent(value: unknown): value is ProgressEvent {
  return (
    isRecord(value) &&
    typeof value.event === 'string' &&
    EVENTS.has(value.event) &&
    typeof value.time === 'number' &&
    (value.phase === undefined || value.phase === null || typeof value.phase === 'string') &&
    optionalNumber(value.step) &&
    optionalNumber(value.total)
  );
}

/** The `cdit/runProgress` notification: one event, or the final report of a run. */
export type RunProgress =
  | { runId: string; event: ProgressEvent }
  | {
      runId: string;
      done: true;
      exitCode: number | null;
      cancelled: boolean;
      result: VerificationResult | null;
      stderrTail?: string[];
    };

export function parseRunProgress(value: unknown): RunProgress | undefined {
  if (!isRecord(value) || typeof value.runId !== 'string') return undefined;
  if (value.done === true) {
    const result = isVerificationResult(value.result) ? value.result : null;
    return {
      runId: value.runId,
      done: true,
      exitCode: typeof value.exitCode === 'number' ? value.exitCode : null,
      cancelled: value.cancelled === true,
      result,
      stderrTail: Array.isArray(value.stderrTail)
        ? value.stderrTail.filter((l): l is string => typeof l === 'string')
        : undefined,
    };
  }
  if (isProgressEvent(value.event)) return { runId: value.runId, event: value.event };
  return undefined;
}

/** `{"error": {"code", "message", "hint"}}`, the server's way of returning a failure. */
export interface ServerError {
  error: { code: string; message: string; hint?: string };
}

export function isServerError(value: unknown): value is ServerError {
  return isRecord(value) && isRecord(value.error) && typeof value.error.message === 'string';
}
