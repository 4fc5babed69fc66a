import { expect, test } from '@jupyterlab/galata';
import { cellMarkers, lineOfMarker, runCode } from './utils';

const SYNC_CELL = [
  '%%syncfree',
  'x = torch.arange(10.0, device="cuda")',
  's = x.sum().item()',
  'print("total", s)'
].join('\n');

test.describe('%%syncfree in a real notebook and kernel', () => {
  test('marks the line with .item() and summarises under the cell', async ({ page, tmpPath }) => {
    await page.notebook.createNew('slice.ipynb');
    await runCode(page, 0, 'import torch\n%load_ext syncfree');
    await page.notebook.addCell('code', '');
    await runCode(page, 1, SYNC_CELL);

    const cell = page.locator('.jp-Notebook .jp-Cell >> nth=1');
    // The cell's own output is unchanged...
    await expect(cell.locator('.jp-OutputArea-output').first()).toContainText('total 45.0');
    // ...and the report is summarised below it.
    const summary = cell.locator('.jp-syncfree-summary');
    await expect(summary).toBeVisible();
    await expect(summary.locator('.jp-syncfree-title')).toContainText('syncfree:');

    const markers = cellMarkers(page, 1);
    await expect(markers).toHaveCount(1);
    expect(await lineOfMarker(page, 1, markers.first())).toBe(3);
    await expect(markers.first()).toHaveClass(/(^| )jp-syncfree-at-3( |$)/);
    // The first cell has no report and so no marker.
    await expect(cellMarkers(page, 0)).toHaveCount(0);


    // Saved reports are outputs: reopening the notebook draws the markers again.
    await page.notebook.save();
    await page.notebook.close(true);
    await page.notebook.openByPath(`${tmpPath}/slice.ipynb`);
    await page.notebook.activate('slice.ipynb');
    const reopened = cellMarkers(page, 1);
    await expect(reopened).toHaveCount(1);
    expect(await lineOfMarker(page, 1, reopened.first())).toBe(3);
  });
});
