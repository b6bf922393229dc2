// The report panel: one webview showing the report of one kernel file, refreshed when the server
// publishes new results for it and, while a search runs, every couple of seconds.

import { randomBytes } from 'node:crypto';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { makeNonce, renderReportBody, reportDocument } from './report/html';
import { Report } from './report/model';
import { ReportService } from './reports';

const VIEW_TYPE = 'accelopt.report';

export class ReportPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private uri: vscode.Uri | undefined;
  private readonly subscriptions: vscode.Disposable[] = [];
  private pollTimer: NodeJS.Timeout | undefined;
  private pollers = 0;

  constructor(private readonly reports: ReportService) {
    this.subscriptions.push(vscode.languages.onDidChangeDiagnostics((event) => {
      if (this.uri && event.uris.some((uri) => uri.toString() === this.uri?.toString())) {
        void this.refresh();
      }
    }));
  }

  /** Opens (or reveals) the panel for `uri` and fills it with a fresh report. */
  async show(uri: vscode.Uri, report?: Report | null): Promise<void> {
    this.uri = uri;
    const title = `AccelOpt: ${path.basename(uri.fsPath || uri.path)}`;
    if (!this.panel) {
      this.panel = vscode.window.createWebviewPanel(VIEW_TYPE, title, { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true }, {
        enableScripts: true,
        enableCommandUris: false,
        localResourceRoots: [],
        retainContextWhenHidden: false,
      });
      this.panel.onDidDispose(() => {
        this.panel = undefined;
        this.uri = undefined;
      }, null, this.subscriptions);
      this.panel.webview.onDidReceiveMessage((message: { type?: string; line?: number }) => {
        if (message?.type === 'reveal' && typeof message.line === 'number' && this.uri) {
          void revealLine(this.uri, message.line);
        }
      }, null, this.subscriptions);
      this.panel.onDidChangeViewState(() => {
        if (this.panel?.visible) {
          void this.refresh();
        }
      }, null, this.subscriptions);
      const nonce = makeNonce((size) => randomBytes(size));
      this.panel.webview.html = reportDocument(await this.body(uri, report), nonce, this.panel.webview.cspSource);
    } else {
      this.panel.title = title;
      this.panel.reveal(vscode.ViewColumn.Beside, true);
      await this.post(await this.body(uri, report));
    }
  }

  /** Re-fetches and redraws the open panel's report. */
  async refresh(): Promise<void> {
    if (this.panel && this.uri && this.panel.visible) {
      const uri = this.uri;
      const body = await this.body(uri);
      if (this.uri?.toString() === uri.toString()) {
        await this.post(body);
      }
    }
  }

  /** Refreshes the open panel every `intervalMs` until the returned value is disposed (during a search). */
  pollWhile(intervalMs = 2000): vscode.Disposable {
    this.pollers += 1;
    if (!this.pollTimer) {
      this.pollTimer = setInterval(() => void this.refresh(), intervalMs);
    }
    return new vscode.Disposable(() => {
      this.pollers -= 1;
      if (this.pollers === 0 && this.pollTimer) {
        clearInterval(this.pollTimer);
        this.pollTimer = undefined;
      }
    });
  }

  private async body(uri: vscode.Uri, report?: Report | null): Promise<string> {
    const current = report === undefined ? await this.reports.fetch(uri) : report;
    let sourceLines: string[] | undefined;
    try {
      sourceLines = (await vscode.workspace.openTextDocument(uri)).getText().split(/\r?\n/);
    } catch {
      sourceLines = undefined;
    }
    return renderReportBody(current, {
      sourceLines,
      fileName: vscode.workspace.asRelativePath(uri),
      serverDown: !this.reports.serverRunning,
    });
  }

  private async post(html: string): Promise<void> {
    await this.panel?.webview.postMessage({ type: 'render', html });
  }

  dispose(): void {
    if (this.pollTimer) {
      clearInterval(this.pollTimer);
    }
    this.panel?.dispose();
    this.subscriptions.forEach((d) => d.dispose());
  }
}

async function revealLine(uri: vscode.Uri, line: number): Promise<void> {
  const document = await vscode.workspace.openTextDocument(uri);
  const position = new vscode.Position(Math.max(0, line - 1), 0);
  await vscode.window.showTextDocument(document, {
    viewColumn: vscode.ViewColumn.One,
    selection: new vscode.Range(position, position),
  });
}
