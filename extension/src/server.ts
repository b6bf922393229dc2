// Starting, watching and restarting the AccelOpt language server (`python -m server --stdio`, what `accelopt lsp` runs).

import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';
import {
  CloseAction,
  CloseHandlerResult,
  DynamicFeature,
  ErrorAction,
  ErrorHandlerResult,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  StaticFeature,
  TransportKind,
  WorkDoneProgressCreateRequest,
} from 'vscode-languageclient/node';
import { Interpreter, resolveInterpreter } from './interpreter';
import { ProgressUiFeature } from './progress';
import { CheckResult, checkPython, installCommand, problemMessage } from './pythonCheck';
import { RestartPolicy } from './restartPolicy';
import { SecretStore } from './secrets';
import { SECTION, initializationOptions, readSettings } from './settings';
import { ServerCommandsFeature } from './serverCommands';

/**
 * Arguments after the interpreter; the language client appends `--stdio`. The same as
 * `python -m server` (the `accelopt lsp` entry point), except that the working directory (the user's
 * workspace, which may well have a `server/` folder of its own) is dropped from the module path first.
 */
export const SERVER_ARGS: readonly string[] = [
  '-c',
  "import runpy, sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
    + "runpy.run_module('server', run_name='__main__', alter_sys=True)",
];

export type ServerState = 'stopped' | 'starting' | 'running' | 'failed' | 'restricted';

/** Why nothing runs in Restricted Mode (shown in the status bar; the server starts once the workspace is trusted). */
export const RESTRICTED_MODE = 'AccelOpt runs the kernels of a workspace to profile them, so it stays off in Restricted '
  + 'Mode: trust this workspace to start it.';

/** The language client, with this extension's command and progress features in place of the built-in ones. */
export class AccelOptClient extends LanguageClient {
  // `declare`: no field initialisers, since the base constructor assigns these through registerFeature.
  declare serverCommands: ServerCommandsFeature;
  declare progressUi: ProgressUiFeature;

  override registerFeature(feature: StaticFeature | DynamicFeature<unknown>): void {
    const dynamic = feature as Partial<DynamicFeature<unknown>>;
    if (dynamic.registrationType?.method === ExecuteCommandRequest.method) {
      this.serverCommands = new ServerCommandsFeature(this);
      super.registerFeature(this.serverCommands);
      return;
    }
    const state = feature.getState();
    if (state.kind === 'window' && state.id === WorkDoneProgressCreateRequest.method) {
      this.progressUi = new ProgressUiFeature(this);
      super.registerFeature(this.progressUi);
      return;
    }
    super.registerFeature(feature);
  }
}

function workspaceFolder(): vscode.WorkspaceFolder | undefined {
  const active = vscode.window.activeTextEditor?.document.uri;
  return (active && vscode.workspace.getWorkspaceFolder(active)) ?? vscode.workspace.workspaceFolders?.[0];
}

