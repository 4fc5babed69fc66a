import { IJupyterLabPageFixture } from '@jupyterlab/galata';
import { Locator, expect } from '@playwright/test';

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
  const box = await marker.boundingBox();
  expect(box).not.toBeNull();
  const center = box!.y + box!.height / 2;
  const lines = cellLines(page, cellIndex);
  const count = await lines.count();
  for (let i = 0; i < count; i++) {
    const line = await lines.nth(i).boundingBox();
    if (line && center >= line.y && center <= line.y + line.height) {
      return i + 1;
    }
  }
  return -1;
}

/** Set a code cell's source and run it, waiting for the kernel to go idle. */
export async function runCode(page: IJupyterLabPageFixture, index: number, source: string): Promise<void> {
  await page.notebook.setCell(index, 'code', source);
  await page.notebook.runCell(index, true);
}
