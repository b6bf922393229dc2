// Which Python runs the server: the `accelopt.python` setting, else the interpreter selected in the
// Python extension (through its public API, when that extension is installed), else `python3`.

import * as vscode from 'vscode';

const PYTHON_EXTENSION_ID = 'ms-python.python';

// The small part of the Python extension's API used here (declared locally: no dependency on it).
interface EnvironmentPath {
  id: string;
  path: string;
}
interface ResolvedEnvironment {
  executable: { uri?: vscode.Uri };
}
interface PythonEnvironmentsApi {
  getActiveEnvironmentPath(resource?: vscode.Uri): EnvironmentPath;
  resolveEnvironment(environment: EnvironmentPath | string): Promise<ResolvedEnvironment | undefined>;
  onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
}
interface PythonExtensionApi {
  environments?: PythonEnvironmentsApi;
}

export interface Interpreter {
  command: string;
  source: 'setting' | 'python-extension' | 'default';
}

function expandPath(value: string, folder: vscode.WorkspaceFolder | undefined): string {
  let result = value;
  if (folder) {
    result = result.replace(/\$\{workspaceFolder\}/g, folder.uri.fsPath);
  }
  const home = process.env.HOME ?? process.env.USERPROFILE ?? '';
  if (home && (result === '~' || result.startsWith('~/'))) {
    result = home + result.slice(1);
  }
  return result;
}

async function pythonExtensionApi(): Promise<PythonEnvironmentsApi | undefined> {
  const extension = vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION_ID);
  if (!extension) {
    return undefined;
  }
  try {
    const api = extension.isActive ? extension.exports : await extension.activate();
    return api?.environments;
  } catch {
    return undefined;
  }
}

export async function resolveInterpreter(setting: string, folder: vscode.WorkspaceFolder | undefined): Promise<Interpreter> {
  if (setting) {
    return { command: expandPath(setting, folder), source: 'setting' };
  }
  const environments = await pythonExtensionApi();
  if (environments) {
    try {
      const active = environments.getActiveEnvironmentPath(folder?.uri);
      const resolved = await environments.resolveEnvironment(active);
      const executable = resolved?.executable.uri?.fsPath ?? active.path;
      if (executable) {
        return { command: executable, source: 'python-extension' };
      }
    } catch {
      // Fall through to the default below: the Python extension may still be starting.
    }
  }
  return { command: process.platform === 'win32' ? 'python' : 'python3', source: 'default' };
}

/** Fires when the user selects another interpreter in the Python extension (no-op without it). */
export async function onPythonInterpreterChanged(listener: () => void): Promise<vscode.Disposable> {
  const environments = await pythonExtensionApi();
  return environments ? environments.onDidChangeActiveEnvironmentPath(() => listener()) : new vscode.Disposable(() => undefined);
}
