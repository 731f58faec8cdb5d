/**
 * The Get Started walkthrough: every step has its page (packaged with the media), every command
 * link names a command the extension contributes, and the steps follow the flow in order.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';

const ROOT = path.join(__dirname, '..', '..', '..');

interface Step {
  id: string;
  description: string;
  media: { markdown?: string };
  completionEvents?: string[];
}

const manifest = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  contributes: {
    commands: { command: string }[];
    walkthroughs: { id: string; steps: Step[] }[];
  };
};

describe('walkthrough', () => {
  const commands = new Set(manifest.contributes.commands.map((c) => c.command));
  const [walkthrough] = manifest.contributes.walkthroughs;

  it('walks the flow in order: open, gate check, plan, generate, verify', () => {
    assert.ok(walkthrough);
    assert.deepEqual(
      walkthrough.steps.map((s) => s.id),
      ['open', 'gatecheck', 'plan', 'generate', 'verify'],
    );
  });

  it('links only to contributed commands and completes on them', () => {
    for (const step of walkthrough?.steps ?? []) {
      const links = [...step.description.matchAll(/\(command:([\w.]+)\)/g)].map((m) => m[1]);
      assert.ok(links.length > 0, `${step.id} has no command link`);
      for (const link of links) assert.ok(commands.has(link ?? ''), `${step.id}: ${link}`);
      for (const event of step.completionEvents ?? [])
        if (event.startsWith('onCommand:'))
          assert.ok(commands.has(event.slice('onCommand:'.length)), `${step.id}: ${event}`);
    }
  });

  it('has a page for every step, shipped in the package', () => {
    const ignore = fs.readFileSync(path.join(ROOT, '.vscodeignore'), 'utf8');
    assert.match(ignore, /^!extension\/media\/\*\*$/m);
    for (const step of walkthrough?.steps ?? []) {
      const page = step.media.markdown ?? '';
      assert.ok(page.startsWith('extension/media/'), page);
      const text = fs.readFileSync(path.join(ROOT, page), 'utf8');
      assert.match(text, /^# /, `${page} has no title`);
    }
  });
});
