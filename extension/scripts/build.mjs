// esbuild bundles: the extension (dist/extension.js) or, with --tests, the unit tests
// (out/test/unit/*.test.js). Node 20 is enough; nothing is downloaded.
import { build } from 'esbuild';
import { readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const tests = process.argv.includes('--tests');

// the contract types follow the runtime's schema (see gen-contract.mjs)
const { expected, OUTPUT_PATH } = await import('./gen-contract.mjs');
const { readFileSync, writeFileSync } = await import('node:fs');
const text = expected();
if (readFileSync(OUTPUT_PATH, 'utf8') !== text) writeFileSync(OUTPUT_PATH, text);
const production = process.argv.includes('--production');

const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  external: ['vscode'],
  logLevel: 'warning',
  absWorkingDir: ROOT,
};

if (tests) {
  const dir = join(ROOT, 'extension', 'test', 'unit');
  const entryPoints = readdirSync(dir)
    .filter((f) => f.endsWith('.test.ts'))
    .map((f) => join(dir, f));
  await build({
    ...common,
    entryPoints,
    outdir: join(ROOT, 'out', 'test', 'unit'),
    sourcemap: 'inline',
  });
  console.log(`bundled ${entryPoints.length} unit test files into out/test/unit`);
} else {
  const outfile = join(ROOT, 'dist', 'extension.js');
  await build({
    ...common,
    entryPoints: [join(ROOT, 'extension', 'src', 'extension.ts')],
    outfile,
    sourcemap: production ? false : 'linked',
    minify: production,
  });
  // A bundle without vscode-languageclient would be a few KB (esbuild leaves an unresolvable
  // require inside try/catch external): fail loudly instead of shipping a client that never starts.
  const size = statSync(outfile).size;
  if (size < 100_000)
    throw new Error(
      `dist/extension.js is only ${size} bytes: vscode-languageclient was not bundled`,
    );
  console.log(`dist/extension.js ${(size / 1024).toFixed(0)} KB`);
}
