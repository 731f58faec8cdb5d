/**
 * Formatting of verification results for the tree, the detail view and the Markdown export
 * (pure). Numbers are shown the way the runtime's own results table shows them
 * (cdit_runtime/report.py), so a table exported here matches `results.md`.
 */
import type {
  Calibration,
  ControlResult,
  PhaseResult,
  Thresholds,
  TunePoint,
  TuneReport,
  VerificationResult,
} from '../contract/verification';

export type Verdict = NonNullable<PhaseResult['verdict']>;
export type PhaseKind = PhaseResult['kind'];

/** Every phase kind in words (a Record, so a kind the contract adds fails the type check here). */
const KIND_LABELS: Record<PhaseKind, string> = {
  baseline: 'baseline',
  kernels: 'kernels (attention backend / torch.compile)',
  cache: 'cache (DBCache)',
  ulysses: 'context parallel (Ulysses)',
  ring: 'context parallel (Ring)',
  uaa: 'context parallel (Ulysses anything)',
  tp: 'tensor parallel',
  tp_tep: 'text-encoder parallel (TE-P)',
  vae_p: 'VAE parallel (VAE-P)',
  hybrid: 'hybrid (CP × TP)',
};

/** `kernels` -> `kernels (attention backend / torch.compile)`; an unknown kind as it is. */
export function phaseKindLabel(kind: string): string {
  return Object.prototype.hasOwnProperty.call(KIND_LABELS, kind)
    ? KIND_LABELS[kind as PhaseKind]
    : kind;
}

function num(value: number | string | null | undefined, digits: number): string {
  if (value === null || value === undefined) return '-';
  if (value === 'inf' || value === Infinity) return 'inf';
  if (typeof value !== 'number' || Number.isNaN(value)) return '-';
  return value.toFixed(digits);
}

export function formatLatency(seconds: number | null | undefined): string {
  return seconds === null || seconds === undefined ? '-' : `${num(seconds, 3)} s`;
}

/** A one-off time such as torch.compile's: `42.1 s`. */
export function formatSeconds(seconds: number | null | undefined): string {
  return seconds === null || seconds === undefined ? '-' : `${num(seconds, 1)} s`;
}

export function formatSpeedup(speedup: number | null | undefined): string {
  return speedup === null || speedup === undefined ? '-' : `${num(speedup, 2)}×`;
}

export function formatPsnr(psnr: number | 'inf' | null | undefined): string {
  const text = num(psnr, 2);
  return text === '-' ? '-' : `${text} dB`;
}

export function formatSsim(ssim: number | null | undefined): string {
  return num(ssim, 4);
}

/**
 * A number the way Python's `format(x, '.3g')` writes it (the runtime's results table writes the
 * largest latent difference so): `0`, `0.0123`, `3.05e-06`, `1.5`.
 */
export function formatG3(value: number): string {
  if (value === 0) return '0';
  if (!Number.isFinite(value)) return Number.isNaN(value) ? 'nan' : value > 0 ? 'inf' : '-inf';
  const [mantissa = '', exp = '0'] = value.toExponential(2).split('e');
  const e = Number(exp);
  const strip = (t: string): string => (t.includes('.') ? t.replace(/\.?0+$/, '') : t);
  if (e < -4 || e >= 3) {
    const digits = String(Math.abs(e)).padStart(2, '0');
    return `${strip(mantissa)}e${e < 0 ? '-' : '+'}${digits}`;
  }
  return strip(value.toFixed(2 - e));
}

/** A largest absolute difference: `0`, `0.0123`, `3.05e-06` (as in the runtime's table). */
export function formatMaxAbs(value: number | null | undefined): string {
  if (value === null || value === undefined || Number.isNaN(value)) return '-';
  return formatG3(value);
}

/** `3/6` (cached steps of the timed run), or `3` when the step count is unknown. */
export function formatCachedSteps(
  cached: number | null | undefined,
  steps: number | null | undefined,
): string {
  if (cached === null || cached === undefined) return '-';
  return steps === null || steps === undefined ? String(cached) : `${cached}/${steps}`;
}

