// Inline SVG drawings for the report panel: the search's best latency and % of peak per iteration, and
// horizontal bars. Plain strings, no DOM and no `vscode`, so they are unit-tested under Node. Colours
// come from the webview's theme variables (set by the panel's stylesheet through CSS classes).

import { escapeHtml } from './escape';
import { IterationPoint, formatLatency, formatPercent } from './model';

export interface PlotSize {
  width: number;
  panelHeight: number;
}

const DEFAULT_SIZE: PlotSize = { width: 560, panelHeight: 140 };
const MARGIN = { left: 58, right: 16, top: 22, bottom: 26 };

/** About `count` round tick values covering [low, high] (steps of 1, 2 or 5 times a power of ten). */
export function niceTicks(low: number, high: number, count = 4): number[] {
  if (!Number.isFinite(low) || !Number.isFinite(high)) {
    return [];
  }
  if (high < low) {
    [low, high] = [high, low];
  }
  if (high === low) {
    const pad = low === 0 ? 1 : Math.abs(low) * 0.1;
    low -= pad;
    high += pad;
  }
  const rough = (high - low) / Math.max(1, count);
  const magnitude = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= rough) ?? 10 * magnitude;
  const ticks: number[] = [];
  const first = Math.floor(low / step) * step;
  for (let value = first; value <= high + step * 1e-9; value += step) {
    ticks.push(Number(value.toPrecision(12)));
    if (ticks.length > 50) {
      break;
    }
  }
  if (ticks[ticks.length - 1] < high) {
    ticks.push(Number((ticks[ticks.length - 1] + step).toPrecision(12)));
  }
  return ticks;
}

function fmt(value: number): string {
  return Number(value.toFixed(2)).toString();
}

function tickLabel(value: number): string {
  return Number(value.toPrecision(4)).toString();
}

interface Series {
  title: string;
  unit: (value: number) => string;
  className: string;
  values: { x: number; y: number }[];
}

function panel(series: Series, xTicks: number[], top: number, size: PlotSize): string {
  const plotLeft = MARGIN.left;
  const plotRight = size.width - MARGIN.right;
  const plotTop = top + MARGIN.top;
  const plotBottom = top + size.panelHeight - MARGIN.bottom;
  const parts: string[] = [];
  parts.push(`<text class="plot-title" x="${plotLeft}" y="${fmt(top + 14)}">${escapeHtml(series.title)}</text>`);
  if (series.values.length === 0) {
    parts.push(`<text class="plot-empty" x="${fmt((plotLeft + plotRight) / 2)}" y="${fmt((plotTop + plotBottom) / 2)}" `
      + `text-anchor="middle">no data yet</text>`);
    return parts.join('');
  }
  const ys = series.values.map((point) => point.y);
  const yTicks = niceTicks(Math.min(...ys), Math.max(...ys));
  const yLow = yTicks[0];
  const yHigh = yTicks[yTicks.length - 1];
  const xLow = xTicks[0];
  const xHigh = xTicks[xTicks.length - 1];
  const sx = (x: number) => plotLeft + ((x - xLow) / (xHigh - xLow || 1)) * (plotRight - plotLeft);
  const sy = (y: number) => plotBottom - ((y - yLow) / (yHigh - yLow || 1)) * (plotBottom - plotTop);
  for (const tick of yTicks) {
    const y = fmt(sy(tick));
    parts.push(`<line class="plot-grid" x1="${plotLeft}" x2="${plotRight}" y1="${y}" y2="${y}"/>`);
    parts.push(`<text class="plot-tick" x="${plotLeft - 6}" y="${y}" text-anchor="end" dominant-baseline="middle">`
      + `${escapeHtml(series.unit(tick))}</text>`);
  }
  for (const tick of xTicks) {
    const x = fmt(sx(tick));
    parts.push(`<line class="plot-axis" x1="${x}" x2="${x}" y1="${fmt(plotBottom)}" y2="${fmt(plotBottom + 4)}"/>`);
    parts.push(`<text class="plot-tick" x="${x}" y="${fmt(plotBottom + 16)}" text-anchor="middle">${tickLabel(tick)}</text>`);
  }
  parts.push(`<line class="plot-axis" x1="${plotLeft}" x2="${plotRight}" y1="${fmt(plotBottom)}" y2="${fmt(plotBottom)}"/>`);
  const path = series.values.map((point, index) => `${index === 0 ? 'M' : 'L'}${fmt(sx(point.x))},${fmt(sy(point.y))}`);
  parts.push(`<path class="plot-line ${series.className}" d="${path.join(' ')}" fill="none"/>`);
  for (const point of series.values) {
    parts.push(`<circle class="plot-dot ${series.className}" cx="${fmt(sx(point.x))}" cy="${fmt(sy(point.y))}" r="3">`
      + `<title>iteration ${tickLabel(point.x)}: ${escapeHtml(series.unit(point.y))}</title></circle>`);
  }
  return parts.join('');
}

