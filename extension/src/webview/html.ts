/**
 * Webview documents (pure): a strict Content-Security-Policy, scripts only from the extension's
 * media folder and only with the page's nonce, no inline scripts, styles or event handlers.
 */
import { randomBytes } from 'node:crypto';

export function nonce(): string {
  return randomBytes(18)
    .toString('base64')
    .replace(/[^A-Za-z0-9]/g, '');
}

export function escapeHtml(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string,
  );
}

export interface PageParts {
  /** `webview.cspSource` */
  cspSource: string;
  nonce: string;
  title: string;
  scripts: string[];
  styles: string[];
  /** static markup; dynamic content is rendered by the script from posted messages */
  body: string;
  /** initial state for the script, as JSON in a non-executable element */
  state?: unknown;
}

export function contentSecurityPolicy(cspSource: string, pageNonce: string): string {
  return [
    "default-src 'none'",
    `img-src ${cspSource}`,
    `style-src ${cspSource}`,
    `font-src ${cspSource}`,
    `script-src 'nonce-${pageNonce}'`,
    "base-uri 'none'",
    "form-action 'none'",
  ].join('; ');
}

export function page(parts: PageParts): string {
  const csp = contentSecurityPolicy(parts.cspSource, parts.nonce);
  const styles = parts.styles
    .map((s) => `<link rel="stylesheet" href="${escapeHtml(s)}">`)
    .join('\n');
  const scripts = parts.scripts
    .map((s) => `<script nonce="${parts.nonce}" src="${escapeHtml(s)}"></script>`)
    .join('\n');
  // JSON in a <script type="application/json"> is data, not code; `<` is escaped so the text
  // cannot close the element.
  const state =
    parts.state === undefined
      ? ''
      : `<script nonce="${parts.nonce}" type="application/json" id="initial-state">${JSON.stringify(parts.state).replace(/</g, '\\u003c')}</script>`;
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>${escapeHtml(parts.title)}</title>
${styles}
</head>
<body>
${parts.body}
${state}
${scripts}
</body>
</html>`;
}