export function formatMemory(gib: number[] | null | undefined): string {
  if (!gib || gib.length === 0) return '-';
  return `${gib.map((m) => m.toFixed(2)).join(' / ')} GiB`;
}

export interface VerdictStyle {
  /** codicon id */
  icon: string;
  /** theme colour id */
  color: string;
  label: string;
}

export function verdictStyle(phase: Pick<PhaseResult, 'verdict' | 'status'>): VerdictStyle {
  if (phase.status === 'running')
    return { icon: 'sync~spin', color: 'charts.blue', label: 'running' };
  if (phase.status === 'pending')
    return { icon: 'clock', color: 'descriptionForeground', label: 'pending' };
  if (phase.status === 'skipped')
    return { icon: 'debug-step-over', color: 'disabledForeground', label: 'skipped' };
  if (phase.status === 'cancelled')
    return { icon: 'circle-slash', color: 'disabledForeground', label: 'cancelled' };
  if (phase.status === 'failed' || phase.status === 'timeout') {
    return { icon: 'error', color: 'testing.iconFailed', label: phase.status };
  }
  switch (phase.verdict) {
    case 'pass':
      return { icon: 'pass-filled', color: 'testing.iconPassed', label: 'pass' };
    case 'warn':
      return { icon: 'warning', color: 'list.warningForeground', label: 'warn' };
    case 'fail':
      return { icon: 'error', color: 'testing.iconFailed', label: 'fail' };
    case 'garbled':
      return { icon: 'error', color: 'testing.iconFailed', label: 'garbled' };
    case 'reference':
      return { icon: 'circle-large-outline', color: 'descriptionForeground', label: 'reference' };
    // amber, apart from warn (yellow) and pass/fail: the run proves nothing about caching
    case 'not_exercised':
      return { icon: 'unverified', color: 'charts.orange', label: 'not_exercised' };
    default:
      return { icon: 'circle-outline', color: 'descriptionForeground', label: phase.status };
  }
}

/** A verdict or status label as words: `not_exercised` -> `not exercised`. */
export function verdictText(label: string): string {
  return label.replace(/_/g, ' ');
}

function present<T>(value: T | null | undefined): value is T {
  return value !== null && value !== undefined;
}

/** The output comparison of a phase, by output kind (latents-only outputs have none). */
function outputParts(phase: PhaseResult): string[] {
  if (phase.outputKind === 'latents') return [];
  if (phase.outputKind === 'audio') {
    const parts = [`PSNR ${formatPsnr(phase.psnrDb)}`];
    if (present(phase.snrDb)) parts.push(`SNR ${formatPsnr(phase.snrDb)}`);
    if (present(phase.ssim)) parts.push(`SSIM ${formatSsim(phase.ssim)}`);
    return parts;
  }
  return [`PSNR ${formatPsnr(phase.psnrDb)}`, `SSIM ${formatSsim(phase.ssim)}`];
}

/** `latents 41.20 dB` (final-latent PSNR against the baseline), when the runtime measured it. */
function latentPart(phase: PhaseResult): string | undefined {
  if (present(phase.latentPsnrDb)) return `latents ${formatPsnr(phase.latentPsnrDb)}`;
  if (present(phase.latentMaxAbsDiff))
    return `latents max Δ ${formatMaxAbs(phase.latentMaxAbsDiff)}`;
  return undefined;
}

/** `cached 3/6 steps` for phases with a cache. */
export function cachedStepsText(phase: PhaseResult): string | undefined {
  if (!present(phase.cachedSteps)) return undefined;
  const unit =
    phase.steps === 1 || (!present(phase.steps) && phase.cachedSteps === 1) ? 'step' : 'steps';
  return `cached ${formatCachedSteps(phase.cachedSteps, phase.steps)} ${unit}`;
}

