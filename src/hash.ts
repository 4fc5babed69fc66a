/**
 * SHA-256 of a string's UTF-8 bytes, as `sha256:<hex>`: the report's `source_hash`
 * (python_helper/syncfree/report.py hashes the cell text the same way). Synchronous on
 * purpose: stale detection runs on editor transactions, where `crypto.subtle` (async,
 * secure contexts only) would not fit. The hash is @noble/hashes' (audited, no
 * dependencies). The stale check deferred to idle time can wait, and uses the browser's
 * native digest where there is one (`sourceHashSoon`).
 */
import { sha256 } from '@noble/hashes/sha2';
import { bytesToHex } from '@noble/hashes/utils';

const encoder = new TextEncoder();

/** The hex SHA-256 of a text's UTF-8 bytes. */
export function sha256Hex(text: string): string {
  return bytesToHex(sha256(encoder.encode(text)));
}

/** The `source_hash` of a cell text. */
export function sourceHash(text: string): string {
  return `sha256:${sha256Hex(text)}`;
}

/**
 * The `source_hash` of a cell text, computed off the main thread by `crypto.subtle`
 * where the page has it (a secure context: https or localhost); elsewhere (plain http
 * to a remote host, jsdom) synchronously, as `sourceHash`. Opening a notebook of 500
 * reports hashes 500 cells: natively that is a fraction of the JS hash's time.
 */
export function sourceHashSoon(text: string): Promise<string> | string {
  const subtle = typeof crypto !== 'undefined' ? crypto.subtle : undefined;
  if (!subtle || typeof subtle.digest !== 'function') {
    return sourceHash(text);
  }
  return subtle.digest('SHA-256', encoder.encode(text)).then(
    digest => `sha256:${bytesToHex(new Uint8Array(digest))}`,
    () => sourceHash(text)
  );
}
