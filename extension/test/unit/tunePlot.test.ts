/**
 * The `verify --tune` scatter plot (results/tunePlot.ts): points inside the plot area, the front
 * as a line in its order, the recommendation marked, infinite PSNR on the top edge labelled ∞,
 * every text escaped and colours only from theme-variable CSS classes.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import type { TuneReport, VerificationResult } from '../../src/contract/verification';
import {
  layoutTunePlot,
  niceTicks,
  pointStyle,
  tunePlotSvg,
  xmlEscape,
} from '../../src/results/tunePlot';
import { ROOT, golden } from './helpers';

const captured = (): TuneReport => {
  const tune = golden<VerificationResult>('result-tune-cpu.json').tune;
  assert.ok(tune);
  return tune;
};

/** A grid with every kind of point: failed, garbled, not exercised, warn, inf, no latency. */
const mixed: TuneReport = {
  points: [
    { phase: 'baseline', stage: 1, status: 'ok', verdict: 'reference', latencyS: 10, psnrDb: null },
    {
      phase: 'kernels-flash',
      stage: 1,
      status: 'ok',
      verdict: 'pass',
      latencyS: 8,
      psnrDb: 'inf',
      ssim: 1,
      attentionBackend: 'flash',
    },
    { phase: 'kernels-sage', stage: 1, status: 'ok', verdict: 'garbled', latencyS: 6, psnrDb: 31 },
    {
      phase: 'cache-fn1-bn0-rdt0.01-ws4',
      stage: 1,
      status: 'ok',
      verdict: 'not_exercised',
      latencyS: 10.2,
      psnrDb: 'inf',
      cachedSteps: 0,
    },
    {
      phase: 'cache-fn1-bn0-rdt0.12-ws4',
      stage: 1,
      status: 'ok',
      verdict: 'pass',
      latencyS: 5,
      psnrDb: 36,
    },
    {
      phase: 'cache-fn1-bn0-rdt0.3-ws4',
      stage: 1,
      status: 'ok',
      verdict: 'warn',
      latencyS: 4,
      psnrDb: 28,
    },
    {
      phase: 'cache-fn1-bn0-rdt1-ws4',
      stage: 1,
      status: 'ok',
      verdict: 'fail',
      latencyS: 3,
      psnrDb: 20,
    },
    {
      phase: 'tuned-flash-fn1-bn0-rdt0.12-ws4',
      stage: 2,
      status: 'ok',
      verdict: 'pass',
      latencyS: 4.5,
      psnrDb: 35,
    },
    { phase: 'kernels-flash-compile', stage: 2, status: 'failed', verdict: null, latencyS: null },
    { phase: 'parallel-tp-2', stage: 1, status: 'skipped', verdict: null, latencyS: null },
  ],
  front: ['tuned-flash-fn1-bn0-rdt0.12-ws4', 'cache-fn1-bn0-rdt0.12-ws4', 'kernels-flash'],
  recommended: 'tuned-flash-fn1-bn0-rdt0.12-ws4',
  python: '',
  cli: '',
  skipped: ['parallel-tp-2'],
  notes: [],
};

interface Drawn {
  phase: string;
  cls: string;
  x: number;
  y: number;
  body: string;
}

