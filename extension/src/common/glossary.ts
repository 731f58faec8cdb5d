/**
 * `cdit.openGlossary`: the glossary (docs/glossary.md, packaged in the VSIX as is) in the Markdown
 * preview, at a term. The server's hovers and diagnostic codes link to it as
 * `command:cdit.openGlossary?["<anchor>"]` (the language client trusts this command alone).
 *
 * Anchors are explicit `<a id="…"></a>` before a term, or a heading's slug. The preview scrolls
 * only to headings (it looks the fragment up among the ids of its source-line elements), so an
 * explicit anchor opens the preview at the heading of the section that holds the term.
 */
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import type * as vscodeApi from 'vscode';

export const GLOSSARY_COMMAND = 'cdit.openGlossary';
/** Where the glossary lies inside the extension (the repository root when run from source). */
export const GLOSSARY_PATH = path.join('docs', 'glossary.md');
const ANCHOR = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** The anchor of the command's argument (`"forwardpattern"` or `["forwardpattern"]`). */
export function parseAnchor(arg: unknown): string | undefined {
  const value = Array.isArray(arg) ? (arg as unknown[])[0] : arg;
  return typeof value === 'string' && ANCHOR.test(value) ? value : undefined;
}

/** GitHub's (and VS Code's preview's) id of a heading: lower case, punctuation out, spaces `-`. */
export function headingSlug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

export interface GlossaryTarget {
  /** the heading slug the preview scrolls to (undefined: the top) */
  fragment: string | undefined;
  /** 0-based line of the anchor in the file (0 when not found) */
  line: number;
}

/** Where `anchor` is in the glossary's text: its section heading and its line. */
export function locate(markdown: string, anchor: string | undefined): GlossaryTarget {
  if (!anchor) return { fragment: undefined, line: 0 };
  let heading: string | undefined;
  let fence = false;
  const lines = markdown.split(/\r?\n/);
  for (const [i, text] of lines.entries()) {
    if (/^\s*(```|~~~)/.test(text)) fence = !fence;
    if (fence) continue;
    const h = /^#{1,6}\s+(.+?)\s*#*\s*$/.exec(text);
    if (h?.[1]) {
      heading = headingSlug(h[1]);
      if (heading === anchor) return { fragment: heading, line: i };
    }
    if (text.includes(`<a id="${anchor}"></a>`)) return { fragment: heading, line: i };
  }
  return { fragment: undefined, line: 0 };
}

/** Opens the glossary in the Markdown preview beside the editor, at `arg`'s section. */
export async function openGlossary(
  vscode: typeof vscodeApi,
  extensionPath: string,
  arg: unknown,
): Promise<void> {
  const file = path.join(extensionPath, GLOSSARY_PATH);
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch {
    void vscode.window.showErrorMessage(`cdit: the glossary is missing (${file}).`);
    return;
  }
  const target = locate(text, parseAnchor(arg));
  const uri = vscode.Uri.file(file);
  try {
    // The preview starts at the URI's fragment (markdown-language-features' `openDynamicPreview`).
    await vscode.commands.executeCommand(
      'markdown.showPreviewToSide',
      target.fragment ? uri.with({ fragment: target.fragment }) : uri,
    );
  } catch {
    // No Markdown preview (the built-in extension disabled): the source, at the term's line.
    const at = new vscode.Position(target.line, 0);
    await vscode.window.showTextDocument(uri, {
      preview: true,
      viewColumn: vscode.ViewColumn.Beside,
      selection: new vscode.Range(at, at),
    });
  }
}
