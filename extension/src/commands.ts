// The extension's commands. Each one finds the kernel document (from its argument, as code lenses pass
// the document URI, or the active editor), forwards to the server command of the same name with the
// URI as the first argument, and shows the outcome. All the work happens in the server.

import { randomUUID } from 'node:crypto';
import * as path from 'node:path';
import * as vscode from 'vscode';
import {
  CancellationTokenSource,
  ExecuteCommandRequest,
  ResponseError,
  WorkDoneProgress,
  WorkDoneProgressCancelNotification,
} from 'vscode-languageclient/node';
import { PercentTracker, ProgressToken, ProgressValue } from './progress';
import { ReportPanel } from './reportPanel';
import { ReportService } from './reports';
import { SecretStore } from './secrets';
import { AccelOptClient, ServerManager } from './server';

const REQUEST_CANCELLED = -32800;

/** The document a command is about: its first argument (URI string, Uri, or `{uri}`) or the active editor's. */
export function targetUri(arg: unknown): vscode.Uri | undefined {
  if (arg instanceof vscode.Uri) {
    return arg;
  }
  if (typeof arg === 'string' && /^[a-z][\w+.-]*:/i.test(arg)) {
    return vscode.Uri.parse(arg);
  }
  if (typeof arg === 'object' && arg !== null && 'uri' in arg) {
    return targetUri((arg as { uri: unknown }).uri);
  }
  return vscode.window.activeTextEditor?.document.uri;
}

