import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { contentSecurityPolicy, makeNonce, renderReportBody, reportDocument } from '../src/report/html';
import { formatLatency, formatPercent, parseReport, statusText, statusTooltip, topLines } from '../src/report/model';
import { historyPlotSvg, niceTicks, percentBarSvg } from '../src/report/plot';

const PROFILE = {
  latency_ms: 1.3349,
  peak_percent: 40.2,
  bottleneck: 'vector',
  hardware: 'trn1',
  backend: 'simulator',
  correct: true,
  tensor_engine_active_time_percent: 0,
  vector_engine_active_time_percent: 0.915,
  scalar_engine_active_time_percent: 0.45,
  gpsimd_engine_active_time_percent: 0,
  dma_active_time_percent: 0.601,
  hbm_read_bytes: 1048576,
  hbm_write_bytes: 1048576,
  lines: [
    { line: 15, time_ms: 0.2, engine: 'dma', instructions: 4 },
    { line: 16, time_ms: 0.8, engine: 'vector', instructions: 12 },
    { line: 17, time_ms: 0.3, engine: 'vector', instructions: 4 },
  ],
  history: [
    { iteration: 0, best_latency_ms: 1.33, best_peak_percent: 40 },
    { iteration: 1, best_latency_ms: 1.1, best_peak_percent: 48.5 },
    { iteration: 2, best_latency_ms: 0.8, best_peak_percent: 67 },
  ],
};

describe('parseReport', () => {
  it('reads the profile fields', () => {
    const report = parseReport(PROFILE);
    assert.ok(report);
    assert.equal(report.latencyMs, 1.3349);
    assert.equal(report.peakPercent, 40.2);
    assert.deepEqual(report.engines.map((e) => e.engine), ['Tensor', 'Vector', 'Scalar', 'GpSimd', 'DMA']);
    // the profile's `*_percent` fields are fractions; the panel shows percent
    assert.deepEqual(report.engines.map((e) => Math.round(e.percent * 10) / 10), [0, 91.5, 45, 0, 60.1]);
    assert.deepEqual(report.bytes, [{ label: 'HBM', read: 1048576, write: 1048576 }]);
    assert.equal(report.lines.length, 3);
    assert.deepEqual(report.history.map((p) => p.bestPeakPercent), [40, 48.5, 67]);
  });

  it('returns null for nothing usable and tolerates junk', () => {
    assert.equal(parseReport(null), null);
    assert.equal(parseReport([]), null);
    assert.equal(parseReport({ kernel: 'x' }), null);
    const report = parseReport({ latency_ms: 2, lines: [null, { line: 'a' }, { line: 3, time_ms: 1 }], history: 'no' });
    assert.ok(report);
    assert.equal(report.lines.length, 1);
    assert.equal(report.history.length, 0);
  });

  it('reads the server shape: result over trace, top-level lines, failure, last search', () => {
    const report = parseReport({
      kernel: 'kernel', hardware: 'trn2', failure: null,
      trace: { latency_ms: 9, correct: null, peak_percent: 10 },
      result: { latency_ms: 1.5, correct: true, peak_percent: 35, lines: [] },
      lines: [{ line: 4, time_ms: 1, engine: 'vector', instructions: 2, share: 66 }],
      lastSearch: { history: [{ iteration: 0, best_latency_ms: 1.5, best_peak_percent: 35 }] },
    });
    assert.ok(report);
    assert.equal(report.latencyMs, 1.5);
    assert.equal(report.correct, true);
    assert.equal(report.hardware, 'trn2');
    assert.equal(report.lines.length, 1);
    assert.equal(report.history.length, 1);
    assert.equal(parseReport({ failure: 'partition dim 256 > 128 (line 9)' })?.error, 'partition dim 256 > 128 (line 9)');
  });

  it('reads a nested profile and a search history', () => {
    const report = parseReport({ profile: { latency_ms: 3 }, search: { state: 'running', history: [{ iteration: 2, latency_ms: 2 }, { iteration: 1, latency_ms: 2.5 }] } });
    assert.ok(report);
    assert.equal(report.searchState, 'running');
    assert.deepEqual(report.history.map((p) => p.iteration), [1, 2]);
  });
});

