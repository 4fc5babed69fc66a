/** The options that the commands pass to the `%%syncfree` cell magic. */
export interface IMagicOptions {
  mode: 'warn' | 'error';
  measureBlocked: boolean;
}

export const DEFAULT_MAGIC_OPTIONS: IMagicOptions = { mode: 'warn', measureBlocked: true };

/** The magic's options that differ from its defaults, e.g. `--mode error --no-blocked`. */
export function magicOptions(options: IMagicOptions): string {
  const parts: string[] = [];
  if (options.mode === 'error') {
    parts.push('--mode error');
  }
  if (!options.measureBlocked) {
    parts.push('--no-blocked');
  }
  return parts.join(' ');
}

/** `%%syncfree` with the options that differ from the magic's defaults. */
export function magicLine(options: IMagicOptions): string {
  return ['%%syncfree', magicOptions(options)].filter(Boolean).join(' ');
}

/** The line magic that turns watch mode on (with the same options) or off. */
export function watchLine(on: boolean, options: IMagicOptions): string {
  return on ? ['%syncfree on', magicOptions(options)].filter(Boolean).join(' ') : '%syncfree off';
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
