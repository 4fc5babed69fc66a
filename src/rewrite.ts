import { ChangeSpec, EditorState, Facet } from '@codemirror/state';
import type { EditorView } from '@codemirror/view';
import { sourceHash } from './hash';
import { syncMarkerField } from './gutter/extension';
import { findingLine, siteLinesOf } from './model';
import type { Finding, Fix, SyncReport, TextEdit } from './tokens';

/** One text change in editor offsets (UTF-16 code units from the start of the cell). */
export interface ICellChange {
  from: number;
  to: number;
  insert: string;
}

/** The affected lines before and after a rewrite, for a diff-like preview. */
export interface IRewritePreview {
  /** 1-based cell line of the first affected line. */
  firstLine: number;
  before: string[];
  after: string[];
}

export type RewritePlan =
  { ok: true; changes: ICellChange[]; preview: IRewritePreview } | { ok: false; reason: string };

export type RewriteOutcome = { ok: true } | { ok: false; reason: string };

/** Why a rewrite is refused when the cell changed since it ran (shown to the user). */
export const STALE_REASON =
  'The cell changed since this report was made, so the rewrite could land on the wrong code. Run the cell again, then apply.';

/** Why a rewrite is refused when its own lines changed since the report (shown to the user). */
export const LINE_CHANGED_REASON =
  'The lines of this rewrite changed since this report was made. Run the cell again, then apply.';

/**
 * Something to call around an applied rewrite so that it forms one undo step of its
 * own. JupyterLab's cell editors undo through the shared model's Y.UndoManager
 * (@jupyterlab/codemirror extensions/yundomanager.ts), which merges changes made within
 * its capture timeout: the markers plugin provides `stopCapturing` here.
 */
export const rewriteUndoBoundary = Facet.define<() => void>();

/**
 * The findings of a report shown on a 1-based line (model.ts `findingLine`) that carry a
 * mechanical rewrite.
 */
export function rewritableFindings(report: SyncReport, line: number): Finding[] {
  const siteLines = siteLinesOf(report);
  return report.findings.filter(f => isApplicable(f.fix) && findingLine(report, f, siteLines) === line);
}

/** A fix that can be applied: it has edits and is not marked as "no mechanical rewrite". */
export function isApplicable(fix: Fix | null | undefined): fix is Fix {
  return !!fix && fix.safety !== 'none' && fix.edits.length > 0;
}

/**
 * Offset (UTF-16) of a 0-based character column in a line. The report counts
 * characters (code points, like Python's `str` indices) while the editor counts UTF-16
 * units: they differ after an astral character such as an emoji. Null when the column
 * is past the end of the line.
 */
function columnOffset(lineText: string, column: number): number | null {
  let offset = 0;
  let chars = 0;
  while (chars < column) {
    if (offset >= lineText.length) {
      return null;
    }
    const code = lineText.codePointAt(offset)!;
    offset += code > 0xffff ? 2 : 1;
    chars++;
  }
  return offset;
}

/**
 * Turn a fix's cell-relative edits (1-based lines, 0-based character columns) into
 * editor changes for `text`, checking first that `text` is exactly what the report was
 * made from. Refuses (never throws) stale reports, ranges outside the cell, reversed
 * ranges and overlapping edits.
 */
export function planRewrite(text: string, report: SyncReport, fix: Fix): RewritePlan {
  if (!isApplicable(fix)) {
    return { ok: false, reason: 'This finding has no mechanical rewrite.' };
  }
  if (sourceHash(text) !== report.source_hash) {
    return { ok: false, reason: STALE_REASON };
  }
  const lines = text.split('\n');
  const lineStarts: number[] = [];
  let start = 0;
  for (const line of lines) {
    lineStarts.push(start);
    start += line.length + 1;
  }
  const offsetOf = (line: number, column: number): number | null => {
    if (line < 1 || line > lines.length) {
      return null;
    }
    const within = columnOffset(lines[line - 1], column);
    return within === null ? null : lineStarts[line - 1] + within;
  };

  const changes: ICellChange[] = [];
  for (const edit of fix.edits) {
    const from = offsetOf(edit.range.line, edit.range.col);
    const to = offsetOf(edit.range.end_line, edit.range.end_col);
    if (from === null || to === null || to < from) {
      return { ok: false, reason: `The rewrite's range ${describeRange(edit)} does not fit this cell.` };
    }
    changes.push({ from, to, insert: edit.text });
  }
  changes.sort((a, b) => a.from - b.from || a.to - b.to);
  for (let i = 1; i < changes.length; i++) {
    if (changes[i].from < changes[i - 1].to) {
      return { ok: false, reason: 'The rewrite has overlapping edits; it was not applied.' };
    }
  }
  return { ok: true, changes, preview: previewOf(text, lines, lineStarts, changes, fix.edits) };
}

