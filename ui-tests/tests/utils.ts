import { IJupyterLabPageFixture, galata } from '@jupyterlab/galata';
import { Locator, expect } from '@playwright/test';
import * as path from 'path';

/**
 * Settings with JupyterLab's notebook windowing off, every cell attached at once:
 * `test.use({ mockSettings: WINDOWING_OFF })`.
 */
export const WINDOWING_OFF = {
  ...galata.DEFAULT_SETTINGS,
  '@jupyterlab/notebook-extension:tracker': {
    ...galata.DEFAULT_SETTINGS['@jupyterlab/notebook-extension:tracker'],
    windowingMode: 'none'
  }
};

/** The editor lines (`.cm-line`) of a notebook cell, in order. */
export function cellLines(page: IJupyterLabPageFixture, cellIndex: number): Locator {
  return page.locator(`.jp-Notebook .jp-Cell >> nth=${cellIndex}`).locator('.jp-InputArea-editor .cm-line');
}

/** The syncfree gutter markers of a notebook cell. */
export function cellMarkers(page: IJupyterLabPageFixture, cellIndex: number): Locator {
  return page.locator(`.jp-Notebook .jp-Cell >> nth=${cellIndex}`).locator('.jp-syncfree-gutter .jp-syncfree-marker');
}

/**
 * The 1-based editor line that a marker sits beside, found from geometry (not from
 * the marker's own data attribute), so a marker drawn on the wrong line is caught.
 */
export async function lineOfMarker(page: IJupyterLabPageFixture, cellIndex: number, marker: Locator): Promise<number> {
  // One measurement in the page, the marker and the lines in the same frame: read one by one, a scroll between the
  // reads (the notebook scrolling to a pasted cell) put the marker beside another line.
  await expect(marker).toBeVisible();
  return marker.evaluate((element: Element, index: number) => {
    const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[index];
    if (!cell || !cell.contains(element)) {
      return -1;
    }
    const box = element.getBoundingClientRect();
    const center = box.top + box.height / 2;
    const lines = Array.from(cell.querySelectorAll('.jp-InputArea-editor .cm-line'));
    const found = lines.findIndex(line => {
      const at = line.getBoundingClientRect();
      return center >= at.top && center <= at.bottom;
    });
    return found < 0 ? -1 : found + 1;
  }, cellIndex);
}

/** Set a code cell's source and run it, waiting for the kernel to go idle. */
export async function runCode(page: IJupyterLabPageFixture, index: number, source: string): Promise<void> {
  await page.notebook.setCell(index, 'code', source);
  await page.notebook.runCell(index, true);
}

/** Upload a notebook of tests/notebooks/ into the test's folder and open it. */
export async function openFixture(page: IJupyterLabPageFixture, tmpPath: string, name: string): Promise<void> {
  await page.contents.uploadFile(path.resolve(__dirname, 'notebooks', name), `${tmpPath}/${name}`);
  await page.notebook.openByPath(`${tmpPath}/${name}`);
  await page.notebook.activate(name);
  await page.locator('.jp-Notebook .jp-Cell').first().waitFor();
}

/** The notebook cell at an index (markdown cells count). */
export function cellAt(page: IJupyterLabPageFixture, cellIndex: number): Locator {
  return page.locator(`.jp-Notebook .jp-Cell >> nth=${cellIndex}`);
}

/** The marker that a cell's report puts on a 1-based line (the class names its line). */
export function markerOn(page: IJupyterLabPageFixture, cellIndex: number, line: number): Locator {
  return cellMarkers(page, cellIndex).and(page.locator(`.jp-syncfree-at-${line}`));
}

/** The text of a cell's editor, read from the notebook model. */
export async function cellSource(page: IJupyterLabPageFixture, cellIndex: number): Promise<string> {
  return page.evaluate(index => {
    const panel = (window as any).jupyterapp.shell.currentWidget;
    return panel.content.widgets[index].model.sharedModel.getSource() as string;
  }, cellIndex);
}

/** The active cell's index and the 1-based cursor line, from the notebook itself. */
export async function activeCursor(page: IJupyterLabPageFixture): Promise<{ cell: number; line: number }> {
  return page.evaluate(() => {
    const panel = (window as any).jupyterapp.shell.currentWidget;
    const notebook = panel.content;
    const position = notebook.activeCell.editor.getCursorPosition();
    return { cell: notebook.activeCellIndex as number, line: (position.line as number) + 1 };
  });
}

/** Run a JupyterLab command by id. */
export async function runCommand(page: IJupyterLabPageFixture, id: string, args: Record<string, unknown> = {}): Promise<void> {
  await page.evaluate(([command, commandArgs]) => (window as any).jupyterapp.commands.execute(command, commandArgs), [
    id,
    args
  ] as const);
}

/** Set a cell's text through the notebook model (no typing, so no auto-indentation). */
export async function setCellSource(page: IJupyterLabPageFixture, cellIndex: number, source: string): Promise<void> {
  await page.evaluate(
    ([index, text]) => {
      const panel = (window as any).jupyterapp.shell.currentWidget;
      panel.content.widgets[index].model.sharedModel.setSource(text);
    },
    [cellIndex, source] as const
  );
}