/** A workspace folder that is a checkout of accelopt itself (then the install command is `pip install -e`). */
function sourceCheckout(): string | undefined {
  for (const folder of vscode.workspace.workspaceFolders ?? []) {
    try {
      const text = fs.readFileSync(path.join(folder.uri.fsPath, 'pyproject.toml'), 'utf8');
      if (/^\s*name\s*=\s*["']accelopt["']/m.test(text)) {
        return folder.uri.fsPath;
      }
    } catch {
      // not a checkout
    }
  }
  return undefined;
}

export class ServerManager implements vscode.Disposable {
  private current: AccelOptClient | undefined;
  private stateValue: ServerState = 'stopped';
  private problem: string | undefined;
  private readonly stateEmitter = new vscode.EventEmitter<ServerState>();
  private readonly restarts = new RestartPolicy();
  private pending: Promise<void> = Promise.resolve();
  private readonly shownProblems = new Set<string>();
  private lastProblem: { message: string; actions: string[]; interpreter?: Interpreter; command?: string } | undefined;
  readonly onDidChangeState = this.stateEmitter.event;
  /** Milliseconds from the first start request until the server answered `initialize`. */
  firstReadyMs: number | undefined;

  constructor(private readonly output: vscode.LogOutputChannel, private readonly secrets: SecretStore) {}

  get client(): AccelOptClient | undefined {
    return this.stateValue === 'running' ? this.current : undefined;
  }

  get state(): ServerState {
    return this.stateValue;
  }

  get problemText(): string | undefined {
    return this.problem;
  }

  private setState(state: ServerState): void {
    this.stateValue = state;
    this.stateEmitter.fire(state);
  }

  /** Starts the server (or restarts it); concurrent calls run one after another. */
  restart(reason: string): Promise<void> {
    this.pending = this.pending.then(() => this.doRestart(reason), () => this.doRestart(reason));
    return this.pending;
  }

  /** Resolves when the server is running (true) or could not start (false). */
  async ready(): Promise<boolean> {
    await this.pending;
    return this.stateValue === 'running';
  }

  private async doRestart(reason: string): Promise<void> {
    const started = Date.now();
    this.output.info(`Starting the server: ${reason}`);
    await this.stopClient();
    if (!vscode.workspace.isTrusted) {
      this.problem = RESTRICTED_MODE;
      this.output.info('Restricted Mode: the server is not started until the workspace is trusted.');
      this.setState('restricted');
      return;
    }
    this.setState('starting');
    this.problem = undefined;
    const settings = readSettings(<T>(key: string, fallback: T) => vscode.workspace.getConfiguration(SECTION).get<T>(key, fallback));
    const folder = workspaceFolder();
    const interpreter = await resolveInterpreter(settings.python, folder);
    this.output.info(`Python: ${interpreter.command} (${describeSource(interpreter)})`);
    const cwd = folder?.uri.fsPath;
    const check = await checkPython(interpreter.command, cwd);
    if (check.kind !== 'ok') {
      this.fail(check, interpreter);
      return;
    }
    this.output.info(`accelopt ${check.accelopt ?? '(version unknown)'} on Python ${check.pythonVersion} at ${check.executable}`);
    const secrets = await this.secrets.read();
    const serverOptions: ServerOptions = {
      command: interpreter.command,
      args: [...SERVER_ARGS],
      transport: TransportKind.stdio,
      options: { cwd, env: { ...process.env, PYTHONUNBUFFERED: '1', PYTHONIOENCODING: 'utf-8' } },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { scheme: 'file', language: 'python' },
        { scheme: 'untitled', language: 'python' },
      ],
      outputChannel: this.output,
      traceOutputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: initializationOptions(settings, secrets, vscode.workspace.isTrusted),
      synchronize: { configurationSection: SECTION },
      markdown: { isTrusted: false, supportHtml: false },
      errorHandler: {
        error: (_error, _message, count): ErrorHandlerResult =>
          ({ action: (count ?? 0) <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown, handled: true }),
        closed: (): CloseHandlerResult => this.onClosed(),
      },
    };
    const client = new AccelOptClient('accelopt', 'AccelOpt', serverOptions, clientOptions);
    this.current = client;
    try {
      await client.start();
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.output.error(`The server did not start: ${message}`);
      this.problem = `The AccelOpt language server (python -m server --stdio, with ${interpreter.command}) `
        + 'exited before it was ready; its error is in the AccelOpt output channel.';
      this.setState('failed');
      void this.notifyProblem(this.problem, [], interpreter);
      return;
    }
    const elapsed = Date.now() - started;
    this.firstReadyMs = this.firstReadyMs ?? elapsed;
    this.output.info(`Server ready in ${elapsed} ms`);
    this.setState('running');
  }

  private onClosed(): CloseHandlerResult {
    if (this.stateValue === 'starting') {
      // It exited before answering `initialize`: a broken install or a bad argument, not a crash.
      // Restarting would fail the same way; doRestart reports it once start() rejects.
      return { action: CloseAction.DoNotRestart, handled: true };
    }
    const decision = this.restarts.onCrash(Date.now());
    if (decision.restart) {
      const text = `The AccelOpt language server stopped unexpectedly; restarting it (attempt ${decision.attempt} of ${decision.limit}).`;
      this.output.warn(text);
      void vscode.window.showWarningMessage(text, 'Show Log').then((choice) => {
        if (choice === 'Show Log') {
          this.output.show(true);
        }
      });
      return { action: CloseAction.Restart, handled: true };
    }
    const text = `The AccelOpt language server crashed ${decision.attempt} times in 3 minutes and was not restarted.`;
    this.output.error(text);
    this.problem = text;
    this.setState('failed');
    void vscode.window.showErrorMessage(text, 'Show Log', 'Restart').then((choice) => {
      if (choice === 'Show Log') {
        this.output.show(true);
      } else if (choice === 'Restart') {
        this.restarts.reset();
        void this.restart('restart requested after crashes');
      }
    });
    return { action: CloseAction.DoNotRestart, handled: true };
  }

  private fail(check: CheckResult, interpreter: Interpreter): void {
    const message = problemMessage(check, interpreter.command);
    this.problem = message;
    this.output.error(message);
    this.setState('failed');
    if (check.kind === 'missing') {
      const command = installCommand(check.executable || interpreter.command, sourceCheckout());
      this.output.info(`Install command: ${command}`);
      void this.notifyProblem(message, ['Install in Terminal', 'Copy Install Command'], interpreter, command);
    } else {
      void this.notifyProblem(message, [], interpreter);
    }
  }

  /** Shows a start-up problem once per distinct message, with buttons to fix it. */
  async notifyProblem(message: string, actions: string[], interpreter?: Interpreter, command?: string, force = false): Promise<void> {
    this.lastProblem = { message, actions, interpreter, command };
    if (!force && this.shownProblems.has(message)) {
      return;
    }
    this.shownProblems.add(message);
    const hasPythonExtension = vscode.extensions.getExtension('ms-python.python') !== undefined;
    const choose = hasPythonExtension && interpreter?.source !== 'setting' ? 'Select Interpreter' : 'Set accelopt.python';
    const choice = await vscode.window.showErrorMessage(message, ...actions, choose, 'Show Log');
    if (choice === 'Install in Terminal' && command) {
      const terminal = vscode.window.createTerminal({ name: 'AccelOpt install' });
      terminal.show();
      terminal.sendText(command);
      void vscode.window.showInformationMessage('When the install has finished, run "AccelOpt: Restart Language Server".',
        'Restart Now').then((again) => {
        if (again) {
          void this.restart('restart after installing accelopt');
        }
      });
    } else if (choice === 'Copy Install Command' && command) {
      await vscode.env.clipboard.writeText(command);
      void vscode.window.showInformationMessage(`Copied: ${command}`);
    } else if (choice === 'Select Interpreter') {
      await vscode.commands.executeCommand('python.setInterpreter');
    } else if (choice === 'Set accelopt.python') {
      await vscode.commands.executeCommand('workbench.action.openSettings', `${SECTION}.python`);
    } else if (choice === 'Show Log') {
      this.output.show(true);
    }
  }

  /** Shows the current start-up problem again (from a command or the status bar). */
  showProblem(): void {
    const last = this.lastProblem;
    if (last && last.message === this.problem) {
      void this.notifyProblem(last.message, last.actions, last.interpreter, last.command, true);
    } else if (this.problem) {
      void this.notifyProblem(this.problem, [], undefined, undefined, true);
    }
  }

  private async stopClient(): Promise<void> {
    const client = this.current;
    this.current = undefined;
    if (client) {
      this.setState('stopped');
      try {
        await client.stop(5000);
      } catch (error) {
        this.output.warn(`Stopping the server: ${error instanceof Error ? error.message : String(error)}`);
      }
    }
  }

  async dispose(): Promise<void> {
    await this.stopClient();
    this.stateEmitter.dispose();
  }
}

function describeSource(interpreter: Interpreter): string {
  switch (interpreter.source) {
    case 'setting':
      return 'from the accelopt.python setting';
    case 'python-extension':
      return "the Python extension's selected interpreter";
    default:
      return 'default; set accelopt.python to choose another';
  }
}
