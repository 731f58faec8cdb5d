/**
 * The scatter plot of a `verify --tune` report (pure): latency (s) across, PSNR (dB) up, one
 * marker per measured point, the Pareto front as a line and the recommendation ringed.
 *
 * The result is an SVG document as text. Every piece of text in it is escaped (phase names come
 * from results.json); it holds no script, no event handler, no `style` attribute and no link, and
 * it takes its colours from CSS classes (`tp-*` in media/common.css) that use the workbench theme
 * variables, so it fits the webviews' Content-Security-Policy (no inline styles) and the theme.
 * The detail webview parses it as XML (`DOMParser`, `image/svg+xml`), so it must be well-formed.
 */
import type { TunePoint, TuneReport } from '../contract/verification';

/** Text for an SVG/XML text node or attribute: the five XML characters escaped, and characters
 *  XML 1.0 forbids (C0 controls but tab/newline/CR, lone surrogates, U+FFFE/U+FFFF) replaced. */
export function xmlEscape(text: string): string {
  return text
    .replace(
      // eslint-disable-next-line no-control-regex
      /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g,
      '\uFFFD',
    )
    .replace(
      /[&<>"']/g,
      (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string,
    );
}

/** How a point is drawn: filled (passed or the reference), hollow (not exercised, unjudged),
 *  crossed (failed its verdict, or the phase did not run to the end). */
export type PointStyle = 'reference' | 'pass' | 'warn' | 'fail' | 'not-exercised' | 'unjudged';

export function pointStyle(p: Pick<TunePoint, 'status' | 'verdict'>): PointStyle {
  if (p.status !== undefined && p.status !== 'ok') return 'fail';
  switch (p.verdict) {
    case 'reference':
      return 'reference';
    case 'pass':
      return 'pass';
    case 'warn':
      return 'warn';
    case 'fail':
    case 'garbled':
      return 'fail';
    case 'not_exercised':
      return 'not-exercised';
    default:
      return 'unjudged';
  }
}

/** Ticks at 1, 2 or 5 × 10^n covering [lo, hi]; the domain is widened to the outer ticks. */
export function niceTicks(
  lo: number,
  hi: number,
  count = 5,
): { lo: number; hi: number; step: number; ticks: number[]; decimals: number } {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return niceTicks(0, 1, count);
  if (hi < lo) [lo, hi] = [hi, lo];
  if (hi - lo < 1e-12) {
    const d = Math.abs(lo) * 0.1 || 1;
    lo -= d;
    hi += d;
  }
  const raw = (hi - lo) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
  const decimals = Math.min(6, Math.max(0, -Math.floor(Math.log10(step) + 1e-9)));
  const first = Math.floor(lo / step + 1e-9);
  const last = Math.ceil(hi / step - 1e-9);
  const ticks: number[] = [];
  for (let i = first; i <= last; i++) ticks.push(Number((i * step).toFixed(decimals)));
  return { lo: first * step, hi: last * step, step, ticks, decimals };
}

export interface PlotOptions {
  /** viewBox width and height (default 640 × 380) */
  width?: number;
  height?: number;
  /** the phase the detail view shows (ringed in the foreground colour) */
  current?: string;
}

export interface PlottedPoint {
  phase: string;
  x: number;
  y: number;
  /** PSNR 'inf' (or the reference itself): drawn on the top edge, at the ∞ tick */
  inf: boolean;
  style: PointStyle;
  onFront: boolean;
  recommended: boolean;
}

export interface TunePlot {
  width: number;
  height: number;
  /** the plot area inside the axes */
  area: { left: number; right: number; top: number; bottom: number };
  points: PlottedPoint[];
  /** the front's points in the report's order (fastest first) */
  front: PlottedPoint[];
  /** phases with no latency or no PSNR: in the table only */
  unplotted: string[];
  xTicks: { value: number; label: string; x: number }[];
  yTicks: { value: number; label: string; y: number }[];
  /** y of the ∞ row (null when no point has an infinite PSNR) */
  infY: number | null;
}

function psnrOf(p: TunePoint): number | 'inf' | null {
  if (p.psnrDb === 'inf') return 'inf';
  if (typeof p.psnrDb === 'number') return Number.isFinite(p.psnrDb) ? p.psnrDb : 'inf';
  // the baseline is the reference: identical to itself
  if (p.verdict === 'reference') return 'inf';
  return null;
}

const round = (v: number): number => Math.round(v * 10) / 10;

/** Where every point goes (pure; `tunePlotSvg` draws this). */
export function layoutTunePlot(report: TuneReport, options: PlotOptions = {}): TunePlot {
  const width = options.width ?? 640;
  const height = options.height ?? 380;
  const area = { left: 64, right: width - 24, top: 40, bottom: height - 48 };
  const front = new Set(report.front ?? []);
  const measured: { p: TunePoint; latency: number; psnr: number | 'inf' }[] = [];
  const unplotted: string[] = [];
  for (const p of report.points ?? []) {
    const psnr = psnrOf(p);
    const latency = p.latencyS;
    if (typeof latency !== 'number' || !Number.isFinite(latency) || latency < 0 || psnr === null)
      unplotted.push(p.phase);
    else measured.push({ p, latency, psnr });
  }
  const latencies = measured.map((m) => m.latency);
  const finite = measured.map((m) => m.psnr).filter((v): v is number => v !== 'inf');
  const hasInf = measured.some((m) => m.psnr === 'inf');

  const lMin = latencies.length ? Math.min(...latencies) : 0;
  const lMax = latencies.length ? Math.max(...latencies) : 1;
  const lPad = lMax > lMin ? (lMax - lMin) * 0.06 : Math.max(lMax * 0.1, 0.01);
  const xs = niceTicks(Math.max(0, lMin - lPad), lMax + lPad);
  const pMin = finite.length ? Math.min(...finite) : 20;
  const pMax = finite.length ? Math.max(...finite) : 50;
  const pPad = pMax > pMin ? (pMax - pMin) * 0.06 : 2;
  const ys = niceTicks(pMin - pPad, pMax + pPad);

  // the ∞ row sits on the top edge; the finite scale starts below a gap
  const infY = hasInf ? area.top : null;
  const finiteTop = hasInf ? area.top + 28 : area.top;
  const xOf = (v: number): number =>
    round(area.left + ((v - xs.lo) / (xs.hi - xs.lo)) * (area.right - area.left));
  const yOf = (v: number): number =>
    round(area.bottom - ((v - ys.lo) / (ys.hi - ys.lo)) * (area.bottom - finiteTop));

  const points: PlottedPoint[] = measured.map(({ p, latency, psnr }) => ({
    phase: p.phase,
    x: xOf(latency),
    y: psnr === 'inf' ? (infY as number) : yOf(psnr),
    inf: psnr === 'inf',
    style: pointStyle(p),
    onFront: front.has(p.phase) || p.onFront === true,
    recommended: report.recommended === p.phase,
  }));
  const byPhase = new Map(points.map((p) => [p.phase, p]));
  const frontPoints = (report.front ?? [])
    .map((id) => byPhase.get(id))
    .filter((p): p is PlottedPoint => p !== undefined);
  return {
    width,
    height,
    area,
    points,
    front: frontPoints,
    unplotted,
    xTicks: xs.ticks.map((v) => ({ value: v, label: v.toFixed(xs.decimals), x: xOf(v) })),
    yTicks: ys.ticks.map((v) => ({ value: v, label: v.toFixed(ys.decimals), y: yOf(v) })),
    infY,
  };
}

function pointTitle(p: TunePoint | undefined, plotted: PlottedPoint): string {
  if (!p) return plotted.phase;
  const psnr = p.psnrDb === 'inf' || plotted.inf ? '∞' : (p.psnrDb ?? 0).toFixed(2);
  const parts = [
    plotted.phase,
    `${(p.latencyS ?? 0).toFixed(3)} s`,
    `PSNR ${psnr} dB`,
    typeof p.ssim === 'number' ? `SSIM ${p.ssim.toFixed(4)}` : undefined,
    typeof p.speedup === 'number' ? `${p.speedup.toFixed(2)}×` : undefined,
    (p.verdict ?? p.status ?? '').replace(/_/g, ' ') || undefined,
    plotted.recommended ? 'recommended' : plotted.onFront ? 'on the front' : undefined,
  ];
  return parts.filter(Boolean).join(' · ');
}

function marker(p: PlottedPoint): string {
  const { x, y } = p;
  switch (p.style) {
    case 'fail':
      return `<path class="tp-mark" d="M${x - 4.5} ${y - 4.5}L${x + 4.5} ${y + 4.5}M${x - 4.5} ${y + 4.5}L${x + 4.5} ${y - 4.5}"/>`;
    case 'reference':
      return `<rect class="tp-mark" x="${x - 4.5}" y="${y - 4.5}" width="9" height="9"/>`;
    default:
      return `<circle class="tp-mark" cx="${x}" cy="${y}" r="4.5"/>`;
  }
}

/**
 * Where a point's label goes: of the four places beside it (right or left, above or below), the
 * one that covers the fewest other markers and stays inside the plot area (first wins a tie).
 */
export function labelPosition(
  p: PlottedPoint,
  text: string,
  plot: Pick<TunePlot, 'area' | 'points'>,
): { x: number; y: number; anchor: 'start' | 'end' } {
  const width = 6.5 * Array.from(text).length;
  const height = 12;
  const preferLeft = p.x > (plot.area.left + plot.area.right) / 2;
  const sides: ('start' | 'end')[] = preferLeft ? ['end', 'start'] : ['start', 'end'];
  const rows = p.inf ? [p.y + 17, p.y - 9] : [p.y - 9, p.y + 17];
  let best: { x: number; y: number; anchor: 'start' | 'end'; cost: number } | undefined;
  for (const y of rows)
    for (const anchor of sides) {
      const x = anchor === 'start' ? p.x + 11 : p.x - 11;
      const left = anchor === 'start' ? x : x - width;
      const box = { left: left - 5, right: left + width + 5, top: y - height - 4, bottom: y + 5 };
      let cost = plot.points.filter(
        (q) =>
          q !== p && q.x >= box.left && q.x <= box.right && q.y >= box.top && q.y <= box.bottom,
      ).length;
      if (left < plot.area.left || left + width > plot.area.right + 20) cost += 10;
      if (y - height < plot.area.top - 2 || y > plot.area.bottom) cost += 10;
      if (!best || cost < best.cost) best = { x: round(x), y: round(y), anchor, cost };
    }
  const { x, y, anchor } = best as { x: number; y: number; anchor: 'start' | 'end' };
  return { x, y, anchor };
}

/** The plot as an SVG document (text). */
export function tunePlotSvg(report: TuneReport, options: PlotOptions = {}): string {
  const plot = layoutTunePlot(report, options);
  const { area, width, height } = plot;
  const byPhase = new Map((report.points ?? []).map((p) => [p.phase, p]));
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" class="tune-plot" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-labelledby="tp-title">`,
    `<title id="tp-title">${xmlEscape(
      `Tune: latency against PSNR of ${plot.points.length} point(s)` +
        (report.recommended ? `; recommended ${report.recommended}` : '; no recommendation'),
    )}</title>`,
  ];
  // grid and axes
  out.push('<g class="tp-grid">');
  for (const t of plot.xTicks)
    out.push(`<line x1="${t.x}" y1="${area.top}" x2="${t.x}" y2="${area.bottom}"/>`);
  for (const t of plot.yTicks)
    out.push(`<line x1="${area.left}" y1="${t.y}" x2="${area.right}" y2="${t.y}"/>`);
  if (plot.infY !== null)
    out.push(
      `<line class="tp-inf-line" x1="${area.left}" y1="${plot.infY}" x2="${area.right}" y2="${plot.infY}"/>`,
    );
  out.push('</g>');
  out.push(
    `<g class="tp-axis"><line x1="${area.left}" y1="${area.bottom}" x2="${area.right}" y2="${area.bottom}"/>` +
      `<line x1="${area.left}" y1="${area.top}" x2="${area.left}" y2="${area.bottom}"/></g>`,
  );
  out.push('<g class="tp-ticks">');
  for (const t of plot.xTicks)
    out.push(
      `<line x1="${t.x}" y1="${area.bottom}" x2="${t.x}" y2="${area.bottom + 5}"/>` +
        `<text class="tp-xtick" x="${t.x}" y="${area.bottom + 18}" text-anchor="middle">${xmlEscape(t.label)}</text>`,
    );
  for (const t of plot.yTicks)
    out.push(
      `<line x1="${area.left - 5}" y1="${t.y}" x2="${area.left}" y2="${t.y}"/>` +
        `<text class="tp-ytick" x="${area.left - 8}" y="${t.y + 4}" text-anchor="end">${xmlEscape(t.label)}</text>`,
    );
  if (plot.infY !== null)
    out.push(
      `<line x1="${area.left - 5}" y1="${plot.infY}" x2="${area.left}" y2="${plot.infY}"/>` +
        `<text class="tp-ytick tp-inf" x="${area.left - 8}" y="${plot.infY + 4}" text-anchor="end">∞</text>`,
    );
  out.push('</g>');
  out.push(
    `<text class="tp-label" x="${(area.left + area.right) / 2}" y="${height - 10}" text-anchor="middle">latency (s)</text>`,
    `<text class="tp-label" x="14" y="${(area.top + area.bottom) / 2}" text-anchor="middle" transform="rotate(-90 14 ${(area.top + area.bottom) / 2})">PSNR (dB)</text>`,
  );
  // legend, in the top margin
  const legend: [string, string][] = [
    ['pass', 'passed'],
    ['not-exercised', 'not exercised'],
    ['fail', 'failed'],
    ['front', 'Pareto front'],
    ['recommended', 'recommended'],
  ];
  out.push('<g class="tp-legend">');
  legend.forEach(([cls, label], i) => {
    const x = area.left + i * 112;
    const y = 14;
    let mark: string;
    if (cls === 'front')
      mark = `<line class="tp-front" x1="${x - 6}" y1="${y}" x2="${x + 6}" y2="${y}"/>`;
    else if (cls === 'recommended')
      mark = `<circle class="tp-recommended-ring" cx="${x}" cy="${y}" r="6"/>`;
    else
      mark = `<g class="tp-point tp-${cls}">${marker({ phase: '', x, y, inf: false, style: cls as PointStyle, onFront: false, recommended: false })}</g>`;
    out.push(`${mark}<text x="${x + 10}" y="${y + 4}">${xmlEscape(label)}</text>`);
  });
  out.push('</g>');
  // the front: a line through its points, fastest first
  if (plot.front.length > 1)
    out.push(
      `<polyline class="tp-front" points="${plot.front.map((p) => `${p.x},${p.y}`).join(' ')}"/>`,
    );
  // points: the recommendation and the current phase last, so they are drawn on top
  const order = [...plot.points].sort(
    (a, b) =>
      Number(a.recommended || a.phase === options.current) -
      Number(b.recommended || b.phase === options.current),
  );
  for (const p of order) {
    const classes = ['tp-point', `tp-${p.style}`];
    if (p.onFront) classes.push('tp-on-front');
    if (p.recommended) classes.push('tp-recommended');
    if (p.phase === options.current) classes.push('tp-current');
    const rings: string[] = [];
    if (p.phase === options.current)
      rings.push(`<circle class="tp-current-ring" cx="${p.x}" cy="${p.y}" r="11"/>`);
    if (p.recommended)
      rings.push(`<circle class="tp-recommended-ring" cx="${p.x}" cy="${p.y}" r="8"/>`);
    let label = '';
    if (p.recommended || p.style === 'reference') {
      const text = p.recommended ? '★ recommended' : p.phase;
      const at = labelPosition(p, text, plot);
      const cls = p.recommended ? 'tp-recommended-label' : 'tp-point-label';
      label = `<text class="${cls}" x="${at.x}" y="${at.y}" text-anchor="${at.anchor}">${xmlEscape(text)}</text>`;
    }
    out.push(
      `<g class="${classes.join(' ')}" data-phase="${xmlEscape(p.phase)}" data-x="${p.x}" data-y="${p.y}">` +
        `<title>${xmlEscape(pointTitle(byPhase.get(p.phase), p))}</title>` +
        rings.join('') +
        marker(p) +
        label +
        '</g>',
    );
  }
  if (plot.points.length === 0)
    out.push(
      `<text class="tp-empty" x="${(area.left + area.right) / 2}" y="${(area.top + area.bottom) / 2}" text-anchor="middle">no point has both a latency and a PSNR</text>`,
    );
  out.push('</svg>');
  return out.join('\n');
}
