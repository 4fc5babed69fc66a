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

test('Notebook 7: the summary opens the Syncs panel, which ranks the sites and jumps to them', async ({ page, context, tmpPath, baseURL }) => {
  await page.contents.uploadFile(path.resolve(__dirname, 'notebooks/syncs.ipynb'), `${tmpPath}/syncs.ipynb`);
  const notebook7 = await context.newPage();
  await notebook7.goto(`${baseURL}/notebooks/${tmpPath}/syncs.ipynb`);

  const cells = notebook7.locator('.jp-Notebook .jp-Cell');
  const summary = cells.nth(2).locator('.jp-syncfree-summary');
  await expect(summary).toBeVisible({ timeout: 30000 });
  // Notebook 7 keeps its right side panel closed: the summary's link opens it.
  const sidebar = notebook7.locator('#jp-syncfree-sidebar');
  await expect(sidebar).toBeHidden();
  await summary.locator('.jp-syncfree-open-sidebar').click();
  await expect(sidebar).toBeVisible();
  await expect(sidebar.locator('[data-total="syncs"]')).toHaveText('77 syncs');
  await expect(sidebar.locator('[data-total="cells"]')).toHaveText('3 cells');
  await expect(sidebar.locator('.jp-syncfree-sidebar-cell-name')).toHaveText(['Cell 3', 'Cell 4', 'Cell 5']);

  // A row goes to its cell and line in the notebook.
  await sidebar.locator('.jp-syncfree-sidebar-row[data-cell-id="prepare"][data-line="5"]').click();
  await expect(cells.nth(3)).toHaveClass(/jp-mod-active/);
  // Notebook 7 exposes no application object: read the cursor from the focused editor.
  await expect
    .poll(() =>
      notebook7.evaluate(() => {
        const focus = document.getSelection()?.focusNode;
        const line = (focus instanceof Element ? focus : focus?.parentElement)?.closest('.cm-line');
        const cell = line?.closest('.jp-Cell');
        if (!line || !cell) {
          return null;
        }
        return {
          cell: Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell')).indexOf(cell),
          line: Array.from(cell.querySelectorAll('.cm-line')).indexOf(line) + 1
        };
      })
    )
    .toEqual({ cell: 3, line: 5 });
});
