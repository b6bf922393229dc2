// The server's commands (its `executeCommandProvider`). The language client would register each of them
// as a VS Code command; five of them are this extension's own commands (they add the document URI,
// progress and the report panel, then forward to the server under the same name), so this feature,
// which replaces the built-in one, records every server command but registers only the others.

import { randomUUID } from 'node:crypto';
import * as vscode from 'vscode';
import {
  BaseLanguageClient,
  ClientCapabilities,
  DynamicFeature,
  ExecuteCommandRegistrationOptions,
  ExecuteCommandRequest,
  FeatureState,
  RegistrationData,
  RegistrationType,
  ServerCapabilities,
} from 'vscode-languageclient/node';

/** Commands the extension registers itself; the server's commands of the same names are called from them. */
export const CLIENT_COMMANDS: readonly string[] = [
  'accelopt.optimize',
  'accelopt.profile',
  'accelopt.showReport',
  'accelopt.applyBestRewrite',
  'accelopt.showMemory',
];

export class ServerCommandsFeature implements DynamicFeature<ExecuteCommandRegistrationOptions> {
  private readonly registrations = new Map<string, { names: string[]; disposables: vscode.Disposable[] }>();

  constructor(private readonly client: BaseLanguageClient) {}

  get registrationType(): RegistrationType<ExecuteCommandRegistrationOptions> {
    return ExecuteCommandRequest.type;
  }

  getState(): FeatureState {
    return { kind: 'workspace', id: this.registrationType.method, registrations: this.registrations.size > 0 };
  }

  fillClientCapabilities(capabilities: ClientCapabilities): void {
    capabilities.workspace = capabilities.workspace ?? {};
    capabilities.workspace.executeCommand = { dynamicRegistration: true };
  }

  initialize(capabilities: ServerCapabilities): void {
    if (capabilities.executeCommandProvider) {
      this.register({ id: randomUUID(), registerOptions: { ...capabilities.executeCommandProvider } });
    }
  }

  register(data: RegistrationData<ExecuteCommandRegistrationOptions>): void {
    const names = data.registerOptions.commands ?? [];
    const disposables: vscode.Disposable[] = [];
    for (const name of names) {
      if (CLIENT_COMMANDS.includes(name)) {
        continue;
      }
      disposables.push(vscode.commands.registerCommand(name, (...args: unknown[]) => this.execute(name, args)));
    }
    this.registrations.set(data.id, { names, disposables });
  }

  unregister(id: string): void {
    this.registrations.get(id)?.disposables.forEach((d) => d.dispose());
    this.registrations.delete(id);
  }

  clear(): void {
    for (const id of [...this.registrations.keys()]) {
      this.unregister(id);
    }
  }

  /** Every command name the server offers now. */
  get commands(): Set<string> {
    return new Set([...this.registrations.values()].flatMap((r) => r.names));
  }

  private async execute(command: string, args: unknown[]): Promise<unknown> {
    try {
      return await this.client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args });
    } catch (error) {
      return this.client.handleFailedRequest(ExecuteCommandRequest.type, undefined, error, undefined);
    }
  }
}
