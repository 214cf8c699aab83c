// A small line chart as inline SVG: one polyline and its points per series,
// optional log2 x axis (concurrency sweeps), 0-based linear y axis.

export interface Series {
  name: string;
  /** lo / hi: the spread of y (over rounds), drawn as a bar through the point. */
  points: { x: number; y: number; lo?: number; hi?: number }[];
  /** Dashed line (e.g. p99 beside p50). */
  dashed?: boolean;
  /** Series with the same key share a color (one color per target across plots). */
  colorKey?: string;
}

export interface LineChartOptions {
  id: string;
  title: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  logX?: boolean;
  width?: number;
  height?: number;
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];

export function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}

/** Round tick step: 1, 2 or 5 times a power of ten, about `count` ticks. */
export function niceStep(max: number, count = 5): number {
  if (!(max > 0)) return 1;
  const raw = max / count;
  const pow = 10 ** Math.floor(Math.log10(raw));
  const m = raw / pow;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * pow;
}

function fmt(v: number): string {
  if (v === 0) return '0';
  if (Math.abs(v) >= 1000) return `${Math.round(v / 100) / 10}k`;
  return String(Math.round(v * 100) / 100);
}

/** A series' color is picked by its colorKey's place in `colorKeys`, else by its own place. */
export function lineChart(opts: LineChartOptions, colorKeys: string[] = []): string {
  const width = opts.width ?? 640;
  const height = opts.height ?? 340;
  const pad = { left: 64, right: 16, top: 32, bottom: 72 };
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const finite = opts.series.flatMap((s) => s.points).filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y));
  const xs = [...new Set(finite.map((p) => p.x))].sort((a, b) => a - b);
  const tx = (x: number) => (opts.logX ? Math.log2(Math.max(x, 1e-9)) : x);
  const xMin = xs.length ? tx(xs[0]!) : 0;
  const xMax = xs.length ? tx(xs.at(-1)!) : 1;
  const xSpan = xMax - xMin || 1;
  const top = Math.max(0, ...finite.map((p) => Math.max(p.y, Number.isFinite(p.hi) ? p.hi! : 0)));
  const yStep = niceStep(top);
  const yMax = Math.max(yStep, Math.ceil(top / yStep) * yStep);
  const px = (x: number) => pad.left + (xs.length === 1 ? plotW / 2 : ((tx(x) - xMin) / xSpan) * plotW);
  const py = (y: number) => pad.top + plotH - (y / yMax) * plotH;
  const out: string[] = [];
  out.push(svgOpen(opts.id, width, height));
  out.push(`<text x="${width / 2}" y="18" text-anchor="middle" font-size="13" font-weight="bold">${escapeXml(opts.title)}</text>`);
  for (let y = 0; y <= yMax + yStep / 2; y += yStep) {
    out.push(`<line x1="${pad.left}" x2="${pad.left + plotW}" y1="${py(y)}" y2="${py(y)}" stroke="#ddd"/>`);
    out.push(`<text x="${pad.left - 6}" y="${py(y) + 4}" text-anchor="end">${fmt(y)}</text>`);
  }
  for (const x of xs) {
    out.push(`<line x1="${px(x)}" x2="${px(x)}" y1="${pad.top}" y2="${pad.top + plotH}" stroke="#eee"/>`);
    out.push(`<text x="${px(x)}" y="${pad.top + plotH + 16}" text-anchor="middle">${fmt(x)}</text>`);
  }
  out.push(`<rect x="${pad.left}" y="${pad.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#888"/>`);
  out.push(`<text x="${pad.left + plotW / 2}" y="${pad.top + plotH + 34}" text-anchor="middle">${escapeXml(opts.xLabel)}</text>`);
  out.push(`<text transform="translate(14 ${pad.top + plotH / 2}) rotate(-90)" text-anchor="middle">${escapeXml(opts.yLabel)}</text>`);
  opts.series.forEach((s, i) => {
    const keyIndex = colorKeys.indexOf(s.colorKey ?? s.name);
    const color = COLORS[(keyIndex >= 0 ? keyIndex : i) % COLORS.length]!;
    const pts = s.points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y)).sort((a, b) => a.x - b.x);
    const name = escapeXml(s.name);
    if (pts.length > 0) {
      const d = pts.map((p, j) => `${j ? 'L' : 'M'}${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(' ');
      out.push(`<path class="series" data-series="${name}" d="${d}" fill="none" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5 3"' : ''}/>`);
    }
    for (const p of pts) {
      if (Number.isFinite(p.lo) && Number.isFinite(p.hi) && p.hi! > p.lo!) out.push(spreadBar(px(p.x), py(p.lo!), py(p.hi!), color, name));
      out.push(`<circle class="point" data-series="${name}" cx="${px(p.x).toFixed(1)}" cy="${py(p.y).toFixed(1)}" r="3" fill="${color}"><title>${name}: ${fmt(p.x)}, ${fmt(p.y)}</title></circle>`);
    }
    const lx = pad.left + (i % 3) * (plotW / 3);
    const ly = pad.top + plotH + 52 + Math.floor(i / 3) * 14;
    out.push(`<line x1="${lx}" x2="${lx + 18}" y1="${ly - 4}" y2="${ly - 4}" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5 3"' : ''}/>`);
    out.push(`<text x="${lx + 22}" y="${ly}">${name}</text>`);
  });
  out.push('</svg>');
  return out.join('\n');
}