/** The verdict of a no-cache control: pass, fail, or the status of a control that did not run. */
export function controlLabel(control: ControlResult): string {
  if (control.status !== 'ok') return control.status;
  return control.verdict ?? 'unjudged';
}

/**
 * One line for the no-cache control: `pass · PSNR inf dB · latents inf dB`, or
 * `FAIL — differs from the baseline: …`, or `failed — CODE: message`.
 */
export function controlSummary(control: ControlResult): string {
  const label = controlLabel(control);
  if (control.status !== 'ok') {
    const why = control.error
      ? `${control.error.code}: ${control.error.message}`
      : control.reason || 'did not run';
    return `${label} — ${truncate(why, 100)}`;
  }
  if (label === 'fail')
    return `FAIL — ${truncate(control.reason || 'differs from the baseline', 100)}`;
  const parts = [label];
  if (present(control.psnrDb)) parts.push(`PSNR ${formatPsnr(control.psnrDb)}`);
  if (present(control.latentPsnrDb)) parts.push(`latents ${formatPsnr(control.latentPsnrDb)}`);
  else if (present(control.latentMaxAbsDiff))
    parts.push(`latents max Δ ${formatMaxAbs(control.latentMaxAbsDiff)}`);
  if (control.cachedSteps) parts.push(`cached ${control.cachedSteps} steps (must be 0)`);
  return parts.join(' · ');
}

/** The tree colour of a control: green pass, red fail or not run. */
export function controlStyle(control: ControlResult): VerdictStyle {
  const label = controlLabel(control);
  if (label === 'pass') return { icon: 'pass-filled', color: 'testing.iconPassed', label };
  if (label === 'fail' || control.status === 'failed' || control.status === 'timeout')
    return { icon: 'error', color: 'testing.iconFailed', label };
  return { icon: 'circle-outline', color: 'descriptionForeground', label };
}

/**
 * One line for a phase in the tree:
 * `7.02 s · 1.85× · PSNR 34.12 dB · SSIM 0.9876 · latents 40.1 dB · cached 3/6 steps · control pass · pass`.
 */
export function phaseSummary(phase: PhaseResult): string {
  const style = verdictStyle(phase);
  if (phase.status !== 'ok') {
    const why = phase.error ? `${phase.error.code}: ${phase.error.message}` : style.label;
    return `${style.label} · ${truncate(why, 80)}`;
  }
  const parts = [formatLatency(phase.latencyS)];
  if (phase.verdict !== 'reference') {
    parts.push(formatSpeedup(phase.speedup), ...outputParts(phase));
    const latents = latentPart(phase);
    if (latents) parts.push(latents);
    const cached = cachedStepsText(phase);
    if (cached) parts.push(cached);
    if (phase.control) {
      const c = controlLabel(phase.control);
      parts.push(`control ${c === 'fail' ? 'FAIL' : c}`);
    }
  }
  parts.push(verdictText(style.label));
  return parts.join(' · ');
}

/** The phase's tooltip in the tree: verdict, reason, control and latents, one per line. */
export function phaseTooltip(phase: PhaseResult): string {
  const style = verdictStyle(phase);
  const lines = [
    `${phase.name}: ${verdictText(style.label)}${phase.verdictReason ? ` — ${phase.verdictReason}` : ''}`,
  ];
  if (phase.error) lines.push(`${phase.error.code}: ${phase.error.message}`);
  if (phase.status === 'ok' && phase.verdict !== 'reference') {
    const out = outputParts(phase);
    if (out.length)
      lines.push(`output${phase.outputKind ? ` (${phase.outputKind})` : ''}: ${out.join(' · ')}`);
    else if (phase.outputKind === 'latents')
      lines.push('output: not an image, video or audio; compared on the final latents alone');
    if (present(phase.latentPsnrDb) || present(phase.latentMaxAbsDiff))
      lines.push(
        `final latents${phase.latentSource ? ` (${phase.latentSource})` : ''}: PSNR ${formatPsnr(phase.latentPsnrDb)} · max |Δ| ${formatMaxAbs(phase.latentMaxAbsDiff)}`,
      );
    const cached = cachedStepsText(phase);
    if (cached) lines.push(cached);
  }
  if (phase.control) lines.push(`no-cache control: ${controlSummary(phase.control)}`);
  if (phase.control?.reason && controlLabel(phase.control) !== 'fail')
    lines.push(`control: ${phase.control.reason}`);
  return lines.join('\n');
}

