// Fetches a kernel's report from the server (`accelopt/report`) for the status bar and the panel.

import * as vscode from 'vscode';
import { ErrorCodes, ParameterStructures, RequestType, ResponseError } from 'vscode-languageclient/node';
import { Report, parseReport } from './report/model';
import { ServerManager } from './server';

export const REPORT_REQUEST = 'accelopt/report';

/** Params of `accelopt/report`: the document, in both the LSP way and plainly. */
export interface ReportParams {
  textDocument: { uri: string };
  uri: string;
}

// A typed request (params sent by name, as one object), so an absent cancellation token is not
// mistaken for a second positional parameter.
const ReportRequest = new RequestType<ReportParams, unknown, void>(REPORT_REQUEST, ParameterStructures.byName);

export class ReportService implements vscode.Disposable {
  private unsupported = false;
  private readonly latest = new Map<string, Report | null>();
  private readonly emitter = new vscode.EventEmitter<vscode.Uri>();
  private readonly subscriptions: vscode.Disposable[] = [];
  /** Fires after a report was fetched for a document (it may be unchanged). */
  readonly onDidFetch = this.emitter.event;

  constructor(private readonly server: ServerManager, private readonly output: vscode.LogOutputChannel) {
    this.subscriptions.push(server.onDidChangeState((state) => {
      if (state === 'starting') {
        this.unsupported = false;
        this.latest.clear();
      }
    }));
  }

  /** Whether the server can answer now. */
  get serverRunning(): boolean {
    return this.server.client !== undefined;
  }

  /** The last report fetched for `uri`, if any. */
  cached(uri: vscode.Uri): Report | null | undefined {
    return this.latest.get(uri.toString());
  }

  /** Asks the server; null when the document is no profiled kernel or the server is not running. */
  async fetch(uri: vscode.Uri, token?: vscode.CancellationToken): Promise<Report | null> {
    const client = this.server.client;
    if (!client || this.unsupported) {
      return null;
    }
    const key = uri.toString();
    try {
      const raw = await client.sendRequest(ReportRequest, { textDocument: { uri: key }, uri: key }, token);
      const report = parseReport(raw);
      this.latest.set(key, report);
      this.emitter.fire(uri);
      return report;
    } catch (error) {
      if (error instanceof ResponseError && error.code === ErrorCodes.MethodNotFound) {
        this.unsupported = true;
        this.output.warn(`The server does not answer ${REPORT_REQUEST}; the status bar and report panel stay empty.`);
        return null;
      }
      if (!(error instanceof ResponseError && error.code === -32800)) {
        this.output.warn(`${REPORT_REQUEST} failed: ${error instanceof Error ? error.message : String(error)}`);
      }
      return this.latest.get(key) ?? null;
    }
  }

  dispose(): void {
    this.subscriptions.forEach((d) => d.dispose());
    this.emitter.dispose();
  }
}
