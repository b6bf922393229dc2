// The LLM API key and the profiling service token live in VS Code's SecretStorage (the OS keychain where
// there is one), never in settings files. They reach the server only in `initializationOptions`.

import * as vscode from 'vscode';
import { AccelOptSecrets } from './settings';

const KEYS = {
  llmApiKey: 'accelopt.llm.apiKey',
  serviceToken: 'accelopt.service.token',
} as const;

export class SecretStore {
  constructor(private readonly storage: vscode.SecretStorage) {}

  async read(): Promise<AccelOptSecrets> {
    const [llmApiKey, serviceToken] = await Promise.all([this.storage.get(KEYS.llmApiKey), this.storage.get(KEYS.serviceToken)]);
    return { llmApiKey: llmApiKey || undefined, serviceToken: serviceToken || undefined };
  }

  onDidChange(listener: () => void): vscode.Disposable {
    return this.storage.onDidChange((event) => {
      if (event.key === KEYS.llmApiKey || event.key === KEYS.serviceToken) {
        listener();
      }
    });
  }

  /** The `AccelOpt: Set API Key` command: pick which secret, then type it (or clear it). Returns true when changed. */
  async promptAndStore(): Promise<boolean> {
    const current = await this.read();
    const items: (vscode.QuickPickItem & { key: keyof typeof KEYS })[] = [
      {
        key: 'llmApiKey',
        label: 'LLM API key',
        description: current.llmApiKey ? 'set' : 'not set',
        detail: 'Sent to the endpoint in accelopt.llm.baseUrl for the planner, executor and summarizer.',
      },
      {
        key: 'serviceToken',
        label: 'Profiling service token',
        description: current.serviceToken ? 'set' : 'not set',
        detail: 'Sent to the remote profiling service in accelopt.backend.',
      },
    ];
    const picked = await vscode.window.showQuickPick(items, { title: 'AccelOpt: Set API Key', placeHolder: 'Which secret?' });
    if (!picked) {
      return false;
    }
    const value = await vscode.window.showInputBox({
      title: `AccelOpt: ${picked.label}`,
      prompt: 'Stored in VS Code\'s secret storage, never in settings. Leave empty to remove it.',
      password: true,
      ignoreFocusOut: true,
    });
    if (value === undefined) {
      return false;
    }
    if (value.trim() === '') {
      await this.storage.delete(KEYS[picked.key]);
      void vscode.window.showInformationMessage(`AccelOpt: ${picked.label} removed.`);
    } else {
      await this.storage.store(KEYS[picked.key], value.trim());
      void vscode.window.showInformationMessage(`AccelOpt: ${picked.label} saved; the server restarts to use it.`);
    }
    return true;
  }
}
