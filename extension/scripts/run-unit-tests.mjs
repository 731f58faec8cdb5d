// Runs the bundled unit tests (out/test/unit/*.test.js) with Node's built-in test runner:
// nothing to download, works on Node 20.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const dir = join(ROOT, 'out', 'test', 'unit');
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.test.js'))
  .sort()
  .map((f) => join(dir, f));
if (files.length === 0) {
  console.error('no unit tests found in out/test/unit');
  process.exit(1);
}
const r = spawnSync(process.execPath, ['--test', '--test-reporter=spec', ...files], {
  stdio: 'inherit',
  cwd: ROOT,
});
process.exit(r.status ?? 1);
