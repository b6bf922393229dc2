import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { CHECK_SCRIPT, installCommand, interpretCheck, problemMessage, shellQuote } from '../src/pythonCheck';
import { RestartPolicy } from '../src/restartPolicy';
import { initializationOptions, readSettings } from '../src/settings';

describe('settings', () => {
  const values: Record<string, unknown> = { python: ' /opt/py/bin/python ', hardware: 'trn2', 'llm.baseUrl': 'http://127.0.0.1:8000/v1', 'search.budget': '2.5' };
  const get = <T>(key: string, fallback: T): T => (key in values ? (values[key] as T) : fallback);

  it('reads with defaults', () => {
    const settings = readSettings(get);
    assert.equal(settings.python, '/opt/py/bin/python');
    assert.equal(settings.hardware, 'trn2');
    assert.equal(settings.backend, 'simulator');
    assert.equal(settings.search.preset, 'quick');
    assert.equal(settings.search.budget, 2.5);
    assert.equal(settings.memory.dbPath, '');
  });

  it('puts secrets apart and leaves empty ones out', () => {
    const options = initializationOptions(readSettings(get), { llmApiKey: 'sk-1', serviceToken: '' }, true);
    assert.deepEqual(options.secrets, { llmApiKey: 'sk-1' });
    assert.equal(options.workspaceTrusted, true);
    assert.equal(options.hardware, 'trn2');
    assert.deepEqual(options.llm, { baseUrl: 'http://127.0.0.1:8000/v1', model: '' });
    assert.equal('python' in options, false);
  });

  it('tells the server whether the workspace is trusted', () => {
    assert.equal(initializationOptions(readSettings(get), {}, false).workspaceTrusted, false);
  });
});

describe('package.json', () => {
  const manifest = JSON.parse(readFileSync(join(__dirname, '..', 'package.json'), 'utf8'));
  const properties = manifest.contributes.configuration.properties;

  it('reads where secrets are sent from user settings only', () => {
    assert.equal(properties['accelopt.backend'].scope, 'machine');
    assert.equal(properties['accelopt.llm.baseUrl'].scope, 'machine');
  });

  it('runs nothing of an untrusted workspace and ignores its interpreter and memory settings', () => {
    const untrusted = manifest.capabilities.untrustedWorkspaces;
    assert.equal(untrusted.supported, 'limited');
    assert.deepEqual(untrusted.restrictedConfigurations, ['accelopt.python', 'accelopt.memory.dbPath']);
  });
});

describe('python check', () => {
  it('accepts a good interpreter', () => {
    const out = '{"executable": "/usr/bin/python3", "python": [3, 11, 7], "missing": [], "accelopt": "0.1.0"}\n';
    assert.deepEqual(interpretCheck(out, null), { kind: 'ok', executable: '/usr/bin/python3', pythonVersion: '3.11.7', accelopt: '0.1.0' });
  });

  it('reports missing modules with an install command', () => {
    const result = interpretCheck('{"executable": "/usr/bin/python3", "python": [3, 12, 1], "missing": ["accelopt_core", "server"]}', null);
    assert.equal(result.kind, 'missing');
    assert.match(problemMessage(result, 'python3'), /not installed in \/usr\/bin\/python3 .*missing: accelopt_core, server/);
    assert.equal(installCommand('/usr/bin/python3'), '/usr/bin/python3 -m pip install accelopt');
    assert.equal(installCommand('/a b/python', '/src/accel opt'), "'/a b/python' -m pip install -e '/src/accel opt'");
  });

  it('reports an old or absent Python', () => {
    assert.equal(interpretCheck('{"executable": "x", "python": [3, 9, 2], "missing": []}', null).kind, 'old-python');
    const absent = interpretCheck('', { code: 'ENOENT', message: 'spawn nope ENOENT' });
    assert.deepEqual(absent, { kind: 'no-python', detail: 'not found' });
    assert.match(problemMessage(absent, 'nope'), /could not run Python "nope" \(not found\)/);
  });

  it('quotes for shells', () => {
    assert.equal(shellQuote('/usr/bin/python3', false), '/usr/bin/python3');
    assert.equal(shellQuote("/it's/py", false), "'/it'\\''s/py'");
    assert.equal(shellQuote('C:\\Program Files\\py.exe', true), '& "C:\\Program Files\\py.exe"');
  });

  it('has a check script that is valid Python', () => {
    assert.match(CHECK_SCRIPT, /find_spec/);
    assert.doesNotMatch(CHECK_SCRIPT, /\t/);
  });
});

describe('restart policy', () => {
  it('restarts four times within three minutes, then stops, and forgets old crashes', () => {
    const policy = new RestartPolicy(4, 180_000);
    const decisions = [0, 1000, 2000, 3000, 4000].map((t) => policy.onCrash(t));
    assert.deepEqual(decisions.map((d) => d.restart), [true, true, true, true, false]);
    assert.equal(policy.onCrash(400_000).attempt, 1);
  });
});