/** Charts scale to the width of their container (viewBox), keeping their proportions. */
function svgOpen(id: string, width: number, height: number): string {
  return `<svg xmlns="http://www.w3.org/2000/svg" class="plot" id="${escapeXml(id)}" width="100%" `
    + `viewBox="0 0 ${width} ${height}" preserveAspectRatio="xMidYMid meet" font-family="sans-serif" font-size="11">`;
}

/** The spread of a value (min to max over rounds): a vertical bar with caps. */
function spreadBar(x: number, yLo: number, yHi: number, color: string, name: string): string {
  const cap = (y: number) => `<line x1="${(x - 4).toFixed(1)}" x2="${(x + 4).toFixed(1)}" y1="${y.toFixed(1)}" y2="${y.toFixed(1)}" stroke="${color}"/>`;
  return `<g class="spread" data-series="${name}"><line x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${yLo.toFixed(1)}" `
    + `y2="${yHi.toFixed(1)}" stroke="${color}" stroke-width="1.5"/>${cap(yLo)}${cap(yHi)}</g>`;
}

export interface Bar {
  label: string;
  value: number;
  lo?: number;
  hi?: number;
  /** A color of its own (better / worse); else the palette's, by colorKey. */
  color?: string;
  colorKey?: string;
  /** A class on the bar (e.g. "better", "worse"). */
  cls?: string;
}

export interface BarChartOptions {
  id: string;
  title: string;
  yLabel: string;
  bars: Bar[];
  /** A dashed horizontal line at this value (1 for ratios). */
  reference?: number;
  width?: number;
  height?: number;
}

/** Bars with their spread: one level's figures per target, or ratios against a reference line. */
export function barChart(opts: BarChartOptions, colorKeys: string[] = []): string {
  const width = opts.width ?? 640;
  const height = opts.height ?? 340;
  const pad = { left: 64, right: 16, top: 32, bottom: 56 };
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const bars = opts.bars.filter((b) => Number.isFinite(b.value));
  const top = Math.max(0, opts.reference ?? 0, ...bars.map((b) => Math.max(b.value, Number.isFinite(b.hi) ? b.hi! : 0)));
  const yStep = niceStep(top);
  const yMax = Math.max(yStep, Math.ceil(top / yStep) * yStep);
  const py = (y: number) => pad.top + plotH - (y / yMax) * plotH;
  const slot = plotW / Math.max(1, bars.length);
  const barW = Math.min(72, slot * 0.6);
  const out: string[] = [svgOpen(opts.id, width, height)];
  out.push(`<text x="${width / 2}" y="18" text-anchor="middle" font-size="13" font-weight="bold">${escapeXml(opts.title)}</text>`);
  for (let y = 0; y <= yMax + yStep / 2; y += yStep) {
    out.push(`<line x1="${pad.left}" x2="${pad.left + plotW}" y1="${py(y)}" y2="${py(y)}" stroke="#ddd"/>`);
    out.push(`<text x="${pad.left - 6}" y="${py(y) + 4}" text-anchor="end">${fmt(y)}</text>`);
  }
  out.push(`<rect x="${pad.left}" y="${pad.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#888"/>`);
  out.push(`<text transform="translate(14 ${pad.top + plotH / 2}) rotate(-90)" text-anchor="middle">${escapeXml(opts.yLabel)}</text>`);
  bars.forEach((b, i) => {
    const keyIndex = colorKeys.indexOf(b.colorKey ?? b.label);
    const color = b.color ?? COLORS[(keyIndex >= 0 ? keyIndex : i) % COLORS.length]!;
    const cx = pad.left + slot * (i + 0.5);
    const name = escapeXml(b.label);
    out.push(`<rect class="bar${b.cls ? ` ${b.cls}` : ''}" data-series="${name}" x="${(cx - barW / 2).toFixed(1)}" `
      + `y="${py(b.value).toFixed(1)}" width="${barW.toFixed(1)}" height="${(py(0) - py(b.value)).toFixed(1)}" fill="${color}" `
      + `fill-opacity="0.8"><title>${name}: ${fmt(b.value)}</title></rect>`);
    if (Number.isFinite(b.lo) && Number.isFinite(b.hi) && b.hi! > b.lo!) out.push(spreadBar(cx, py(b.lo!), py(b.hi!), '#333', name));
    out.push(`<text x="${cx.toFixed(1)}" y="${(py(b.value) - 4).toFixed(1)}" text-anchor="middle">${fmt(b.value)}</text>`);
    out.push(`<text x="${cx.toFixed(1)}" y="${pad.top + plotH + 16}" text-anchor="middle">${name}</text>`);
  });
  if (opts.reference !== undefined) {
    out.push(`<line class="reference" x1="${pad.left}" x2="${pad.left + plotW}" y1="${py(opts.reference)}" y2="${py(opts.reference)}" `
      + 'stroke="#333" stroke-dasharray="6 4"/>');
  }
  out.push('</svg>');
  return out.join('\n');
}
