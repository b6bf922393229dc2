// The status bar item for the active kernel: `40% of peak · trn1`; a click shows the report.

import * as vscode from 'vscode';
import { statusText, statusTooltip } from './report/model';
import { ReportService } from './reports';
import { ServerManager } from './server';
import { SECTION } from './settings';

const REFRESH_DELAY_MS = 300;

export class KernelStatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly subscriptions: vscode.Disposable[] = [];
  private timer: NodeJS.Timeout | undefined;
  private generation = 0;

  constructor(private readonly server: ServerManager, private readonly reports: ReportService) {
    this.item = vscode.window.createStatusBarItem('accelopt.kernel', vscode.StatusBarAlignment.Right, 100);
    this.item.name = 'AccelOpt kernel';
    this.subscriptions.push(
      this.item,
      vscode.window.onDidChangeActiveTextEditor(() => this.schedule(0)),
      vscode.languages.onDidChangeDiagnostics((event) => {
        const active = vscode.window.activeTextEditor?.document.uri.toString();
        if (active && event.uris.some((uri) => uri.toString() === active)) {
          this.schedule(REFRESH_DELAY_MS);
        }
      }),
      vscode.workspace.onDidSaveTextDocument(() => this.schedule(REFRESH_DELAY_MS)),
      vscode.workspace.onDidChangeConfiguration((event) => {
        if (event.affectsConfiguration(SECTION)) {
          this.schedule(REFRESH_DELAY_MS);
        }
      }),
      server.onDidChangeState(() => this.schedule(0)),
      reports.onDidFetch((uri) => {
        if (uri.toString() === vscode.window.activeTextEditor?.document.uri.toString()) {
          this.render();
        }
      }),
    );
    this.schedule(0);
  }

  /** Refreshes soon, coalescing bursts of events. */
  schedule(delayMs: number): void {
    if (this.timer) {
      clearTimeout(this.timer);
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.refresh();
    }, delayMs);
  }

  private async refresh(): Promise<void> {
    const generation = ++this.generation;
    const document = vscode.window.activeTextEditor?.document;
    if (!document || document.languageId !== 'python') {
      this.item.hide();
      return;
    }
    if (this.server.state !== 'running') {
      this.render();
      return;
    }
    await this.reports.fetch(document.uri);
    if (generation === this.generation) {
      this.render();
    }
  }

  private render(): void {
    const document = vscode.window.activeTextEditor?.document;
    if (!document || document.languageId !== 'python') {
      this.item.hide();
      return;
    }
    const state = this.server.state;
    if (state === 'restricted') {
      this.item.text = '$(shield) AccelOpt';
      this.item.tooltip = this.server.problemText;
      this.item.command = 'workbench.trust.manage';
      this.item.show();
      return;
    }
    if (state === 'failed') {
      this.item.text = '$(error) AccelOpt';
      this.item.tooltip = this.server.problemText ?? 'The AccelOpt server is not running';
      this.item.command = 'accelopt.showServerProblem';
      this.item.show();
      return;
    }
    if (state === 'starting') {
      this.item.text = '$(sync~spin) AccelOpt';
      this.item.tooltip = 'The AccelOpt language server is starting';
      this.item.command = 'accelopt.showLog';
      this.item.show();
      return;
    }
    const report = this.reports.cached(document.uri);
    if (!report) {
      this.item.hide();
      return;
    }
    const hardware = vscode.workspace.getConfiguration(SECTION).get<string>('hardware', 'trn1');
    this.item.text = statusText(report, hardware);
    this.item.tooltip = statusTooltip(report);
    this.item.command = { title: 'Show Report', command: 'accelopt.showReport', arguments: [document.uri.toString()] };
    this.item.show();
  }

  dispose(): void {
    if (this.timer) {
      clearTimeout(this.timer);
    }
    this.subscriptions.forEach((d) => d.dispose());
  }
}
