// The profile report as the server sends it (`accelopt/report`), read defensively: every field may be
// missing or null, and unknown fields are ignored. Nothing here imports `vscode`, so it is unit-tested
// under plain Node.

export interface LineTime {
  line: number;
  timeMs: number;
  engine: string;
  instructions: number | null;
}

export interface IterationPoint {
  iteration: number;
  bestLatencyMs: number | null;
  bestPeakPercent: number | null;
}

export interface EngineActivity {
  engine: string;
  percent: number; // 0-100; the profile's field is a fraction (0.739), as neuron-profile writes it
}

export interface ByteCount {
  label: string;
  read: number | null;
  write: number | null;
}

export interface Report {
  kernel: string | null;
  latencyMs: number | null;
  peakPercent: number | null;
  bottleneck: string | null;
  hardware: string | null;
  backend: string | null;
  correct: boolean | null;
  checkMessage: string | null;
  error: string | null;
  engines: EngineActivity[];
  bytes: ByteCount[];
  lines: LineTime[];
  history: IterationPoint[];
  searchState: string | null;
}

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function num(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

function str(value: unknown): string | null {
  return typeof value === 'string' && value.length > 0 ? value : null;
}

function firstNumber(source: Json, keys: readonly string[]): number | null {
  for (const key of keys) {
    const value = num(source[key]);
    if (value !== null) {
      return value;
    }
  }
  return null;
}

/** Engines in the order the panel shows them, with the profile field that holds each one's activity
 * (a fraction of the latency, like every `*_percent` field of the profile; `peak_percent` is in percent). */
export const ENGINE_FIELDS: readonly (readonly [string, string])[] = [
  ['Tensor', 'tensor_engine_active_time_percent'],
  ['Vector', 'vector_engine_active_time_percent'],
  ['Scalar', 'scalar_engine_active_time_percent'],
  ['GpSimd', 'gpsimd_engine_active_time_percent'],
  ['DMA', 'dma_active_time_percent'],
];

const MEMORY_LEVELS: readonly (readonly [string, string])[] = [
  ['HBM', 'hbm'],
  ['SBUF', 'sbuf'],
  ['PSUM', 'psum'],
];

function readHistory(raw: Json): IterationPoint[] {
  const search = isObject(raw.search) ? raw.search : {};
  const last = isObject(raw.lastSearch) ? raw.lastSearch : {};
  const list = [raw.history, search.history, last.history].find((value) => Array.isArray(value)) as unknown[] | undefined ?? [];
  const points: IterationPoint[] = [];
  list.forEach((entry: unknown, index: number) => {
    if (!isObject(entry)) {
      return;
    }
    const iteration = firstNumber(entry, ['iteration', 'iter', 'step']) ?? index;
    points.push({
      iteration,
      bestLatencyMs: firstNumber(entry, ['best_latency_ms', 'latency_ms']),
      bestPeakPercent: firstNumber(entry, ['best_peak_percent', 'peak_percent']),
    });
  });
  return points.sort((a, b) => a.iteration - b.iteration);
}

function readLines(raw: Json): LineTime[] {
  if (!Array.isArray(raw.lines)) {
    return [];
  }
  const lines: LineTime[] = [];
  for (const entry of raw.lines as unknown[]) {
    if (!isObject(entry)) {
      continue;
    }
    const line = num(entry.line);
    const timeMs = num(entry.time_ms);
    if (line === null || timeMs === null) {
      continue;
    }
    lines.push({ line, timeMs, engine: str(entry.engine) ?? '', instructions: num(entry.instructions) });
  }
  return lines;
}

function readSearchState(raw: Json): string | null {
  const search = isObject(raw.search) ? raw.search : null;
  if (search === null) {
    return null;
  }
  return str(search.state) ?? str(search.status) ?? (search.running === true ? 'running' : null);
}

/** A report from whatever the server sent; null when it sent nothing usable (no kernel, not profiled). */
export function parseReport(raw: unknown): Report | null {
  if (!isObject(raw)) {
    return null;
  }
  // The profile's fields may be at the top level or nested (`profile`, or `trace` for the fast
  // trace-only timing and `result` for the checked profile, which wins).
  let profile: Json = raw;
  for (const key of ['profile', 'trace', 'result']) {
    const nested = raw[key];
    if (isObject(nested)) {
      profile = { ...profile, ...nested };
    }
  }
  if (!Array.isArray(profile.lines) || profile.lines.length === 0) {
    profile = { ...profile, lines: raw.lines };
  }
  const report: Report = {
    kernel: str(profile.kernel) ?? str(profile.kernel_name) ?? str(profile.kernel_label),
    latencyMs: num(profile.latency_ms),
    peakPercent: num(profile.peak_percent),
    bottleneck: str(profile.bottleneck),
    hardware: str(profile.hardware),
    backend: str(profile.backend),
    correct: typeof profile.correct === 'boolean' ? profile.correct : null,
    checkMessage: str(profile.check_message),
    error: str(profile.error) ?? str(raw.failure) ?? str(raw.taskError),
    engines: ENGINE_FIELDS.flatMap(([engine, field]) => {
      const fraction = num(profile[field]);
      return fraction === null ? [] : [{ engine, percent: 100 * fraction }];
    }),
    bytes: MEMORY_LEVELS.flatMap(([label, prefix]) => {
      const read = num(profile[`${prefix}_read_bytes`]);
      const write = num(profile[`${prefix}_write_bytes`]);
      return read === null && write === null ? [] : [{ label, read, write }];
    }),
    lines: readLines(profile),
    history: readHistory(raw),
    searchState: readSearchState(raw),
  };
  const hasAnything = report.latencyMs !== null || report.error !== null || report.history.length > 0;
  return hasAnything ? report : null;
}

/** `1.335 ms`, `13.35 ms`, `81.23 µs`, `2.048 s`: four significant digits in a unit read at a glance, as the
 * server's lenses and hovers write them (server/format.py), so a 1.01x rewrite shows a different number. */
export function formatLatency(ms: number): string {
  if (ms > 0 && ms < 0.1) {
    return `${fourDigits(ms * 1000)} µs`;
  }
  if (ms >= 1000) {
    return `${fourDigits(ms / 1000)} s`;
  }
  return `${fourDigits(ms)} ms`;
}

function fourDigits(value: number): string {
  return value === 0 ? '0' : Number(value.toPrecision(4)).toString();
}

/** `40%`, `3.4%`, `0%`: whole percents from 10 up, one decimal below. */
export function formatPercent(percent: number): string {
  if (percent === 0) {
    return '0%';
  }
  const rounded = Math.abs(percent) >= 10 ? Math.round(percent) : Math.round(percent * 10) / 10;
  return `${rounded}%`;
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${Number(value.toPrecision(3))} ${units[unit]}`;
}

/** The status bar text for a kernel: `40% of peak · trn1`, or the latency when the task has no peak. */
export function statusText(report: Report, fallbackHardware: string): string {
  const hardware = report.hardware ?? fallbackHardware;
  if (report.error !== null) {
    return `$(error) kernel fails · ${hardware}`;
  }
  const figure = report.peakPercent !== null
    ? `${formatPercent(report.peakPercent)} of peak`
    : report.latencyMs !== null ? formatLatency(report.latencyMs) : 'not profiled';
  const prefix = report.correct === false ? '$(warning) ' : '';
  return `${prefix}${figure} · ${hardware}`;
}

/** The status bar tooltip: one line per known fact. */
export function statusTooltip(report: Report): string {
  const parts = ['AccelOpt'];
  if (report.kernel !== null) {
    parts[0] += `: ${report.kernel}`;
  }
  if (report.error !== null) {
    parts.push(`Fails to run: ${report.error}`);
  }
  if (report.latencyMs !== null) {
    parts.push(`Latency ${formatLatency(report.latencyMs)}`);
  }
  if (report.peakPercent !== null) {
    parts.push(`${formatPercent(report.peakPercent)} of peak`);
  }
  if (report.bottleneck !== null) {
    parts.push(`${report.bottleneck}-bound`);
  }
  if (report.correct === false) {
    parts.push(`Wrong results${report.checkMessage ? `: ${report.checkMessage}` : ''}`);
  }
  if (report.backend !== null) {
    parts.push(`Measured on: ${report.backend}`);
  }
  parts.push('Click to show the report');
  return parts.join('\n');
}

/**
 * The slowest lines first, each with its share (percent) of the summed busy time of all lines: lines on
 * different engines overlap, so shares of the latency could add up to more than 100%.
 */
export function topLines(report: Report, count: number): (LineTime & { share: number })[] {
  const total = report.lines.reduce((sum, line) => sum + line.timeMs, 0);
  return [...report.lines]
    .sort((a, b) => b.timeMs - a.timeMs || a.line - b.line)
    .slice(0, count)
    .map((line) => ({ ...line, share: total > 0 ? Math.min(100, (100 * line.timeMs) / total) : 0 }));
}
