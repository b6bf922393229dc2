// Bundles the extension (src/extension.ts -> dist/extension.js) with esbuild; `vscode` stays external.
// --production: minified, no source map (what the .vsix ships). --tests: bundles test/*.test.ts into
// dist-test/ for node's test runner.
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const production = process.argv.includes('--production');
const tests = process.argv.includes('--tests');

const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  logLevel: 'warning',
  absWorkingDir: root,
};

if (tests) {
  const entryPoints = readdirSync(join(root, 'test'))
    .filter((name) => name.endsWith('.test.ts'))
    .map((name) => join('test', name));
  await build({ ...common, entryPoints, outdir: 'dist-test', sourcemap: 'inline', external: ['vscode'] });
} else {
  await build({
    ...common,
    entryPoints: ['src/extension.ts'],
    outfile: 'dist/extension.js',
    external: ['vscode'],
    minify: production,
    // The first statement of the bundle: lets activate() report how long loading the bundle took.
    banner: { js: 'globalThis.__acceloptLoadStart = performance.now();' },
    sourcemap: production ? false : 'linked',
    metafile: false,
  });
}
