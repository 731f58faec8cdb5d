/**
 * The state the phase detail webview renders (pure: no `vscode`; image URIs come from a callback).
 * The webview script (media/detail.js) only lays this out.
 */
import { causeOfPhase, type Cause } from './causes';
import type { PhaseResult, VerificationResult } from '../contract/verification';
import { parseTuneReport } from '../contract/guards';
import { tunePlotSvg } from './tunePlot';
import {
  phaseKindLabel,
  tuneRows,
  type TuneRow,
  cachedStepsText,
  calibrationRows,
  controlLabel,
  controlMetrics,
  controlSummary,
  phaseMetrics,
  thresholdText,
  verdictStyle,
  verdictText,
  type MetricRow,
} from './format';

export interface DetailImages {
  baseline: string | null;
  output: string | null;
  diff: string | null;
}

/** The `verify --tune` section of a run (shown on every phase of the run). */
export interface TuneState {
  /** the scatter plot, an SVG document built by tunePlotSvg (escaped, classes only) */
  svg: string;
  rows: TuneRow[];
  recommended: string | null;
  /** `1.64× over the baseline at PSNR 34.03 dB` or why there is no recommendation */
  recommendation: string;
  python: string;
  cli: string;
  notes: string[];
  skipped: string[];
  /** phases of the run whose detail can be opened from the table */
  phases: string[];
}

export interface DetailState {
  run: string;
  phase: string;
  kind: PhaseResult['kind'];
  /** the kind in words: `kernels (attention backend / torch.compile)` */
  kindLabel: string;
  /** CSS-safe verdict key: pass, warn, fail, garbled, not_exercised, reference, failed … */
  verdict: string;
  /** the same in words */
  verdictText: string;
  verdictReason: string;
  /** why a not_exercised phase proves nothing, and what to change */
  notExercised: string | null;
  outputKind: string | null;
  metrics: MetricRow[];
  thresholds: string;
  images: DetailImages;
  captions: { baseline: string; output: string; diff: string };
  /** shown instead of images (a latents-only output has no preview) */
  previewMessage: string | null;
  control: {
    /** pass | fail | the status of a control that did not run */
    verdict: string;
    summary: string;
    rows: MetricRow[];
  } | null;
  calibration: MetricRow[] | null;
  cacheStats: string[];
  notes: string[];
  error: { code: string; message: string; hint: string; traceback: string } | null;
  /** why it failed in plain words, and the next step (an action id the extension runs) */
  cause: Cause | null;
  command: string;
  outputDir: string;
  config: string;
  tune: TuneState | null;
}

/** Turns an image path relative to the run's output dir into a webview URI (null: none). */
export type ImageUri = (relative: string) => string | null;

function diffsText(diffs: Record<string, number> | undefined): string {
  const entries = Object.entries(diffs ?? {}).sort((a, b) => Number(a[0]) - Number(b[0]));
  return entries.map(([step, d]) => `${step}: ${d.toFixed(4)}`).join(', ');
}

export function notExercisedText(phase: PhaseResult): string {
  if (phase.kind !== 'cache' && !phase.name.endsWith('-cache')) {
    return (
      `The parallelism was not exercised: ${phase.verdictReason ?? ''} Every rank computed ` +
      'what one process computes, so matching the baseline verifies nothing. Check the plan in ' +
      'the generated module (split keys and expected_dims, TP layer keys) and run again.'
    );
  }
  const cached = cachedStepsText(phase) ?? 'cached no step';
  return (
    `Caching was not exercised (${cached}): no step was served from the cache, so the output ` +
    'equals the baseline by construction and this run does not verify the cache integration. ' +
    'Lower the residual-diff threshold or the warmup steps (setting cdit.cache), or set ' +
    'cdit.cache.calibrateShare to cache a chosen share of the steps, and run again. Later ' +
    'checklist phases stay locked until the cache phase passes.'
  );
}

