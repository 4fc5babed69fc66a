import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';
import { cellAt, lineOfMarker, markerOn } from './utils';

/*
 * examples/tour-h200.ipynb is the tour as `syncfree run` executed it on an NVIDIA H200:
 * its reports were measured, not predicted. Opened without a GPU, it must show measured
 * markers on the lines that synced there.
 */
test('the tour executed on a GPU shows measured markers on the lines that synced', async ({ page, tmpPath }) => {
  const name = 'tour-h200.ipynb';
  await page.contents.uploadFile(path.resolve(__dirname, '../../examples', name), `${tmpPath}/${name}`);
  await page.notebook.openByPath(`${tmpPath}/${name}`);
  await page.notebook.activate(name);

  // Cell 3: `total += y.sum().item()` on line 7 synced 50 times.
  const loop = markerOn(page, 3, 7);
  await expect(loop).toHaveClass(/jp-syncfree-marker-measured/);
  expect(await lineOfMarker(page, 3, loop)).toBe(7);
  await expect(cellAt(page, 3).locator('.jp-syncfree-summary')).toContainText('NVIDIA H200');
  // Cell 5: the boolean mask (line 3) and nonzero (line 4).
  await expect(markerOn(page, 5, 3)).toHaveClass(/jp-syncfree-marker-measured/);
  await expect(markerOn(page, 5, 4)).toHaveClass(/jp-syncfree-marker-measured/);
  // Cell 7: the branch inside the function, line 3.
  await expect(markerOn(page, 7, 3)).toHaveCount(1);
});
