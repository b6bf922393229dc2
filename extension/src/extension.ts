// AccelOpt for VS Code: a thin client. It starts the AccelOpt language server with the chosen Python and
// wires VS Code's UI (commands, status bar, report panel, secrets) to it; the profiling, diagnostics,
// code lenses, hovers, rewrites and search all run in the Python server.

import * as vscode from 'vscode';
import { Commands } from './commands';
import { onPythonInterpreterChanged } from './interpreter';
import { ReportPanel } from './reportPanel';
import { ReportService } from './reports';
import { SecretStore } from './secrets';
import { ServerManager } from './server';
import { RESTART_SETTINGS } from './settings';
import { KernelStatusBar } from './statusBar';

let manager: ServerManager | undefined;

// Set by the bundle's first line (scripts/bundle.mjs), before any module is evaluated.
declare global {
  var __acceloptLoadStart: number | undefined;
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const started = performance.now();
  const output = vscode.window.createOutputChannel('AccelOpt', { log: true });
  const secrets = new SecretStore(context.secrets);
  const server = new ServerManager(output, secrets);
  manager = server;
  const reports = new ReportService(server, output);
  const panel = new ReportPanel(reports);
  const commands = new Commands(server, reports, panel, secrets, output);
  context.subscriptions.push(
    output,
    reports,
    panel,
    ...commands.register(),
    new KernelStatusBar(server, reports),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (RESTART_SETTINGS.some((setting) => event.affectsConfiguration(setting))) {
        void server.restart('the accelopt.python setting changed');
      }
    }),
    secrets.onDidChange(() => void server.restart('the API key or service token changed')),
    vscode.workspace.onDidGrantWorkspaceTrust(() => void server.restart('the workspace is now trusted')),
    { dispose: () => void server.dispose() },
  );
  onPythonInterpreterChanged(() => {
    if (!vscode.workspace.getConfiguration('accelopt').get<string>('python')) {
      void server.restart("the Python extension's interpreter changed");
    }
  }).then((disposable) => context.subscriptions.push(disposable), () => undefined);

  // Start the server in the background so activation itself stays short.
  void server.restart('extension activated').then(() => {
    output.info(`Activation took ${(performance.now() - started).toFixed(1)} ms until the server was ready`
      + ` (${server.state}).`);
  });
  const loadStart = globalThis.__acceloptLoadStart;
  const loading = loadStart === undefined ? '' : ` (${(started - loadStart).toFixed(1)} ms more to load the bundle)`;
  output.info(`Activated in ${(performance.now() - started).toFixed(1)} ms${loading}`);
}

export async function deactivate(): Promise<void> {
  await manager?.dispose();
  manager = undefined;
}
