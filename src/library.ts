import type { LibraryLine } from './_report';

/**
 * The library line under a user line (report.schema.json LibraryLine, written by
 * syncfree/capture/sites.py): where inside an installed package the sync happened, the rule
 * of that line and, for a known library sync (syncfree/catalog/libraries), its switch.
 * Plain strings: callers set them with textContent.
 */
export function libraryWhere(library: LibraryLine): string {
  return `inside ${library.file}:${library.line}`;
}

/** "inside transformers/trainer.py:1919 `if torch.isnan(…)` SF103": one line of text. */
export function libraryText(library: LibraryLine): string {
  const parts = [libraryWhere(library)];
  if (library.text) {
    parts.push(`\`${library.text}\``);
  }
  if (library.rule) {
    parts.push(library.rule);
  }
  return parts.join(' ');
}

/** "Switch: TrainingArguments(logging_nan_inf_filter=False) (every training step, SFL101)". */
export function librarySwitch(library: LibraryLine): string | null {
  const entry = library.entry;
  return entry ? `Switch: ${entry.switch} (${entry.how_often}, ${entry.code})` : null;
}