export interface MetricRow {
  label: string;
  value: string;
}

/** The rows under a phase in the tree and in the detail view. */
export function phaseMetrics(phase: PhaseResult): MetricRow[] {
  const rows: MetricRow[] = [
    { label: 'Latency', value: formatLatency(phase.latencyS) },
    { label: 'Speedup', value: formatSpeedup(phase.speedup) },
  ];
  if (present(phase.outputKind)) rows.push({ label: 'Output', value: phase.outputKind });
  if (phase.outputKind !== 'latents') {
    rows.push({ label: 'PSNR', value: formatPsnr(phase.psnrDb) });
    if (phase.outputKind !== 'audio' || present(phase.ssim))
      rows.push({ label: 'SSIM', value: formatSsim(phase.ssim) });
  }
  if (present(phase.snrDb)) rows.push({ label: 'SNR', value: formatPsnr(phase.snrDb) });
  if (phase.minFramePsnrDb !== undefined && phase.minFramePsnrDb !== null) {
    rows.push({ label: 'PSNR (worst frame)', value: formatPsnr(phase.minFramePsnrDb) });
  }
  if (phase.minFrameSsim !== undefined && phase.minFrameSsim !== null) {
    rows.push({ label: 'SSIM (worst frame)', value: formatSsim(phase.minFrameSsim) });
  }
  if (present(phase.latentPsnrDb) || present(phase.latentMaxAbsDiff)) {
    const source = phase.latentSource ? ` (${phase.latentSource})` : '';
    rows.push(
      { label: `Latent PSNR${source}`, value: formatPsnr(phase.latentPsnrDb) },
      { label: 'Latent max |Δ|', value: formatMaxAbs(phase.latentMaxAbsDiff) },
    );
  }
  if (present(phase.cachedSteps))
    rows.push({ label: 'Cached steps', value: formatCachedSteps(phase.cachedSteps, phase.steps) });
  const backend = phase.config?.attentionBackend;
  if (typeof backend === 'string' && backend)
    rows.push({ label: 'Attention backend', value: backend });
  if (present(phase.compileS))
    rows.push({ label: 'torch.compile', value: formatSeconds(phase.compileS) });
  if (present(phase.firstCallS))
    rows.push({ label: 'First call', value: formatLatency(phase.firstCallS) });
  rows.push({ label: 'Peak memory', value: formatMemory(phase.peakMemoryGib) });
  const verdict = verdictText(phase.verdict ?? phase.status);
  rows.push({
    label: 'Verdict',
    value: phase.verdictReason ? `${verdict}: ${phase.verdictReason}` : verdict,
  });
  if (phase.error)
    rows.push({ label: 'Error', value: `${phase.error.code}: ${phase.error.message}` });
  return rows;
}

/** A child row of a phase in the results tree: its no-cache control (coloured) or a metric. */
export interface PhaseRow {
  kind: 'control' | 'metric';
  label: string;
  value: string;
  /** the control's colour; metrics have none */
  style?: VerdictStyle;
}

/** The children of a phase in the results tree: the no-cache control first, then the metrics. */
export function phaseRows(phase: PhaseResult): PhaseRow[] {
  const rows: PhaseRow[] = [];
  if (phase.control)
    rows.push({
      kind: 'control',
      label: 'No-cache control',
      value: controlSummary(phase.control),
      style: controlStyle(phase.control),
    });
  for (const m of phaseMetrics(phase)) rows.push({ kind: 'metric', ...m });
  return rows;
}

