// The report panel's HTML. The document is built once per panel with a strict Content-Security-Policy
// (nothing remote; the one stylesheet and the one script carry a fresh nonce); later reports only swap
// the body, sent to the page's script as a message. Pure functions, unit-tested under Node.

import { escapeHtml } from './escape';
import { Report, formatBytes, formatLatency, formatPercent, topLines } from './model';
import { historyPlotSvg, percentBarSvg } from './plot';

export interface BodyOptions {
  /** The kernel file's lines (0-based array), to quote the source of the top lines. */
  sourceLines?: readonly string[];
  /** File name shown in the heading. */
  fileName?: string;
  /** How many of the slowest lines to list. */
  topCount?: number;
  /** Said instead of the report when there is none because the server is not running. */
  serverDown?: boolean;
}

function row(label: string, value: string): string {
  return `<tr><th scope="row">${escapeHtml(label)}</th><td>${value}</td></tr>`;
}

function summaryTable(report: Report): string {
  const rows: string[] = [];
  if (report.latencyMs !== null) {
    rows.push(row('Latency', escapeHtml(formatLatency(report.latencyMs))));
  }
  if (report.peakPercent !== null) {
    rows.push(row('Of peak', escapeHtml(formatPercent(report.peakPercent))));
  }
  if (report.bottleneck !== null) {
    rows.push(row('Bottleneck', escapeHtml(report.bottleneck)));
  }
  if (report.hardware !== null) {
    rows.push(row('Hardware', escapeHtml(report.hardware)));
  }
  if (report.backend !== null) {
    rows.push(row('Measured on', escapeHtml(report.backend)));
  }
  const correctness = report.correct === true
    ? '<span class="ok">correct</span>'
    : report.correct === false
      ? `<span class="bad">wrong results</span>${report.checkMessage ? ` (${escapeHtml(report.checkMessage)})` : ''}`
      : '<span class="muted">not checked yet</span>';
  rows.push(row('Results', correctness));
  if (report.searchState !== null) {
    rows.push(row('Search', escapeHtml(report.searchState)));
  }
  return `<table class="summary">${rows.join('')}</table>`;
}

function engineSection(report: Report): string {
  if (report.engines.length === 0) {
    return '';
  }
  const rows = report.engines.map((engine) => `<tr><th scope="row">${escapeHtml(engine.engine)}</th>`
    + `<td>${percentBarSvg(engine.percent, `engine-${engine.engine.toLowerCase()}`)}</td>`
    + `<td class="num">${escapeHtml(formatPercent(engine.percent))}</td></tr>`);
  return `<section><h2>Engine activity</h2><table class="bars">${rows.join('')}</table></section>`;
}

function bytesSection(report: Report): string {
  if (report.bytes.length === 0) {
    return '';
  }
  const cell = (value: number | null) => `<td class="num">${value === null ? '–' : escapeHtml(formatBytes(value))}</td>`;
  const rows = report.bytes.map((level) => `<tr><th scope="row">${escapeHtml(level.label)}</th>${cell(level.read)}${cell(level.write)}</tr>`);
  return '<section><h2>Bytes moved</h2><table class="grid"><thead><tr><th></th><th class="num">read</th>'
    + `<th class="num">written</th></tr></thead><tbody>${rows.join('')}</tbody></table></section>`;
}

function linesSection(report: Report, options: BodyOptions): string {
  const lines = topLines(report, options.topCount ?? 8);
  if (lines.length === 0) {
    return '';
  }
  const rows = lines.map((line) => {
    const source = options.sourceLines?.[line.line - 1]?.trim() ?? '';
    return `<tr><td class="num"><a href="#" class="line-link" data-line="${line.line}">${line.line}</a></td>`
      + `<td>${percentBarSvg(line.share, 'share', 120, 10)}</td>`
      + `<td class="num">${escapeHtml(formatPercent(line.share))}</td>`
      + `<td class="num">${escapeHtml(formatLatency(line.timeMs))}</td>`
      + `<td>${escapeHtml(line.engine)}</td>`
      + `<td class="num">${line.instructions === null ? '' : line.instructions}</td>`
      + `<td><code class="src">${escapeHtml(source)}</code></td></tr>`;
  });
  return '<section><h2>Top lines</h2><table class="grid lines"><thead><tr><th class="num">line</th><th title="share of the summed busy time of all lines">share</th>'
    + '<th class="num"></th><th class="num">time</th><th>engine</th><th class="num">instr.</th><th>source</th></tr></thead>'
    + `<tbody>${rows.join('')}</tbody></table></section>`;
}

