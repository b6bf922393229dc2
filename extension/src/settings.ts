// Settings the extension passes to the server. The server also reads them itself through
// `workspace/configuration` (section "accelopt"); the same values go in `initializationOptions` so they
// are there before the first request. Secrets never come from settings: they come from SecretStorage.
// No `vscode` import here, so the shape is unit-tested under Node.

export const SECTION = 'accelopt';

export interface AccelOptSettings {
  python: string;
  hardware: string;
  backend: string;
  llm: { baseUrl: string; model: string };
  search: { preset: string; budget: number };
  memory: { dbPath: string };
}

export interface AccelOptSecrets {
  llmApiKey?: string;
  serviceToken?: string;
}

/** Reads one setting by its dotted name below "accelopt" (e.g. `llm.baseUrl`). */
export type SettingReader = <T>(key: string, fallback: T) => T;

export function readSettings(get: SettingReader): AccelOptSettings {
  return {
    python: get('python', '').trim(),
    hardware: get('hardware', 'trn1'),
    backend: get('backend', 'simulator').trim() || 'simulator',
    llm: { baseUrl: get('llm.baseUrl', '').trim(), model: get('llm.model', '').trim() },
    search: { preset: get('search.preset', 'quick'), budget: Number(get('search.budget', 0)) || 0 },
    memory: { dbPath: get('memory.dbPath', '').trim() },
  };
}

/**
 * `initializationOptions` for the server: the settings (without `python`, which only the client uses),
 * under `secrets` whichever of the API key and service token the user stored (empty ones are left out
 * rather than sent as empty strings), and whether the workspace is trusted (if not, the server runs none
 * of its kernels).
 */
export function initializationOptions(settings: AccelOptSettings, secrets: AccelOptSecrets,
  workspaceTrusted: boolean): Record<string, unknown> {
  const kept: Record<string, string> = {};
  if (secrets.llmApiKey) {
    kept.llmApiKey = secrets.llmApiKey;
  }
  if (secrets.serviceToken) {
    kept.serviceToken = secrets.serviceToken;
  }
  return {
    hardware: settings.hardware,
    backend: settings.backend,
    llm: { ...settings.llm },
    search: { ...settings.search },
    memory: { ...settings.memory },
    secrets: kept,
    workspaceTrusted,
    client: 'vscode',
    // This client shows `accelopt/report` in its own panel: the server need not open a text report.
    reportPanel: true,
  };
}

/** Setting changes that need a new server process (not just a `didChangeConfiguration`). */
export const RESTART_SETTINGS: readonly string[] = [`${SECTION}.python`];