/**
 * Two stacked line plots sharing the iteration axis: the best latency so far (ms) and its % of peak.
 * Returns an `<svg>` element with a text alternative; an empty history gives a short note instead.
 */
export function historyPlotSvg(history: readonly IterationPoint[], size: PlotSize = DEFAULT_SIZE): string {
  if (history.length === 0) {
    return '<p class="muted">No search has run for this kernel yet. Run <b>Optimize Kernel</b> to see its progress here.</p>';
  }
  const iterations = history.map((point) => point.iteration);
  const first = Math.min(...iterations);
  const xTicks = niceTicks(first, Math.max(first + 1, ...iterations), Math.min(6, Math.max(1, history.length - 1)));
  // Microseconds when every latency is below 0.1 ms, so the axis reads 9.3 rather than 0.0093.
  const latencies = history.flatMap((p) => (p.bestLatencyMs === null ? [] : [p.bestLatencyMs]));
  const micro = latencies.length > 0 && Math.max(...latencies) < 0.1;
  const scale = micro ? 1000 : 1;
  const latency: Series = {
    title: `Best latency (${micro ? 'µs' : 'ms'})`,
    unit: (v) => tickLabel(v),
    className: 'series-latency',
    values: history.flatMap((p) => (p.bestLatencyMs === null ? [] : [{ x: p.iteration, y: p.bestLatencyMs * scale }])),
  };
  const peak: Series = {
    title: 'Best % of peak',
    unit: (v) => formatPercent(v),
    className: 'series-peak',
    values: history.flatMap((p) => (p.bestPeakPercent === null ? [] : [{ x: p.iteration, y: p.bestPeakPercent }])),
  };
  const height = 2 * size.panelHeight + 18;
  const last = history[history.length - 1];
  const summary = `Search progress over ${history.length} iteration${history.length === 1 ? '' : 's'}`
    + (last.bestLatencyMs !== null ? `; best latency ${formatLatency(last.bestLatencyMs)}` : '')
    + (last.bestPeakPercent !== null ? `; ${formatPercent(last.bestPeakPercent)} of peak` : '');
  return `<svg class="plot" role="img" xmlns="http://www.w3.org/2000/svg" width="${size.width}" height="${height}" `
    + `viewBox="0 0 ${size.width} ${height}"><title>${escapeHtml(summary)}</title>`
    + panel(latency, xTicks, 0, size)
    + panel(peak, xTicks, size.panelHeight, size)
    + `<text class="plot-tick" x="${fmt((MARGIN.left + size.width - MARGIN.right) / 2)}" y="${height - 2}" `
    + 'text-anchor="middle">iteration</text></svg>';
}

/** A horizontal bar for a percentage (0-100), drawn in SVG so the webview needs no inline styles. */
export function percentBarSvg(percent: number, className: string, width = 220, height = 12): string {
  const clamped = Math.max(0, Math.min(100, percent));
  const filled = fmt((clamped / 100) * width);
  return `<svg class="bar" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" aria-hidden="true">`
    + `<rect class="bar-track" x="0" y="0" width="${width}" height="${height}" rx="2"/>`
    + `<rect class="bar-fill ${className}" x="0" y="0" width="${filled}" height="${height}" rx="2"/></svg>`;
}