/** The tune section of a run, or null when the run was not a tune (or its section is unusable). */
export function tuneState(result: VerificationResult, current?: string): TuneState | null {
  const report = parseTuneReport(result.tune);
  if (!report) return null;
  const rows = tuneRows(report);
  const best = rows.find((r) => r.phase === report.recommended);
  const recommendation = best
    ? `${best.phase}: ${best.speedup} over the baseline at PSNR ${best.psnr}, SSIM ${best.ssim} (${best.settings})`
    : 'No configuration both passed its verdict and beat the baseline: keep the defaults.';
  const finished = (result.phases ?? [])
    .filter((p) => p.status !== 'pending' && p.status !== 'running')
    .map((p) => p.name);
  return {
    svg: tunePlotSvg(report, { current }),
    rows,
    recommended: report.recommended ?? null,
    recommendation,
    python: report.python ?? '',
    cli: report.cli ?? '',
    notes: report.notes ?? [],
    skipped: report.skipped ?? [],
    phases: finished,
  };
}

export function detailState(
  run: { id: string; result: VerificationResult; outputDir: string },
  phaseName: string,
  command: string,
  imageUri: ImageUri,
): DetailState | { missing: string } {
  const phases = run.result.phases ?? [];
  const phase = phases.find((p) => p.name === phaseName);
  if (!phase) return { missing: phaseName };
  const baseline = phases.find((p) => p.kind === 'baseline');
  const style = verdictStyle(phase);
  const image = (rel: string | undefined): string | null =>
    !rel || !/\.(png|jpe?g|gif|webp)$/i.test(rel) ? null : imageUri(rel);

  const kind = phase.outputKind ?? baseline?.outputKind ?? null;
  let images: DetailImages = {
    baseline: image(baseline?.images?.output),
    output: phase.kind === 'baseline' ? null : image(phase.images?.output),
    diff: image(phase.images?.diff),
  };
  let previewMessage: string | null = null;
  const audio = kind === 'audio';
  if (kind === 'latents') {
    images = { baseline: null, output: null, diff: null };
    previewMessage =
      "No preview: the pipeline's output is not an image, video or audio, so this phase was " +
      "compared on the denoiser's final latents alone (see Latent PSNR below).";
  } else if (!images.baseline && !images.output && !images.diff) {
    previewMessage = audio
      ? 'No waveform preview was written for this phase.'
      : 'No images for this phase.';
  }

  const control = phase.control
    ? {
        verdict: controlLabel(phase.control),
        summary: controlSummary(phase.control),
        rows: controlMetrics(phase.control),
      }
    : null;

  return {
    run: run.id,
    phase: phase.name,
    kind: phase.kind,
    kindLabel: phaseKindLabel(phase.kind),
    verdict: style.label,
    verdictText: verdictText(style.label),
    verdictReason: phase.verdictReason ?? '',
    notExercised: phase.verdict === 'not_exercised' ? notExercisedText(phase) : null,
    outputKind: kind,
    metrics: phaseMetrics(phase),
    thresholds: thresholdText(run.result.thresholds, run.result.dtype),
    images,
    captions: {
      baseline: audio ? 'baseline (waveform)' : 'baseline',
      output: audio ? `${phase.name} (waveform)` : phase.name,
      diff: audio ? 'difference of the waveforms' : 'difference (amplified to the largest error)',
    },
    previewMessage,
    control,
    calibration: phase.calibration ? calibrationRows(phase.calibration) : null,
    cacheStats: (phase.cacheStats ?? []).map((c) => {
      const steps = c.cachedSteps?.length ? c.cachedSteps.join(', ') : 'none';
      const diffs = diffsText(c.residualDiffs);
      return (
        `${c.blocks}: cached steps ${steps}` +
        (c.forced ? ' (forced: threshold >= 1, diffs not measured)' : '') +
        (diffs ? `; residual diffs ${diffs}` : '')
      );
    }),
    notes: phase.notes ?? [],
    error: phase.error
      ? {
          code: phase.error.code,
          message: phase.error.message,
          hint: phase.error.hint ?? '',
          traceback: phase.error.traceback ?? '',
        }
      : null,
    cause: causeOfPhase(phase) ?? null,
    command,
    outputDir: run.outputDir,
    config: JSON.stringify(phase.config ?? {}),
    tune: tuneState(run.result, phase.name),
  };
}