/** The point groups of the SVG, by their data attributes (unescaped phase names). */
function drawn(svg: string): Drawn[] {
  const out: Drawn[] = [];
  const re =
    /<g class="(tp-point[^"]*)" data-phase="([^"]*)" data-x="([^"]*)" data-y="([^"]*)">(.*?)<\/g>/g;
  for (const m of svg.matchAll(re)) {
    const phase = (m[2] ?? '')
      .replace(/&lt;/g, '<')
      .replace(/&gt;/g, '>')
      .replace(/&quot;/g, '"')
      .replace(/&#39;/g, "'")
      .replace(/&amp;/g, '&');
    out.push({ phase, cls: m[1] ?? '', x: Number(m[3]), y: Number(m[4]), body: m[5] ?? '' });
  }
  return out;
}

/** Tags well-formed enough for an XML parser: no stray `<`, `>` or `&` outside tags/entities. */
function assertWellFormedText(svg: string): void {
  const withoutTags = svg.replace(/<\/?[A-Za-z][^<>]*>/g, '');
  assert.doesNotMatch(withoutTags, /[<>]/, 'a < or > outside a tag');
  assert.doesNotMatch(
    svg.replace(/&(amp|lt|gt|quot|#39);/g, ''),
    /&/,
    'an & that is not one of the escapes',
  );
  const opened = (svg.match(/<g[\s>]/g) ?? []).length;
  const closed = (svg.match(/<\/g>/g) ?? []).length;
  assert.equal(opened, closed, 'every <g> is closed');
}

describe('tune plot: layout', () => {
  it('maps every measured point of a captured run inside the plot area, ordered by its values', () => {
    const report = captured();
    const plot = layoutTunePlot(report);
    assert.equal(plot.points.length, report.points?.length);
    assert.deepEqual(plot.unplotted, []);
    for (const p of plot.points) {
      assert.ok(p.x >= plot.area.left && p.x <= plot.area.right, `${p.phase} x ${p.x}`);
      assert.ok(p.y >= plot.area.top && p.y <= plot.area.bottom, `${p.phase} y ${p.y}`);
    }
    // slower -> further right; higher PSNR -> higher up (smaller y)
    const byPhase = new Map(plot.points.map((p) => [p.phase, p]));
    const points = (report.points ?? []).filter((p) => typeof p.psnrDb === 'number');
    for (const a of points)
      for (const b of points) {
        const pa = byPhase.get(a.phase);
        const pb = byPhase.get(b.phase);
        assert.ok(pa && pb);
        if ((a.latencyS ?? 0) < (b.latencyS ?? 0))
          assert.ok(pa.x < pb.x, `${a.phase} left of ${b.phase}`);
        if ((a.psnrDb as number) > (b.psnrDb as number))
          assert.ok(pa.y < pb.y, `${a.phase} above ${b.phase}`);
      }
  });

  it('the reference and an "inf" PSNR sit on the top edge, above every finite value', () => {
    const plot = layoutTunePlot(mixed);
    assert.equal(plot.infY, plot.area.top);
    const byPhase = new Map(plot.points.map((p) => [p.phase, p]));
    for (const id of ['baseline', 'kernels-flash', 'cache-fn1-bn0-rdt0.01-ws4']) {
      assert.equal(byPhase.get(id)?.y, plot.area.top, id);
      assert.equal(byPhase.get(id)?.inf, true, id);
    }
    const finite = plot.points.filter((p) => !p.inf);
    assert.ok(finite.length >= 5);
    for (const p of finite) assert.ok(p.y > plot.area.top + 20, `${p.phase} below the ∞ row`);
    for (const t of plot.yTicks) assert.ok(t.y > plot.area.top + 20, `tick ${t.label} below ∞`);
    // points without a latency are left to the table
    assert.deepEqual(plot.unplotted, ['kernels-flash-compile', 'parallel-tp-2']);
  });

  it('ticks are round numbers that cover the values', () => {
    const t = niceTicks(0.27, 0.61);
    assert.deepEqual(t.ticks, [0.2, 0.3, 0.4, 0.5, 0.6, 0.7]);
    assert.equal(t.decimals, 1);
    assert.deepEqual(
      niceTicks(0.27, 0.61, 10).ticks,
      [0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65],
    );
    assert.deepEqual(niceTicks(31, 152).ticks, [0, 50, 100, 150, 200]);
    const flat = niceTicks(5, 5);
    assert.ok(flat.lo < 5 && flat.hi > 5);
    assert.ok(niceTicks(Number.NaN, 1).ticks.every(Number.isFinite));
  });

  it('how each point is drawn', () => {
    assert.equal(pointStyle({ status: 'ok', verdict: 'pass' }), 'pass');
    assert.equal(pointStyle({ status: 'ok', verdict: 'garbled' }), 'fail');
    assert.equal(pointStyle({ status: 'ok', verdict: 'not_exercised' }), 'not-exercised');
    assert.equal(pointStyle({ status: 'timeout', verdict: 'pass' }), 'fail');
    assert.equal(pointStyle({ status: 'ok', verdict: 'reference' }), 'reference');
  });
});

describe('tune plot: SVG', () => {
  it('draws every plotted point inside the viewBox, with a title', () => {
    const svg = tunePlotSvg(mixed);
    const m = /viewBox="0 0 (\d+) (\d+)"/.exec(svg);
    assert.ok(m);
    const [w, h] = [Number(m[1]), Number(m[2])];
    const points = drawn(svg);
    assert.equal(points.length, 8);
    for (const p of points) {
      assert.ok(p.x > 0 && p.x < w && p.y > 0 && p.y < h, `${p.phase} at ${p.x},${p.y}`);
      assert.match(p.body, /^<title>[^<]+<\/title>/, p.phase);
    }
    assert.doesNotMatch(svg, /NaN|undefined|Infinity/);
    assertWellFormedText(svg);
  });

  it('passing points filled, failed crossed, not exercised hollow', () => {
    const points = new Map(drawn(tunePlotSvg(mixed)).map((p) => [p.phase, p]));
    const pass = points.get('cache-fn1-bn0-rdt0.12-ws4');
    assert.match(pass?.cls ?? '', /\btp-pass\b/);
    assert.match(pass?.body ?? '', /<circle class="tp-mark"/);
    assert.match(points.get('cache-fn1-bn0-rdt0.3-ws4')?.cls ?? '', /\btp-warn\b/);
    for (const id of ['kernels-sage', 'cache-fn1-bn0-rdt1-ws4']) {
      assert.match(points.get(id)?.cls ?? '', /\btp-fail\b/, id);
      assert.match(points.get(id)?.body ?? '', /<path class="tp-mark" d="M[^"]+L[^"]+M[^"]+L/, id);
    }
    assert.match(points.get('cache-fn1-bn0-rdt0.01-ws4')?.cls ?? '', /\btp-not-exercised\b/);
    assert.match(points.get('baseline')?.cls ?? '', /\btp-reference\b/);
    // the filling is the stylesheet's: passed filled, the others not
    const css = fs.readFileSync(path.join(ROOT, 'extension', 'media', 'common.css'), 'utf8');
    const rule = (sel: string): string => {
      const i = css.indexOf(`${sel} .tp-mark {`);
      assert.ok(i >= 0, sel);
      return css.slice(i, css.indexOf('}', i));
    };
    assert.match(rule('.tune-plot .tp-pass'), /fill: var\(--vscode-testing-iconPassed\)/);
    assert.match(rule('.tune-plot .tp-fail'), /fill: none/);
    assert.match(rule('.tune-plot .tp-not-exercised'), /fill: none/);
  });

  it('joins the front in its order, fastest first', () => {
    const svg = tunePlotSvg(mixed);
    const points = new Map(drawn(svg).map((p) => [p.phase, p]));
    const line = /<polyline class="tp-front" points="([^"]+)"\/>/.exec(svg);
    assert.ok(line, 'a front line');
    const expected = (mixed.front ?? []).map((id) => {
      const p = points.get(id);
      assert.ok(p, id);
      return `${p.x},${p.y}`;
    });
    assert.equal(line[1], expected.join(' '));
    const xs = expected.map((p) => Number(p.split(',')[0]));
    assert.deepEqual(
      xs,
      [...xs].sort((a, b) => a - b),
    );
    // captured run: the front ends at the baseline on the ∞ row
    const captureSvg = tunePlotSvg(captured());
    const captureLine = /<polyline class="tp-front" points="([^"]+)"\/>/.exec(captureSvg);
    assert.equal(captureLine?.[1]?.split(' ').length, captured().front?.length);
  });

  it('marks the recommended point, and only that one', () => {
    const svg = tunePlotSvg(mixed);
    const recommended = drawn(svg).filter((p) => /\btp-recommended(?![-\w])/.test(p.cls));
    assert.deepEqual(
      recommended.map((p) => p.phase),
      ['tuned-flash-fn1-bn0-rdt0.12-ws4'],
    );
    assert.match(recommended[0]?.body ?? '', /<circle class="tp-recommended-ring"/);
    assert.match(recommended[0]?.body ?? '', /★ recommended<\/text>/);
    assert.match(svg, /<title id="tp-title">[^<]*recommended tuned-flash-fn1-bn0-rdt0\.12-ws4/);
    const none = tunePlotSvg({ ...mixed, recommended: null });
    assert.doesNotMatch(none, /class="[^"]*tp-recommended(?![-\w])/);
    assert.equal((none.match(/tp-recommended-ring/g) ?? []).length, 1, 'the legend only');
    assert.match(none, /no recommendation/);
  });

  it('labels the infinite PSNR ∞ on the y axis, only when a point has it', () => {
    const svg = tunePlotSvg(mixed);
    assert.match(svg, /<text class="tp-ytick tp-inf"[^>]*>∞<\/text>/);
    const finiteOnly: TuneReport = {
      ...mixed,
      points: (mixed.points ?? []).filter((p) => typeof p.psnrDb === 'number'),
    };
    assert.doesNotMatch(tunePlotSvg(finiteOnly), /∞<\/text>/);
  });

  it('marks the phase the detail view shows', () => {
    const svg = tunePlotSvg(mixed, { current: 'kernels-sage' });
    const sage = drawn(svg).find((p) => p.phase === 'kernels-sage');
    assert.match(sage?.cls ?? '', /\btp-current\b/);
    assert.match(sage?.body ?? '', /tp-current-ring/);
  });

  it('escapes phase names and holds no script, handler, inline style or link', () => {
    const evil: TuneReport = {
      ...mixed,
      points: [
        ...(mixed.points ?? []),
        {
          phase: '<x>',
          status: 'ok',
          verdict: 'reference',
          latencyS: 7,
          psnrDb: null,
        },
        {
          phase: `a"b'&c</title><script>alert(1)</script>\u0001`,
          status: 'ok',
          verdict: 'pass',
          latencyS: 6.5,
          psnrDb: 33,
        },
      ],
      recommended: '<x>',
      front: ['<x>'],
    };
    const svg = tunePlotSvg(evil);
    assert.ok(!svg.includes('<x>'), 'the raw name');
    assert.ok(!svg.includes('<script'), 'a script element');
    assert.ok(svg.includes('data-phase="&lt;x&gt;"'));
    assert.ok(svg.includes('recommended &lt;x&gt;'));
    assert.ok(svg.includes('a&quot;b&#39;&amp;c&lt;/title&gt;&lt;script&gt;'));
    assert.ok(!svg.includes('\u0001'), 'a control character XML forbids');
    const names = drawn(svg).map((p) => p.phase);
    assert.ok(names.includes('<x>'));
    assertWellFormedText(svg);
    assert.doesNotMatch(svg, /\son[a-z]+\s*=|\sstyle\s*=|href|<foreignObject|javascript:/i);
    assert.equal(xmlEscape(`<&>"'`), '&lt;&amp;&gt;&quot;&#39;');
  });

  it('colours come from classes defined with theme variables, never from literals', () => {
    const svg = tunePlotSvg(mixed, { current: 'baseline' });
    assert.doesNotMatch(svg, /#[0-9a-f]{3,8}\b|rgb\(|\s(fill|stroke)="/i);
    const css = fs.readFileSync(path.join(ROOT, 'extension', 'media', 'common.css'), 'utf8');
    const used = new Set(
      [...svg.matchAll(/class="([^"]+)"/g)].flatMap((m) => (m[1] ?? '').split(' ')),
    );
    for (const cls of [
      'tp-pass',
      'tp-warn',
      'tp-fail',
      'tp-not-exercised',
      'tp-reference',
      'tp-front',
      'tp-recommended-ring',
      'tp-current-ring',
    ]) {
      assert.ok(used.has(cls), `${cls} is used`);
      const i = css.indexOf(`.${cls}`);
      assert.ok(i >= 0, `.${cls} is styled`);
      assert.match(css.slice(i, css.indexOf('}', i)), /var\(--vscode-[a-zA-Z-]+\)/, cls);
    }
  });

  it('an empty report still draws axes and says why there are no points', () => {
    const svg = tunePlotSvg({ points: [], front: [], recommended: null });
    assert.match(svg, /no point has both a latency and a PSNR/);
    assert.equal(drawn(svg).length, 0);
    assertWellFormedText(svg);
  });
});
