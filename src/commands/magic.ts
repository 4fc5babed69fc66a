/** The options that the commands pass to the `%%syncfree` cell magic. */
export interface IMagicOptions {
  mode: 'warn' | 'error';
  measureBlocked: boolean;
}

export const DEFAULT_MAGIC_OPTIONS: IMagicOptions = { mode: 'warn', measureBlocked: true };

/** `%%syncfree` with the options that differ from the magic's defaults. */
export function magicLine(options: IMagicOptions): string {
  const parts = ['%%syncfree'];
  if (options.mode === 'error') {
    parts.push('--mode error');
  }
  if (!options.measureBlocked) {
    parts.push('--no-blocked');
  }
  return parts.join(' ');
}

/**
 * Whether a cell already starts with `%%syncfree`. IPython drops leading blank lines
 * before looking for a cell magic (IPython/core/inputtransformer2.py
 * `leading_empty_lines`), so they are skipped here too.
 */
export function hasSyncfreeMagic(source: string): boolean {
  const first = source.split('\n').find(line => line.trim() !== '') ?? '';
  return /^%%syncfree(\s|$)/.test(first);
}

/** The text to insert at the start of a cell so it runs under `%%syncfree`, or null if it already does. */
export function magicPrefix(source: string, options: IMagicOptions): string | null {
  return hasSyncfreeMagic(source) ? null : `${magicLine(options)}\n`;
}