/** The rows of a no-cache control in the detail view. */
export function controlMetrics(control: ControlResult): MetricRow[] {
  const rows: MetricRow[] = [
    { label: 'Verdict', value: controlLabel(control) },
    { label: 'PSNR', value: formatPsnr(control.psnrDb) },
    { label: 'SSIM', value: formatSsim(control.ssim) },
    { label: 'Latent PSNR', value: formatPsnr(control.latentPsnrDb) },
    { label: 'Latent max |Δ|', value: formatMaxAbs(control.latentMaxAbsDiff) },
    { label: 'Cached steps', value: `${control.cachedSteps ?? 0} (must be 0)` },
    { label: 'Latency', value: formatLatency(control.latencyS) },
  ];
  if (control.reason) rows.push({ label: 'Reason', value: control.reason });
  if (control.error)
    rows.push({ label: 'Error', value: `${control.error.code}: ${control.error.message}` });
  return rows;
}

/** The rows of a residual-diff threshold calibration in the detail view. */
export function calibrationRows(c: Calibration): MetricRow[] {
  const diffs = Object.entries(c.probeDiffs ?? {})
    .sort((a, b) => Number(a[0]) - Number(b[0]))
    .map(([step, d]) => `${step}: ${d.toFixed(4)}`);
  const rows: MetricRow[] = [
    { label: 'Target share', value: `${Math.round(c.targetShare * 100)}% of the steps` },
    { label: 'Threshold', value: c.threshold === null ? 'none possible' : String(c.threshold) },
    {
      label: 'Eligible steps',
      value: c.eligibleSteps?.length ? c.eligibleSteps.join(', ') : 'none',
    },
    { label: 'Probe diffs', value: diffs.length ? diffs.join(', ') : '-' },
  ];
  if (c.reason) rows.push({ label: 'Reason', value: c.reason });
  return rows;
}

/** Counts for a run's label: how many non-reference phases passed. */
export function runTally(result: VerificationResult): {
  passed: number;
  judged: number;
  failed: number;
  /** cache phases that cached no step: neither passed nor failed */
  notExercised: number;
} {
  let passed = 0;
  let judged = 0;
  let failed = 0;
  let notExercised = 0;
  for (const p of result.phases ?? []) {
    if (p.verdict === 'reference') continue;
    if (p.status === 'pending' || p.status === 'running') continue;
    judged += 1;
    if (p.status === 'ok' && (p.verdict === 'pass' || p.verdict === 'warn')) passed += 1;
    else if (p.status === 'ok' && p.verdict === 'not_exercised') notExercised += 1;
    else if (p.status !== 'skipped' && p.status !== 'cancelled') failed += 1;
  }
  return { passed, judged, failed, notExercised };
}