describe('formatting', () => {
  it('formats latency like the code lens', () => {
    assert.equal(formatLatency(1.33449), '1.334 ms');
    assert.equal(formatLatency(13.349), '13.35 ms');
    assert.equal(formatLatency(133.49), '133.5 ms');
    assert.equal(formatLatency(0.6640), '0.664 ms');
    assert.equal(formatLatency(0.6574), '0.6574 ms');
    assert.equal(formatLatency(0.0412), '41.2 µs');
    assert.equal(formatLatency(2048.4), '2.048 s');
    assert.equal(formatLatency(0), '0 ms');
  });

  it('formats percents', () => {
    assert.equal(formatPercent(40.2), '40%');
    assert.equal(formatPercent(3.44), '3.4%');
    assert.equal(formatPercent(0), '0%');
    assert.equal(formatPercent(99.6), '100%');
  });

  it('builds the status bar text', () => {
    const report = parseReport(PROFILE)!;
    assert.equal(statusText(report, 'trn2'), '40% of peak · trn1');
    assert.equal(statusText({ ...report, hardware: null, peakPercent: null }, 'trn2'), '1.335 ms · trn2');
    assert.equal(statusText({ ...report, correct: false }, 'trn1'), '$(warning) 40% of peak · trn1');
    assert.equal(statusText({ ...report, error: 'partition dim 256 > 128' }, 'trn1'), '$(error) kernel fails · trn1');
    assert.match(statusTooltip(report), /Latency 1\.335 ms\n40% of peak\nvector-bound/);
  });

  it('ranks the top lines with their share of time', () => {
    const lines = topLines(parseReport(PROFILE)!, 2);
    assert.deepEqual(lines.map((l) => l.line), [16, 17]);
    assert.ok(Math.abs(lines[0].share - (100 * 0.8) / 1.3) < 1e-9);
  });
});

describe('plot', () => {
  it('picks round ticks', () => {
    assert.deepEqual(niceTicks(0, 10, 5), [0, 2, 4, 6, 8, 10]);
    assert.deepEqual(niceTicks(0.8, 1.33, 4), [0.8, 1, 1.2, 1.4]);
    assert.deepEqual(niceTicks(5, 5, 4), [4.5, 5, 5.5]);
    assert.deepEqual(niceTicks(Number.NaN, 1), []);
  });

  it('draws both series as inline SVG with one point per iteration', () => {
    const svg = historyPlotSvg(parseReport(PROFILE)!.history);
    assert.match(svg, /^<svg class="plot"/);
    assert.equal((svg.match(/<circle class="plot-dot series-latency"/g) ?? []).length, 3);
    assert.equal((svg.match(/<circle class="plot-dot series-peak"/g) ?? []).length, 3);
    assert.match(svg, /Best latency \(ms\)/);
    assert.match(svg, /Best % of peak/);
    assert.doesNotMatch(svg, /NaN|Infinity|undefined/);
    assert.doesNotMatch(svg, /https?:\/\/(?!www\.w3\.org\/2000\/svg)/);
  });

  it('switches the latency axis to microseconds for fast kernels', () => {
    const svg = historyPlotSvg([
      { iteration: 0, bestLatencyMs: 0.0105, bestPeakPercent: 45 },
      { iteration: 1, bestLatencyMs: 0.0093, bestPeakPercent: 51 },
    ]);
    assert.match(svg, /Best latency \(µs\)/);
    assert.match(svg, />10\.5</);
    assert.match(svg, /best latency 9\.3 µs/);
  });

  it('handles one point and an empty history', () => {
    const one = historyPlotSvg([{ iteration: 0, bestLatencyMs: 2, bestPeakPercent: null }]);
    assert.doesNotMatch(one, /NaN|Infinity/);
    assert.doesNotMatch(one, />-\d/); // no negative iterations on the axis
    assert.match(one, /no data yet/);
    assert.match(historyPlotSvg([]), /No search has run/);
  });

  it('clamps bars', () => {
    assert.match(percentBarSvg(150, 'x', 100), /class="bar-fill x" x="0" y="0" width="100"/);
    assert.match(percentBarSvg(-5, 'x', 100), /class="bar-fill x" x="0" y="0" width="0"/);
  });
});

describe('html', () => {
  it('renders the sections and escapes text from the server', () => {
    const report = parseReport({ ...PROFILE, kernel: '<script>alert(1)</script>' })!;
    const body = renderReportBody(report, { sourceLines: Array.from({ length: 20 }, (_, i) => `line ${i + 1} <b>`), fileName: 'silu.py' });
    for (const heading of ['Summary', 'Engine activity', 'Bytes moved', 'Top lines', 'Search']) {
      assert.match(body, new RegExp(`<h2>${heading}</h2>`));
    }
    assert.doesNotMatch(body, /<script>/);
    assert.match(body, /&lt;script&gt;/);
    assert.match(body, /line 16 &lt;b&gt;/);
    assert.doesNotMatch(body, /style="/);
  });

  it('says so when there is no report', () => {
    assert.match(renderReportBody(null), /No profile yet/);
    assert.match(renderReportBody(null, { serverDown: true }), /server is not running/);
  });

  it('sets a strict CSP with the nonce on the only style and script', () => {
    const nonce = makeNonce((n) => new Uint8Array(n).map((_, i) => i * 7));
    assert.equal(nonce.length, 32);
    const csp = contentSecurityPolicy(nonce, 'vscode-resource:');
    assert.match(csp, /^default-src 'none'/);
    assert.match(csp, new RegExp(`script-src 'nonce-${nonce}'`));
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:/);
    const html = reportDocument('<p>x</p>', nonce, 'vscode-resource:');
    assert.equal((html.match(/<script/g) ?? []).length, 1);
    assert.match(html, new RegExp(`<script nonce="${nonce}">`));
    assert.match(html, new RegExp(`<style nonce="${nonce}">`));
    assert.doesNotMatch(html, /<link|src="http/);
  });
});
