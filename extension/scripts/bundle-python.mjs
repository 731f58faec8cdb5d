// Copies the Python distribution (pyproject.toml, README.md, lsp_server/, cdit_runtime/) into
// dist/python, which the VSIX carries: "cdit: Install the Bundled Python Package" pip-installs
// it into the user's interpreter when lsp_server does not import there.
import { cpSync, existsSync, mkdirSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const OUT = join(ROOT, 'dist', 'python');
const ITEMS = ['pyproject.toml', 'README.md', 'LICENSE', 'lsp_server', 'cdit_runtime'];
const SKIP = new Set(['__pycache__', '.pytest_cache', '.ruff_cache']);

rmSync(OUT, { recursive: true, force: true });
mkdirSync(OUT, { recursive: true });
for (const item of ITEMS) {
  const src = join(ROOT, item);
  if (!existsSync(src)) continue;
  cpSync(src, join(OUT, item), {
    recursive: true,
    filter: (p) => !SKIP.has(basename(p)) && !p.endsWith('.pyc'),
  });
}
for (const required of ['pyproject.toml', 'lsp_server', 'cdit_runtime']) {
  if (!existsSync(join(OUT, required))) throw new Error(`bundle-python: ${required} is missing`);
}
console.log(`bundled the Python package into ${OUT}`);
