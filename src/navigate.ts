import { EditorView } from '@codemirror/view';
import type { Cell, ICodeCellModel } from '@jupyterlab/cells';
import { CodeMirrorEditor } from '@jupyterlab/codemirror';
import type { Notebook, NotebookPanel } from '@jupyterlab/notebook';
import { syncMarkerField } from './gutter/extension';
import { ILineMarker, markerLines } from './gutter/lines';
import { anchoredLines, siteColumn } from './model';
import type { SyncReport } from './tokens';
import { ISyncPosition, landingColumn } from './positions';
import type { ISyncReports } from './tokens';

/** The CodeMirror view of a cell, when the cell has been rendered. */
export function editorViewOfCell(cell: Cell | undefined | null): EditorView | null {
  const editor = cell?.editor;
  return editor instanceof CodeMirrorEditor ? editor.editor : null;
}

/**
 * Activate a cell, put the cursor on a 1-based line, at the call (`column`, 0-based) or
 * where the line's code starts, and scroll that line into view (the Syncs sidebar's and
 * the summary table's "jump"). Works with windowed notebooks, where the cell may not be
 * rendered yet. False when the cell is gone.
 */
export async function revealCellLine(
  notebook: Notebook,
  cellId: string,
  line: number,
  column: number | null = null
): Promise<boolean> {
  const index = notebook.widgets.findIndex(cell => cell.model.id === cellId);
  if (index < 0) {
    return false;
  }
  notebook.deselectAll();
  notebook.activeCellIndex = index;
  // A windowed notebook renders the cell only once it is scrolled to.
  await notebook.scrollToItem(index, 'smart');
  const cell = notebook.widgets[index];
  await cell.ready;
  const editor = cell.editor;
  if (!editor || cell.isDisposed) {
    return false;
  }
  const target = Math.max(0, Math.min(line - 1, editor.lineCount - 1));
  const at = landingColumn(editor.getLine(target) ?? '', column);
  notebook.mode = 'edit';
  editor.setCursorPosition({ line: target, column: at });
  editor.focus();
  const view = editorViewOfCell(cell);
  if (view) {
    // Scrolls the notebook too: CodeMirror scrolls every scrollable ancestor.
    view.dispatch({ effects: EditorView.scrollIntoView(view.state.doc.line(target + 1).from + at, { y: 'center' }) });
  } else {
    editor.revealPosition({ line: target, column: at });
  }
  return true;
}

/**
 * Every marked line of a notebook in reading order. A rendered cell's marks come from
 * its editor (they follow edits and honour the marker settings); a cell that is not
 * rendered (windowed notebook) falls back to its report's lines.
 */
export function syncPositions(panel: NotebookPanel, reports: ISyncReports): ISyncPosition[] {
  const notebook = panel.content;
  const byCell = new Map(reports.reportsOf(panel.context.path).map(r => [r.cellId, r.report]));
  const marks: ISyncPosition[] = [];
  notebook.widgets.forEach((cell, index) => {
    const report = byCell.get(cell.model.id);
    if (!report) {
      return;
    }
    const view = editorViewOfCell(cell);
    const field = view?.state.field(syncMarkerField, false);
    if (view && field) {
      for (const iter = field.markers.iter(); iter.value; iter.next()) {
        const column = markerColumn(report, iter.value.info);
        marks.push({ cell: index, line: view.state.doc.lineAt(iter.from).number, column });
      }
      return;
    }
    if (cell.model.type === 'code') {
      // Not rendered: its lines are found by their text where the cell changed since the run.
      const source = (cell.model as ICodeCellModel).sharedModel.getSource();
      const lineCount = source.split('\n').length;
      const { currentLine } = anchoredLines(source, report);
      const found: ISyncPosition[] = [];
      for (const marker of markerLines(report, currentLine ? Number.MAX_SAFE_INTEGER : lineCount)) {
        const line = currentLine ? currentLine(marker.line) : marker.line;
        if (line !== null && line >= 1 && line <= lineCount) {
          found.push({ cell: index, line, column: currentLine ? null : markerColumn(report, marker) });
        }
      }
      marks.push(...found.sort((a, b) => a.line - b.line));
    }
  });
  return marks;
}

/** The column of the call on a marked line: its costliest site's, else its first finding's. */
function markerColumn(report: SyncReport, marker: ILineMarker): number | null {
  for (const site of marker.sites) {
    const column = siteColumn(report, site);
    if (column !== null) {
      return column;
    }
  }
  const finding = marker.findings.find(f => f.range.line === marker.line);
  return finding ? finding.range.col : null;
}

/** Where the cursor is, for next/previous sync: before line 1 in command mode. */
export function cursorPosition(notebook: Notebook): ISyncPosition {
  const cell = notebook.activeCell;
  const index = notebook.activeCellIndex;
  if (!cell || notebook.mode !== 'edit' || !cell.editor) {
    return { cell: index, line: 0 };
  }
  return { cell: index, line: cell.editor.getCursorPosition().line + 1 };
}
