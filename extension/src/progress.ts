// `$/progress` in the editor. The language client's own handling shows every server progress in the
// status bar, where it cannot be cancelled; this replaces it: a progress that the server marks
// cancellable becomes a notification with a Cancel button (which sends `window/workDoneProgress/cancel`),
// others stay in the status bar. While an Optimize runs from this extension, the server's progress is
// routed into that command's own notification instead of opening a second one.

import * as vscode from 'vscode';
import {
  BaseLanguageClient,
  ClientCapabilities,
  FeatureState,
  StaticFeature,
  WorkDoneProgress,
  WorkDoneProgressBegin,
  WorkDoneProgressCancelNotification,
  WorkDoneProgressCreateParams,
  WorkDoneProgressCreateRequest,
  WorkDoneProgressEnd,
  WorkDoneProgressReport,
} from 'vscode-languageclient/node';

export type ProgressValue = WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd;
export type ProgressToken = string | number;

/** Receives the progress of server-created tokens while it holds the claim. */
export type ProgressClaim = (token: ProgressToken, value: ProgressValue) => void;

/** Turns absolute LSP percentages into the increments VS Code's progress API wants. */
export class PercentTracker {
  private last = 0;

  increment(percentage: number | undefined): number | undefined {
    if (percentage === undefined || !Number.isFinite(percentage)) {
      return undefined;
    }
    const clamped = Math.max(0, Math.min(100, percentage));
    const step = clamped - this.last;
    this.last = Math.max(this.last, clamped);
    return step > 0 ? step : undefined;
  }
}

class ProgressView {
  private progress: vscode.Progress<{ message?: string; increment?: number }> | undefined;
  private finish: (() => void) | undefined;
  private readonly percent = new PercentTracker();
  private readonly subscription: vscode.Disposable;

  constructor(private readonly client: BaseLanguageClient, private readonly token: ProgressToken,
              private readonly onDone: (view: ProgressView) => void) {
    this.subscription = client.onProgress(WorkDoneProgress.type, token, (value) => this.handle(value));
  }

  private handle(value: ProgressValue): void {
    if (value.kind === 'begin') {
      const location = value.cancellable ? vscode.ProgressLocation.Notification : vscode.ProgressLocation.Window;
      void vscode.window.withProgress({ location, title: `AccelOpt: ${value.title}`, cancellable: !!value.cancellable },
        (progress, cancellation) => {
          this.progress = progress;
          cancellation.onCancellationRequested(() => {
            void this.client.sendNotification(WorkDoneProgressCancelNotification.type, { token: this.token });
          });
          progress.report({ message: value.message, increment: this.percent.increment(value.percentage) });
          return new Promise<void>((resolve) => { this.finish = resolve; });
        });
    } else if (value.kind === 'report') {
      this.progress?.report({ message: value.message, increment: this.percent.increment(value.percentage) });
    } else {
      this.done();
    }
  }

  done(): void {
    this.finish?.();
    this.subscription.dispose();
    this.onDone(this);
  }
}

/** The client feature that answers `window/workDoneProgress/create` (replaces the built-in one). */
export class ProgressUiFeature implements StaticFeature {
  private readonly views = new Set<ProgressView>();
  private claim: ProgressClaim | undefined;
  private readonly claimed = new Map<ProgressToken, vscode.Disposable>();

  constructor(private readonly client: BaseLanguageClient) {}

  getState(): FeatureState {
    return { kind: 'window', id: WorkDoneProgressCreateRequest.method, registrations: this.views.size > 0 };
  }

  fillClientCapabilities(capabilities: ClientCapabilities): void {
    capabilities.window = capabilities.window ?? {};
    capabilities.window.workDoneProgress = true;
  }

  initialize(): void {
    this.client.onRequest(WorkDoneProgressCreateRequest.type, (params: WorkDoneProgressCreateParams) => {
      const claim = this.claim;
      if (claim) {
        const subscription = this.client.onProgress(WorkDoneProgress.type, params.token, (value) => {
          claim(params.token, value);
          if (value.kind === 'end') {
            subscription.dispose();
            this.claimed.delete(params.token);
          }
        });
        this.claimed.set(params.token, subscription);
      } else {
        this.views.add(new ProgressView(this.client, params.token, (view) => this.views.delete(view)));
      }
    });
  }

  /** Routes progress that the server creates from now on to `handler`, until the returned value is disposed. */
  claimServerProgress(handler: ProgressClaim): vscode.Disposable {
    this.claim = handler;
    return new vscode.Disposable(() => {
      if (this.claim === handler) {
        this.claim = undefined;
      }
    });
  }

  clear(): void {
    for (const view of [...this.views]) {
      view.done();
    }
    this.views.clear();
    this.claimed.forEach((subscription) => subscription.dispose());
    this.claimed.clear();
    this.claim = undefined;
  }
}
