import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

/*
 * The same extension in Notebook 7 (its own single-document UI, served by the same
 * Jupyter server at /notebooks/<path>): markers from a saved report and the summary.
 * syncs.ipynb, cell 2: line 6 synced 64x through .item(), line 7 printed a tensor.
 */
test.use({ autoGoto: false });

test('Notebook 7 shows the markers and the summary of a saved report', async ({ page, context, tmpPath, baseURL }) => {
  await page.contents.uploadFile(path.resolve(__dirname, 'notebooks/syncs.ipynb'), `${tmpPath}/syncs.ipynb`);
  // A plain Playwright page: galata's own page waits for the JupyterLab shell.
  const notebook7 = await context.newPage();
  await notebook7.goto(`${baseURL}/notebooks/${tmpPath}/syncs.ipynb`);

  const cell = notebook7.locator('.jp-Notebook .jp-Cell').nth(2);
  await expect(cell.locator('.jp-syncfree-summary')).toBeVisible({ timeout: 30000 });
  const markers = cell.locator('.jp-syncfree-gutter .jp-syncfree-marker');
  await expect(markers.first()).toBeVisible();
  const lines = await markers.evaluateAll(nodes => nodes.map(n => /jp-syncfree-at-(\d+)/.exec(n.className)?.[1]));
  expect(lines).toContain('6');
  expect(lines).toContain('7');
  // The code cell without a report has no marker.
  await expect(notebook7.locator('.jp-Notebook .jp-Cell').nth(1).locator('.jp-syncfree-marker')).toHaveCount(0);
});