/** The panel's body for one report (or a short note when there is none). */
export function renderReportBody(report: Report | null, options: BodyOptions = {}): string {
  const heading = `<h1>AccelOpt report${options.fileName ? ` <span class="muted">${escapeHtml(options.fileName)}</span>` : ''}</h1>`;
  if (report === null && options.serverDown) {
    return `${heading}<p class="bad">The AccelOpt language server is not running; its log is in the AccelOpt output `
      + 'channel (command <b>AccelOpt: Show Server Log</b>).</p>';
  }
  if (report === null) {
    return `${heading}<p class="muted">No profile yet for this file. AccelOpt profiles kernel files when they are `
      + 'opened and saved; a kernel needs a task (<code># accelopt: task=NAME</code>).</p>';
  }
  const kernel = report.kernel ? `<p class="muted">kernel <code>${escapeHtml(report.kernel)}</code></p>` : '';
  const error = report.error ? `<p class="bad">The kernel fails to run: ${escapeHtml(report.error)}</p>` : '';
  return heading + kernel + error
    + `<section><h2>Summary</h2>${summaryTable(report)}</section>`
    + engineSection(report)
    + bytesSection(report)
    + linesSection(report, options)
    + `<section><h2>Search</h2>${historyPlotSvg(report.history)}</section>`;
}

const STYLE = `
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground);
  background: var(--vscode-editor-background); padding: 0 16px 16px; }
h1 { font-size: 1.35em; font-weight: 600; margin: 14px 0 4px; }
h2 { font-size: 1.05em; font-weight: 600; margin: 18px 0 6px; border-bottom: 1px solid var(--vscode-panel-border, #8884); padding-bottom: 2px; }
table { border-collapse: collapse; }
th, td { padding: 2px 10px 2px 0; text-align: left; vertical-align: middle; }
th[scope=row] { font-weight: normal; color: var(--vscode-descriptionForeground); }
.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code.src { display: inline-block; max-width: 32em; overflow: hidden; text-overflow: ellipsis; white-space: pre; vertical-align: middle; }
.grid thead th { font-weight: 600; border-bottom: 1px solid var(--vscode-panel-border, #8884); }
.muted { color: var(--vscode-descriptionForeground); }
.ok { color: var(--vscode-testing-iconPassed, #3fb950); }
.bad { color: var(--vscode-errorForeground, #f85149); }
code { font-family: var(--vscode-editor-font-family); font-size: 0.95em; }
a.line-link { color: var(--vscode-textLink-foreground); text-decoration: none; }
a.line-link:hover { text-decoration: underline; }
svg.bar { display: block; }
.bar-track { fill: var(--vscode-editorWidget-background, #8882); stroke: var(--vscode-panel-border, #8884); stroke-width: 0.5; }
.bar-fill { fill: var(--vscode-charts-blue, #3794ff); }
.bar-fill.engine-tensor { fill: var(--vscode-charts-purple, #b180d7); }
.bar-fill.engine-vector { fill: var(--vscode-charts-blue, #3794ff); }
.bar-fill.engine-scalar { fill: var(--vscode-charts-green, #89d185); }
.bar-fill.engine-gpsimd { fill: var(--vscode-charts-yellow, #cca700); }
.bar-fill.engine-dma { fill: var(--vscode-charts-orange, #d18616); }
.bar-fill.share { fill: var(--vscode-charts-red, #f14c4c); }
svg.plot text { fill: var(--vscode-foreground); font-size: 11px; }
svg.plot .plot-title { font-weight: 600; }
svg.plot .plot-tick, svg.plot .plot-empty { fill: var(--vscode-descriptionForeground); }
.plot-grid { stroke: var(--vscode-panel-border, #8884); stroke-width: 0.5; }
.plot-axis { stroke: var(--vscode-descriptionForeground); stroke-width: 1; }
.plot-line { stroke-width: 2; }
.series-latency { stroke: var(--vscode-charts-blue, #3794ff); }
.series-peak { stroke: var(--vscode-charts-green, #89d185); }
circle.series-latency { fill: var(--vscode-charts-blue, #3794ff); }
circle.series-peak { fill: var(--vscode-charts-green, #89d185); }
`;

const SCRIPT = `
(function () {
  const vscode = acquireVsCodeApi();
  const root = document.getElementById('root');
  window.addEventListener('message', (event) => {
    const message = event.data;
    if (message && message.type === 'render' && typeof message.html === 'string') {
      root.innerHTML = message.html;
    }
  });
  root.addEventListener('click', (event) => {
    const link = event.target.closest('a.line-link');
    if (link) {
      event.preventDefault();
      vscode.postMessage({ type: 'reveal', line: Number(link.dataset.line) });
    }
  });
})();
`;

/** The Content-Security-Policy of the panel: nothing but our nonce'd style and script, no network. */
export function contentSecurityPolicy(nonce: string, cspSource: string): string {
  return [
    "default-src 'none'",
    `img-src ${cspSource} data:`,
    `style-src 'nonce-${nonce}'`,
    `script-src 'nonce-${nonce}'`,
    `font-src ${cspSource}`,
  ].join('; ');
}

/** The whole HTML document of the panel, with `body` (from renderReportBody) already in place. */
export function reportDocument(body: string, nonce: string, cspSource: string): string {
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${escapeHtml(contentSecurityPolicy(nonce, cspSource))}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>AccelOpt report</title>
<style nonce="${nonce}">${STYLE}</style>
</head>
<body>
<main id="root">${body}</main>
<script nonce="${nonce}">${SCRIPT}</script>
</body>
</html>`;
}

/** A nonce for the CSP: 32 characters from a cryptographic source given by the caller. */
export function makeNonce(randomBytes: (size: number) => Uint8Array): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  return Array.from(randomBytes(32), (byte) => alphabet[byte % alphabet.length]).join('');
}
