/**
 * Formatting of verification results for the tree, the detail view and the Markdown export
 * (pure). Numbers are shown the way the runtime's own results table shows them
 * (cdit_runtime/report.py), so a table exported here matches `results.md`.
 */
import type { PhaseResult, Thresholds, VerificationResult } from '../contract/verification';

export type Verdict = NonNullable<PhaseResult['verdict']>;

function num(value: number | string | null | undefined, digits: number): string {
  if (value === null || value === undefined) return '-';
  if (value === 'inf' || value === Infinity) return 'inf';
  if (typeof value !== 'number' || Number.isNaN(value)) return '-';
  return value.toFixed(digits);
}

export function formatLatency(seconds: number | null | undefined): string {
  return seconds === null || seconds === undefined ? '-' : `${num(seconds, 3)} s`;
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
    default:
      return { icon: 'circle-outline', color: 'descriptionForeground', label: phase.status };
  }
}

/** One line for a phase in the tree: `1.85× · PSNR 34.12 dB · SSIM 0.9876 · pass`. */
export function phaseSummary(phase: PhaseResult): string {
  const style = verdictStyle(phase);
  if (phase.status !== 'ok') {
    const why = phase.error ? `${phase.error.code}: ${phase.error.message}` : style.label;
    return `${style.label} · ${truncate(why, 80)}`;
  }
  const parts = [formatLatency(phase.latencyS)];
  if (phase.verdict !== 'reference') {
    parts.push(
      formatSpeedup(phase.speedup),
      `PSNR ${formatPsnr(phase.psnrDb)}`,
      `SSIM ${formatSsim(phase.ssim)}`,
    );
  }
  parts.push(style.label);
  return parts.join(' · ');
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
    { label: 'PSNR', value: formatPsnr(phase.psnrDb) },
    { label: 'SSIM', value: formatSsim(phase.ssim) },
  ];
  if (phase.minFramePsnrDb !== undefined && phase.minFramePsnrDb !== null) {
    rows.push({ label: 'PSNR (worst frame)', value: formatPsnr(phase.minFramePsnrDb) });
  }
  if (phase.minFrameSsim !== undefined && phase.minFrameSsim !== null) {
    rows.push({ label: 'SSIM (worst frame)', value: formatSsim(phase.minFrameSsim) });
  }
  rows.push({ label: 'Peak memory', value: formatMemory(phase.peakMemoryGib) });
  const verdict = phase.verdict ?? phase.status;
  rows.push({
    label: 'Verdict',
    value: phase.verdictReason ? `${verdict}: ${phase.verdictReason}` : verdict,
  });
  if (phase.error)
    rows.push({ label: 'Error', value: `${phase.error.code}: ${phase.error.message}` });
  return rows;
}

/** Counts for a run's label: how many non-reference phases passed. */
export function runTally(result: VerificationResult): {
  passed: number;
  judged: number;
  failed: number;
} {
  let passed = 0;
  let judged = 0;
  let failed = 0;
  for (const p of result.phases ?? []) {
    if (p.verdict === 'reference') continue;
    if (p.status === 'pending' || p.status === 'running') continue;
    judged += 1;
    if (p.status === 'ok' && (p.verdict === 'pass' || p.verdict === 'warn')) passed += 1;
    else if (p.status !== 'skipped' && p.status !== 'cancelled') failed += 1;
  }
  return { passed, judged, failed };
}

export function formatTime(unixSeconds: number | null | undefined): string {
  if (unixSeconds === null || unixSeconds === undefined) return '';
  const d = new Date(unixSeconds * 1000);
  const pad = (n: number): string => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** `2026-11-29 20:31 · completed · 1/1 passed` */
export function runLabel(result: VerificationResult): string {
  const { passed, judged } = runTally(result);
  const when = formatTime(result.startedAt);
  const parts = [when, result.status];
  if (judged > 0) parts.push(`${passed}/${judged} passed`);
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
  lines.push(
    `Thresholds: ${thresholdText(result.thresholds)}`,
    '',
    markdownTable(result).trimEnd(),
  );
  if (reproduce) lines.push('', 'Reproduce:', '', '```sh', reproduce, '```');
  return lines.join('\n') + '\n';
}

export function thresholdText(t: Thresholds | undefined): string {
  if (!t) return 'runtime defaults';
  const parts = [
    t.cachePsnrDb !== undefined ? `cache PSNR > ${t.cachePsnrDb} dB` : undefined,
    t.cacheWarnPsnrDb !== undefined ? `warn from ${t.cacheWarnPsnrDb} dB` : undefined,
    t.parallelPsnrDb !== undefined ? `parallel PSNR > ${t.parallelPsnrDb} dB` : undefined,
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

function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}
