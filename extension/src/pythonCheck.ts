// Is the `accelopt` package installed in the chosen Python? One short child process answers before the
// server starts, so a missing package becomes a helpful message with an install command instead of a
// crash loop. No `vscode` import: unit-tested under Node.

import { execFile } from 'node:child_process';

export const MIN_PYTHON: readonly [number, number] = [3, 11];

/** Modules the server needs: the engine, the server package, and pygls (a dependency of accelopt). */
export const REQUIRED_MODULES: readonly string[] = ['accelopt_core', 'server', 'pygls'];

// Run with `python -c`; prints one JSON line. The current directory is dropped from sys.path so a
// `server/` folder in the workspace is not mistaken for the installed package, and a bare namespace
// package (a folder without __init__.py, e.g. from a stale editable install) counts as missing.
export const CHECK_SCRIPT = [
  'import importlib.util, json, sys',
  "sys.path[:] = [p for p in sys.path if p not in ('', '.')]",
  'def found(name):',
  '    try:',
  '        spec = importlib.util.find_spec(name)',
  '        return spec is not None and spec.origin is not None',
  '    except Exception:',
  '        return False',
  `missing = [m for m in ${JSON.stringify(REQUIRED_MODULES)} if not found(m)]`,
  'version = None',
  'try:',
  '    from importlib.metadata import version as _v',
  "    version = _v('accelopt')",
  'except Exception:',
  '    pass',
  "print(json.dumps({'executable': sys.executable, 'python': list(sys.version_info[:3]), 'missing': missing, 'accelopt': version}))",
].join('\n');

export type CheckResult =
  | { kind: 'ok'; executable: string; pythonVersion: string; accelopt: string | null }
  | { kind: 'no-python'; detail: string }
  | { kind: 'old-python'; executable: string; pythonVersion: string }
  | { kind: 'missing'; executable: string; pythonVersion: string; missing: string[] };

/** Reads the check script's output (or the failure to run it). */
export function interpretCheck(stdout: string, error: { code?: string | number; message: string } | null): CheckResult {
  const line = stdout.trim().split('\n').pop() ?? '';
  let parsed: { executable?: string; python?: number[]; missing?: string[]; accelopt?: string | null } | null = null;
  try {
    parsed = line ? JSON.parse(line) : null;
  } catch {
    parsed = null;
  }
  if (parsed === null || !Array.isArray(parsed.python)) {
    const detail = error === null ? `unexpected output: ${line.slice(0, 200)}`
      : error.code === 'ENOENT' ? 'not found' : error.message.split('\n')[0];
    return { kind: 'no-python', detail };
  }
  const executable = parsed.executable ?? '';
  const pythonVersion = parsed.python.join('.');
  const [major, minor] = parsed.python;
  if (major < MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor < MIN_PYTHON[1])) {
    return { kind: 'old-python', executable, pythonVersion };
  }
  if (parsed.missing && parsed.missing.length > 0) {
    return { kind: 'missing', executable, pythonVersion, missing: parsed.missing };
  }
  return { kind: 'ok', executable, pythonVersion, accelopt: parsed.accelopt ?? null };
}

/** Quotes a path for a POSIX shell or PowerShell when it holds spaces or shell characters. */
export function shellQuote(path: string, windows = process.platform === 'win32'): string {
  if (/^[\w@%+=:,./\\-]+$/.test(path)) {
    return path;
  }
  return windows ? `& "${path.replace(/"/g, '`"')}"` : `'${path.replace(/'/g, "'\\''")}'`;
}

/**
 * The command that installs accelopt into `python`: from a source checkout when the workspace is one
 * (a folder whose pyproject.toml names the "accelopt" project), else from the package index.
 */
export function installCommand(python: string, sourceCheckout?: string): string {
  const target = sourceCheckout ? `-e ${shellQuote(sourceCheckout)}` : 'accelopt';
  return `${shellQuote(python)} -m pip install ${target}`;
}

/** The user-facing sentence for a failed check. */
export function problemMessage(result: CheckResult, python: string): string {
  switch (result.kind) {
    case 'ok':
      return '';
    case 'no-python':
      return `AccelOpt could not run Python "${python}" (${result.detail}). Set "accelopt.python" to a Python 3.11+ interpreter, or select one in the Python extension.`;
    case 'old-python':
      return `AccelOpt needs Python ${MIN_PYTHON.join('.')} or newer; "${python}" is Python ${result.pythonVersion}. Set "accelopt.python" to a newer interpreter.`;
    case 'missing':
      return `The AccelOpt language server is not installed in ${result.executable || python} (Python ${result.pythonVersion}; missing: ${result.missing.join(', ')}). Install the accelopt package there, then restart the server.`;
  }
}

/** Runs the check with a time limit. */
export function checkPython(python: string, cwd: string | undefined, timeoutMs = 20000): Promise<CheckResult> {
  return new Promise((resolve) => {
    execFile(python, ['-c', CHECK_SCRIPT], { cwd, timeout: timeoutMs, windowsHide: true, encoding: 'utf8' },
      (error, stdout) => {
        const failure = error ? { code: (error as NodeJS.ErrnoException).code, message: error.message } : null;
        resolve(interpretCheck(stdout ?? '', failure));
      });
  });
}