export function formatTime(unixSeconds: number | null | undefined): string {
  if (unixSeconds === null || unixSeconds === undefined) return '';
  const d = new Date(unixSeconds * 1000);
  const pad = (n: number): string => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/**
 * A run's icon, from the same tally as its label: a completed run with a failed phase is a
 * failure (red), one whose only shortfall is a check with nothing to check is amber, one where
 * every judged phase passed is green.
 */
export function runStyle(result: VerificationResult): { icon: string; color?: string } {
  if (result.status === 'running') return { icon: 'sync~spin' };
  if (result.status === 'cancelled') return { icon: 'circle-slash' };
  const { passed, judged, failed, notExercised } = runTally(result);
  if (result.status === 'failed' || failed > 0)
    return { icon: 'error', color: 'testing.iconFailed' };
  if (notExercised > 0) return { icon: 'warning', color: 'list.warningForeground' };
  if (judged > 0 && passed === judged) return { icon: 'pass', color: 'testing.iconPassed' };
  return { icon: 'history' };
}

/** `2026-11-29 20:31 · completed · 1/1 passed` (`· 1 not exercised` when a cache cached nothing) */
export function runLabel(result: VerificationResult): string {
  const { passed, judged, notExercised } = runTally(result);
  const when = formatTime(result.startedAt);
  const parts = [when, result.status];
  if (judged > 0) parts.push(`${passed}/${judged} passed`);
  if (notExercised > 0) parts.push(`${notExercised} not exercised`);
  return parts.filter(Boolean).join(' · ');
}

function cell(text: string): string {
  return text.replace(/\|/g, '/').replace(/\r?\n/g, ' ');
}

/** The runtime's results table (report.render_table), row for row. */
export function markdownTable(result: VerificationResult): string {
  const rows = [
    '| Phase | Status | Latency (s) | Speedup | PSNR (dB) | SSIM | Peak GiB per device | Verdict |',
    '|---|---|---:|---:|---:|---:|---|---|',
  ];
  for (const p of result.phases ?? []) {
    let psnr = num(p.psnrDb, 2);
    if (p.minFramePsnrDb !== undefined && p.minFramePsnrDb !== null)
      psnr += ` (min ${num(p.minFramePsnrDb, 2)})`;
    let ssim = num(p.ssim, 4);
    if (p.minFrameSsim !== undefined && p.minFrameSsim !== null)
      ssim += ` (min ${num(p.minFrameSsim, 4)})`;
    const memory =
      p.peakMemoryGib && p.peakMemoryGib.length > 0
        ? p.peakMemoryGib.map((m) => m.toFixed(2)).join(' / ')
        : '-';
    let verdict = p.verdict ?? '-';
    if (p.error && p.status !== 'ok') verdict = `${p.error.code}: ${p.error.message}`;
    rows.push(
      `| ${p.name} | ${p.status} | ${num(p.latencyS, 3)} | ${num(p.speedup, 2)} | ${psnr} | ${ssim} | ${memory} | ${cell(verdict)} |`,
    );
  }
  return rows.join('\n') + '\n';
}

/** The PR-ready export: the table plus what was run, where and against which thresholds. */
export function markdownReport(result: VerificationResult, reproduce: string | undefined): string {
  const env = result.environment;
  const lines: string[] = ['### cache-dit verification', ''];
  const model = result.model ?? {};
  const pipeline = typeof model.pipelineClass === 'string' ? model.pipelineClass : undefined;
  const transformer =
    typeof model.transformerClass === 'string' ? model.transformerClass : undefined;
  if (pipeline || transformer)
    lines.push(`Model: ${[pipeline, transformer].filter(Boolean).join(' / ')}`);
  if (result.integration) {
    const sha = result.integration.gitSha
      ? ` @ ${result.integration.gitSha.slice(0, 10)}${result.integration.gitDirty ? ' (dirty)' : ''}`
      : '';
    lines.push(`Integration: ${result.integration.kind}${sha}`);
  }
  if (env) {
    const versions = [
      env.torch ? `torch ${env.torch}` : undefined,
      env.diffusers ? `diffusers ${env.diffusers}` : undefined,
      env.cacheDit ? `cache-dit ${env.cacheDit}` : undefined,
      env.device
        ? `device ${env.device}${env.deviceNames?.length ? ` (${env.deviceNames.join(', ')})` : ''}`
        : undefined,
    ].filter(Boolean);
    if (versions.length) lines.push(`Environment: ${versions.join(', ')}`);
  }
  if (result.dtype) lines.push(`Dtype: ${result.dtype}`);
  lines.push(
    `Thresholds: ${thresholdText(result.thresholds, result.dtype)}`,
    '',
    resultsMarkdown(result).trimEnd(),
  );
  const notExercised = (result.phases ?? []).filter((p) => p.verdict === 'not_exercised');
  if (notExercised.length)
    lines.push(
      '',
      `Not exercised: ${notExercised.map((p) => p.name).join(', ')} cached no step, so caching was not verified.`,
    );
  if (reproduce) lines.push('', 'Reproduce:', '', '```sh', reproduce, '```');
  return lines.join('\n') + '\n';
}

/** The control cell of the runtime's evidence table (report._control). */
function controlCell(c: ControlResult | null | undefined): string {
  if (!c) return '-';
  if (c.status !== 'ok' && c.error) return `${c.status}: ${c.error.code}: ${c.error.message}`;
  if (c.verdict === 'fail') return `fail: ${c.reason ?? ''}`;
  return c.verdict || c.status;
}

/**
 * The runtime's second table (report.render_checks), row for row: the evidence the verdicts
 * also rest on — output kind, final latents, cached steps and the no-cache control of every
 * judged phase. Undefined when no phase was judged.
 */
export function markdownChecks(result: VerificationResult): string | undefined {
  const phases = (result.phases ?? []).filter(
    (p) => p.verdict !== null && p.verdict !== undefined && p.verdict !== 'reference',
  );
  if (phases.length === 0) return undefined;
  const rows = [
    '| Phase | Output | Latent PSNR (dB) | Latent max abs diff | Cached steps | No-cache control | Control PSNR (dB) | Control latent PSNR (dB) |',
    '|---|---|---:|---:|---:|---|---:|---:|',
  ];
  for (const p of phases) {
    const c = p.control;
    rows.push(
      `| ${p.name} | ${p.outputKind || '-'} | ${num(p.latentPsnrDb, 2)} | ${formatMaxAbs(p.latentMaxAbsDiff)} | ${formatCachedSteps(p.cachedSteps, p.steps)} | ${controlCell(c).replace(/\|/g, '/')} | ${c ? num(c.psnrDb, 2) : '-'} | ${c ? num(c.latentPsnrDb, 2) : '-'} |`,
    );
  }
  return rows.join('\n') + '\n';
}

/** The runtime's `results.md`: the results table, then the evidence table when there is one. */
export function resultsMarkdown(result: VerificationResult): string {
  const checks = markdownChecks(result);
  return markdownTable(result) + (checks ? `\n${checks}` : '');
}

/**
 * The thresholds in words. With the run's dtype, the parallel and control thresholds are the
 * ones that applied (float32 runs are held to near-exact values); without it, both are named.
 */
export function thresholdText(
  t: Thresholds | undefined,
  dtype?: VerificationResult['dtype'],
): string {
  if (!t) return 'runtime defaults';
  const pick = (name: string, base: number | undefined, f32: number | undefined): string[] => {
    if (dtype === 'float32' && f32 !== undefined) return [`${name} PSNR > ${f32} dB (float32)`];
    if (dtype) return base !== undefined ? [`${name} PSNR > ${base} dB (${dtype})`] : [];
    const out: string[] = [];
    if (base !== undefined) out.push(`${name} PSNR > ${base} dB`);
    if (f32 !== undefined) out.push(`${name} PSNR > ${f32} dB in float32`);
    return out;
  };
  const parts = [
    t.cachePsnrDb !== undefined ? `cache PSNR > ${t.cachePsnrDb} dB` : undefined,
    t.cacheWarnPsnrDb !== undefined ? `warn from ${t.cacheWarnPsnrDb} dB` : undefined,
    ...pick('parallel', t.parallelPsnrDb, t.parallelPsnrDbFloat32),
    ...pick('no-cache control', t.controlPsnrDb, t.controlPsnrDbFloat32),
    t.ssimMin !== undefined ? `SSIM > ${t.ssimMin}` : undefined,
  ].filter(Boolean);
  return parts.join(', ') || 'runtime defaults';
}

/** POSIX shell quoting for the reproduce command. */
export function shellQuote(arg: string): string {
  return /^[A-Za-z0-9_./:=@%+,-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** `cd WS && PY -m cdit_runtime verify .cdit/runs/ID/request.json` */
export function reproduceCommand(
  python: string,
  requestPath: string,
  cwd: string | undefined,
): string {
  const rel =
    cwd && requestPath.startsWith(cwd + '/') ? requestPath.slice(cwd.length + 1) : requestPath;
  const command = [python, '-m', 'cdit_runtime', 'verify', rel].map(shellQuote).join(' ');
  return cwd && rel !== requestPath ? `cd ${shellQuote(cwd)} && ${command}` : command;
}

/** One row of the tune table in the detail view. */
export interface TuneRow {
  phase: string;
  stage: string;
  /** what the point changes: `_native_math`, `compile`, `Fn1 Bn0 rdt 0.12 ws 4`, `ulysses-2` */
  settings: string;
  latency: string;
  compile: string;
  speedup: string;
  psnr: string;
  ssim: string;
  cached: string;
  /** CSS-safe verdict key (as the detail view's `verdict-*` classes) */
  verdict: string;
  verdictText: string;
  /** `recommended`, `front` or '' */
  front: string;
}

/** What a tune point changes against the baseline, in a few words. */
export function tuneSettingsText(p: TunePoint): string {
  const parts: string[] = [];
  if (p.attentionBackend) parts.push(p.attentionBackend);
  if (p.compile) parts.push('torch.compile');
  if (p.parallel) parts.push(p.parallel);
  const c = p.cache;
  if (c) {
    const cache = [
      c.fn !== undefined ? `Fn${c.fn}` : undefined,
      c.bn !== undefined ? `Bn${c.bn}` : undefined,
      c.residualDiffThreshold !== undefined ? `rdt ${c.residualDiffThreshold}` : undefined,
      c.maxWarmupSteps !== undefined ? `warmup ${c.maxWarmupSteps}` : undefined,
    ].filter(Boolean);
    parts.push(cache.length ? `DBCache ${cache.join(' ')}` : 'DBCache');
  }
  return parts.join(' · ') || (p.verdict === 'reference' ? 'defaults' : '-');
}

/** The tune's points as table rows, in the order measured (runtime's report.render_tune). */
export function tuneRows(report: TuneReport): TuneRow[] {
  const front = new Set(report.front ?? []);
  return (report.points ?? []).map((p) => {
    const style = verdictStyle({ status: p.status ?? 'ok', verdict: p.verdict ?? null });
    return {
      phase: p.phase,
      stage: p.stage === undefined ? '-' : String(p.stage),
      settings: tuneSettingsText(p),
      latency: formatLatency(p.latencyS),
      compile: formatSeconds(p.compileS),
      speedup: p.verdict === 'reference' ? '1.00×' : formatSpeedup(p.speedup),
      psnr: p.verdict === 'reference' && !present(p.psnrDb) ? 'reference' : formatPsnr(p.psnrDb),
      ssim: formatSsim(p.ssim),
      cached: present(p.cachedSteps) ? String(p.cachedSteps) : '-',
      verdict: style.label,
      verdictText: verdictText(style.label),
      front:
        report.recommended === p.phase
          ? 'recommended'
          : front.has(p.phase) || p.onFront
            ? 'front'
            : '',
    };
  });
}

/**
 * The tune in one line for the results tree: `recommended cache-fn1-bn0-rdt0.3-ws4 · 1.64× ·
 * PSNR 34.03 dB`, or why there is none.
 */
export function tuneSummary(report: TuneReport): { label: string; description: string } {
  const points = report.points ?? [];
  const best = points.find((p) => p.phase === report.recommended);
  const counts = `${points.length} point${points.length === 1 ? '' : 's'}`;
  const skipped = report.skipped?.length ? ` · ${report.skipped.length} skipped` : '';
  if (!report.recommended)
    return { label: 'tune: no recommendation', description: `${counts}${skipped}` };
  const numbers = best
    ? [formatSpeedup(best.speedup), `PSNR ${formatPsnr(best.psnrDb)}`].join(' · ')
    : '';
  return {
    label: `tune: recommended ${report.recommended}`,
    description: [numbers, `${counts}${skipped}`].filter(Boolean).join(' · '),
  };
}

function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}