function describeRange(edit: TextEdit): string {
  const r = edit.range;
  return `${r.line}:${r.col}–${r.end_line}:${r.end_col}`;
}

function previewOf(
  text: string,
  lines: string[],
  lineStarts: number[],
  changes: ICellChange[],
  edits: TextEdit[]
): IRewritePreview {
  const firstLine = Math.min(...edits.map(e => e.range.line));
  const lastLine = Math.max(...edits.map(e => e.range.end_line));
  const from = lineStarts[firstLine - 1];
  const to = lineStarts[lastLine - 1] + lines[lastLine - 1].length;
  let after = '';
  let at = from;
  for (const change of changes) {
    after += text.slice(at, change.from) + change.insert;
    at = change.to;
  }
  after += text.slice(at, to);
  return { firstLine, before: lines.slice(firstLine - 1, lastLine), after: after.split('\n') };
}

/**
 * Plan a fix in an editor showing `report`: on the report's own text, or, once the cell
 * was edited, on the text now when the edits since the report (the marker field's
 * `sinceReport`) left the fix's lines alone: an edit on another line does not move the
 * code the fix replaces, only where it is. Refused when those lines changed, or when the
 * report's text is not known (a notebook opened with the cell already edited).
 */
export function planRewriteIn(state: EditorState, report: SyncReport, fix: Fix): RewritePlan {
  const field = state.field(syncMarkerField, false);
  const text = state.doc.toString();
  if (!field || field.report !== report || !field.stale) {
    return planRewrite(text, report, fix);
  }
  const original = field.freshDoc;
  const since = field.sinceReport;
  if (!original || !since || since.newLength !== state.doc.length) {
    return { ok: false, reason: STALE_REASON };
  }
  const plan = planRewrite(original.toString(), report, fix);
  if (!plan.ok) {
    return plan;
  }
  const first = original.line(plan.preview.firstLine);
  const last = original.line(plan.preview.firstLine + plan.preview.before.length - 1);
  if (since.touchesRange(first.from, last.to)) {
    return { ok: false, reason: LINE_CHANGED_REASON };
  }
  const changes = plan.changes.map(change => ({
    from: since.mapPos(change.from, 1),
    to: since.mapPos(change.to, -1),
    insert: change.insert
  }));
  const firstLine = state.doc.lineAt(since.mapPos(first.from, 1)).number;
  return { ok: true, changes, preview: { ...plan.preview, firstLine } };
}

/**
 * Apply a fix to the editor as ONE transaction (one undo step), or refuse with a
 * reason when the code it rewrites no longer matches the report (`planRewriteIn`).
 */
export function applyRewrite(view: EditorView, report: SyncReport, fix: Fix): RewriteOutcome {
  const plan = planRewriteIn(view.state, report, fix);
  if (!plan.ok) {
    return plan;
  }
  const boundaries = view.state.facet(rewriteUndoBoundary);
  boundaries.forEach(stop => stop());
  const changes: ChangeSpec[] = plan.changes;
  const last = plan.changes[plan.changes.length - 1];
  const cursor = view.state.changes(changes).mapPos(last.to, 1);
  view.dispatch({
    changes,
    selection: { anchor: cursor },
    scrollIntoView: true,
    userEvent: 'input.syncfree-rewrite'
  });
  boundaries.forEach(stop => stop());
  return { ok: true };
}