function fileLabel(uri: vscode.Uri): string {
  return path.basename(uri.fsPath || uri.path);
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function isWorkspaceEditLike(value: unknown): boolean {
  return typeof value === 'object' && value !== null && ('changes' in value || 'documentChanges' in value);
}

/** The error a server command reported in its result (`{"error": "..."}`), if any. */
function resultError(result: unknown): string | undefined {
  if (typeof result === 'object' && result !== null && typeof (result as { error?: unknown }).error === 'string') {
    return (result as { error: string }).error;
  }
  return undefined;
}

/** A short sentence from a server command's result, when it has one. */
function resultMessage(result: unknown): string | undefined {
  if (typeof result === 'string') {
    return result;
  }
  if (typeof result === 'object' && result !== null && typeof (result as { message?: unknown }).message === 'string') {
    return (result as { message: string }).message;
  }
  return undefined;
}

export class Commands {
  private readonly optimizing = new Set<string>();

  constructor(private readonly server: ServerManager, private readonly reports: ReportService,
              private readonly panel: ReportPanel, private readonly secrets: SecretStore,
              private readonly output: vscode.LogOutputChannel) {}

  register(): vscode.Disposable[] {
    const register = (name: string, handler: (...args: unknown[]) => unknown) => vscode.commands.registerCommand(name, handler);
    return [
      register('accelopt.profile', (uri, ...rest) => this.profile(uri, rest)),
      register('accelopt.optimize', (uri, ...rest) => this.optimize(uri, rest)),
      register('accelopt.showReport', (uri) => this.showReport(uri)),
      register('accelopt.showMemory', (uri) => this.showMemory(uri)),
      register('accelopt.applyBestRewrite', (uri) => this.applyBestRewrite(uri)),
      // Storing a secret fires SecretStorage's change event, which restarts the server (see extension.ts).
      register('accelopt.setApiKey', () => this.secrets.promptAndStore()),
      register('accelopt.restartServer', () => this.server.restart('restart requested')),
      register('accelopt.showLog', () => this.output.show(true)),
      register('accelopt.showServerProblem', () => this.server.showProblem()),
    ];
  }

  /** The running client and the document, or undefined after telling the user why not. */
  private async prepare(arg: unknown, command: string): Promise<{ client: AccelOptClient; uri: vscode.Uri } | undefined> {
    const uri = targetUri(arg);
    if (!uri) {
      void vscode.window.showInformationMessage('AccelOpt: open a kernel file first.');
      return undefined;
    }
    if (!(await this.server.ready()) || !this.server.client) {
      if (this.server.state === 'failed' || this.server.state === 'restricted') {
        this.server.showProblem();
      } else {
        void vscode.window.showWarningMessage('AccelOpt: the language server is not running.', 'Show Log')
          .then((choice) => choice && this.output.show(true));
      }
      return undefined;
    }
    const client = this.server.client;
    if (!client.serverCommands.commands.has(command)) {
      void vscode.window.showErrorMessage(`AccelOpt: this version of the server has no "${command}" command.`);
      return undefined;
    }
    return { client, uri };
  }

  private async run(client: AccelOptClient, command: string, args: unknown[],
                    token?: vscode.CancellationToken, workDoneToken?: ProgressToken): Promise<unknown> {
    const params = { command, arguments: args, ...(workDoneToken !== undefined ? { workDoneToken } : {}) };
    return client.sendRequest(ExecuteCommandRequest.type, params, token);
  }

  async profile(arg: unknown, rest: unknown[]): Promise<void> {
    const ready = await this.prepare(arg, 'accelopt.profile');
    if (!ready) {
      return;
    }
    const { client, uri } = ready;
    const hardware = typeof rest[0] === 'string' ? ` on ${rest[0]}` : '';
    try {
      const result = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Window, title: `AccelOpt: profiling ${fileLabel(uri)}${hardware}` },
        () => this.run(client, 'accelopt.profile', [uri.toString(), ...rest]));
      const problem = resultError(result);
      const message = resultMessage(result);
      if (problem) {
        void vscode.window.showWarningMessage(`AccelOpt: cannot profile ${fileLabel(uri)}: ${problem}`);
      } else if (message) {
        void vscode.window.showInformationMessage(`AccelOpt: ${message}`);
      }
    } catch (error) {
      void vscode.window.showErrorMessage(`AccelOpt: profiling failed: ${messageOf(error)}`);
    }
    await this.panel.refresh();
    await this.reports.fetch(uri);
  }

  async optimize(arg: unknown, rest: unknown[]): Promise<void> {
    const ready = await this.prepare(arg, 'accelopt.optimize');
    if (!ready) {
      return;
    }
    const { client, uri } = ready;
    const key = uri.toString();
    if (this.optimizing.has(key)) {
      void vscode.window.showInformationMessage(`AccelOpt: ${fileLabel(uri)} is already being optimized.`);
      return;
    }
    this.optimizing.add(key);
    const started = Date.now();
    const polling = this.panel.pollWhile();
    let cancelled = false;
    try {
      const result = await vscode.window.withProgress({
        location: vscode.ProgressLocation.Notification,
        title: `AccelOpt: optimizing ${fileLabel(uri)}`,
        cancellable: true,
      }, async (progress, cancellation) => {
        const percent = new PercentTracker();
        const serverTokens = new Set<ProgressToken>();
        const workDoneToken = `accelopt-optimize-${randomUUID()}`;
        const show = (value: ProgressValue) => {
          if (value.kind === 'end') {
            if (value.message) {
              progress.report({ message: value.message });
            }
            return;
          }
          const text = value.kind === 'begin' ? (value.message ?? value.title) : value.message;
          progress.report({ message: text, increment: percent.increment(value.percentage) });
        };
        const subscriptions = [
          client.onProgress(WorkDoneProgress.type, workDoneToken, show),
          client.progressUi.claimServerProgress((token, value) => {
            serverTokens.add(token);
            show(value);
          }),
        ];
        const source = new CancellationTokenSource();
        subscriptions.push(cancellation.onCancellationRequested(() => {
          cancelled = true;
          progress.report({ message: 'cancelling…' });
          for (const token of [workDoneToken, ...serverTokens]) {
            void client.sendNotification(WorkDoneProgressCancelNotification.type, { token });
          }
          source.cancel();
        }));
        try {
          progress.report({ message: 'starting the search' });
          return await this.run(client, 'accelopt.optimize', [key, ...rest], source.token, workDoneToken);
        } finally {
          subscriptions.forEach((d) => d.dispose());
          source.dispose();
        }
      });
      const seconds = ((Date.now() - started) / 1000).toFixed(1);
      const problem = resultError(result);
      if (problem) {
        this.output.warn(`Optimize ${fileLabel(uri)}: ${problem}`);
        void vscode.window.showWarningMessage(`AccelOpt: cannot optimize ${fileLabel(uri)}: ${problem}`);
        return;
      }
      const stopped = typeof result === 'object' && result !== null && (result as { cancelled?: unknown }).cancelled === true;
      this.output.info(`Optimize ${fileLabel(uri)} ${stopped ? 'stopped' : 'finished'} after ${seconds} s`);
      const message = resultMessage(result) ?? (stopped ? `optimizing ${fileLabel(uri)} was stopped after ${seconds} s` : undefined);
      const buttons = client.serverCommands.commands.has('accelopt.applyBestRewrite')
        ? ['Apply Best Rewrite', 'Show Report'] : ['Show Report'];
      // Not awaited: the toast may stay open long after the search is over.
      void vscode.window.showInformationMessage(
        `AccelOpt: ${message ?? `optimizing ${fileLabel(uri)} finished in ${seconds} s`}`, ...buttons).then((choice) => {
        if (choice === 'Apply Best Rewrite') {
          void this.applyBestRewrite(key);
        } else if (choice === 'Show Report') {
          void this.showReport(key);
        }
      });
    } catch (error) {
      if (cancelled || (error instanceof ResponseError && error.code === REQUEST_CANCELLED)) {
        void vscode.window.showInformationMessage(`AccelOpt: optimizing ${fileLabel(uri)} was cancelled.`);
      } else {
        void vscode.window.showErrorMessage(`AccelOpt: optimize failed: ${messageOf(error)}`, 'Show Log')
          .then((choice) => choice && this.output.show(true));
      }
    } finally {
      polling.dispose();
      this.optimizing.delete(key);
      await this.panel.refresh();
      await this.reports.fetch(uri);
    }
  }

  async showReport(arg: unknown): Promise<void> {
    const uri = targetUri(arg);
    if (!uri) {
      void vscode.window.showInformationMessage('AccelOpt: open a kernel file first.');
      return;
    }
    const client = (await this.server.ready()) ? this.server.client : undefined;
    if (client?.serverCommands.commands.has('accelopt.showReport')) {
      try {
        await this.run(client, 'accelopt.showReport', [uri.toString()]);
      } catch (error) {
        this.output.warn(`accelopt.showReport: ${messageOf(error)}`);
      }
    }
    await this.panel.show(uri);
  }

  async showMemory(arg: unknown): Promise<void> {
    const ready = await this.prepare(arg, 'accelopt.showMemory');
    if (!ready) {
      return;
    }
    try {
      const result = await this.run(ready.client, 'accelopt.showMemory', [ready.uri.toString()]);
      if (result === null || result === undefined) {
        return; // the server showed it itself (e.g. window/showDocument)
      }
      if (resultError(result)) {
        void vscode.window.showWarningMessage(`AccelOpt: ${resultError(result)}`);
        return;
      }
      const markdown = typeof result === 'string' ? result
        : typeof result === 'object' && typeof (result as { markdown?: unknown }).markdown === 'string'
          ? (result as { markdown: string }).markdown : undefined;
      const document = markdown !== undefined
        ? await vscode.workspace.openTextDocument({ language: 'markdown', content: markdown })
        : await vscode.workspace.openTextDocument({ language: 'json', content: JSON.stringify(result, null, 2) });
      await vscode.window.showTextDocument(document, { preview: true, viewColumn: vscode.ViewColumn.Beside });
    } catch (error) {
      void vscode.window.showErrorMessage(`AccelOpt: could not read the optimization memory: ${messageOf(error)}`);
    }
  }

  async applyBestRewrite(arg: unknown): Promise<void> {
    const ready = await this.prepare(arg, 'accelopt.applyBestRewrite');
    if (!ready) {
      return;
    }
    const { client, uri } = ready;
    try {
      const result = await this.run(client, 'accelopt.applyBestRewrite', [uri.toString()]);
      if (resultError(result)) {
        void vscode.window.showWarningMessage(`AccelOpt: ${resultError(result)}`);
      } else if (isWorkspaceEditLike(result)) {
        const edit = await client.protocol2CodeConverter.asWorkspaceEdit(result as Parameters<typeof client.protocol2CodeConverter.asWorkspaceEdit>[0]);
        if (edit && !(await vscode.workspace.applyEdit(edit))) {
          void vscode.window.showWarningMessage('AccelOpt: the rewrite could not be applied (the file changed?).');
        }
      } else if (result === false || (typeof result === 'object' && result !== null && (result as { applied?: unknown }).applied === false)) {
        void vscode.window.showInformationMessage(`AccelOpt: ${resultMessage(result) ?? `no verified rewrite for ${fileLabel(uri)} yet; run Optimize Kernel first.`}`);
      }
    } catch (error) {
      void vscode.window.showErrorMessage(`AccelOpt: applying the rewrite failed: ${messageOf(error)}`);
    }
  }
}
