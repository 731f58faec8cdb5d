import * as fs from 'node:fs';
import * as path from 'node:path';

/** The repository root (tests run from out/test/unit). */
export const ROOT = path.resolve(__dirname, '..', '..', '..');
export const FIXTURES = path.join(ROOT, 'extension', 'test', 'fixtures');
export const GOLDEN = path.join(FIXTURES, 'golden');

export function readJson<T = unknown>(file: string): T {
  return JSON.parse(fs.readFileSync(file, 'utf8')) as T;
}

export function golden<T = unknown>(name: string): T {
  return readJson<T>(path.join(GOLDEN, name));
}

export function goldenLines(name: string): unknown[] {
  return fs
    .readFileSync(path.join(GOLDEN, name), 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as unknown);
}
