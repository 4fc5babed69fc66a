import { expect, test } from '@jupyterlab/galata';
import { activeCursor, openFixture, runCommand } from './utils';

/*
 * syncs.ipynb (tests/notebooks/generate.py), by blocked time: train line 6 (41.2 ms),
 * prepare line 5 (2.4 ms), train line 7 (0.9 ms), prepare line 4 (0.3 ms), prepare
 * line 3 (0.06 ms), then predicted line 3 (not timed), then the two static findings of
 * prepare line 7 (did not run). Cells 2, 3 and 4 of the notebook (0-based) are notebook cells 3, 4 and 5.
 */
test.describe('the Syncs sidebar', () => {
  test.beforeEach(async ({ page, tmpPath }) => {
    await openFixture(page, tmpPath, 'syncs.ipynb');
    await runCommand(page, 'syncfree:open-sidebar');
  });

  test('ranks every site of the notebook by blocked time, with totals', async ({ page }) => {
    const sidebar = page.locator('#jp-syncfree-sidebar');
    await expect(sidebar).toBeVisible();
    await expect(sidebar.locator('[data-total="syncs"]')).toHaveText('77 syncs');
    await expect(sidebar.locator('[data-total="cells"]')).toHaveText('3 cells');
    await expect(sidebar.locator('[data-total="blocked"]')).toHaveText('44.9 ms blocked');

    // Flat: one ranking across cells.
    await sidebar.locator('[data-control="group"]').uncheck();
    const rows = sidebar.locator('.jp-syncfree-sidebar-row');
    await expect(rows.locator('.jp-syncfree-sidebar-where')).toHaveText([
      'cell 3:6',
      'cell 4:5',
      'cell 3:7',
      'cell 4:4',
      'cell 4:3',
      'cell 5:3',
      'cell 4:7',
      'cell 4:7'
    ]);
    // The two static findings of line 7 (a print and a nonzero that did not run).
    await expect(rows.locator('.jp-syncfree-sidebar-kind').nth(6)).toHaveText('SF201');
    await expect(rows.locator('.jp-syncfree-sidebar-kind').nth(7)).toHaveText('SF602');

    // Grouped: cells ordered by their costliest site.
    await sidebar.locator('[data-control="group"]').check();
    await expect(sidebar.locator('.jp-syncfree-sidebar-cell-name')).toHaveText(['Cell 3', 'Cell 4', 'Cell 5']);

    await sidebar.locator('[data-control="kind"]').selectOption('item');
    await expect(rows).toHaveCount(1);

    if (process.env.SYNCFREE_SCREENSHOTS) {
      await sidebar.locator('[data-control="kind"]').selectOption('');
      await sidebar.screenshot({ path: '../docs/sidebar.png' });
    }
  });

  test('a click on a site goes to its cell and line', async ({ page }) => {
    const sidebar = page.locator('#jp-syncfree-sidebar');
    await sidebar.locator('.jp-syncfree-sidebar-row[data-cell-id="prepare"][data-line="5"]').click();
    await expect.poll(() => activeCursor(page)).toEqual({ cell: 3, line: 5 });
    await expect(page.locator('.jp-Notebook .jp-Cell >> nth=3')).toHaveClass(/jp-mod-active/);

    await sidebar.locator('.jp-syncfree-sidebar-row[data-cell-id="train"][data-line="7"]').click();
    await expect.poll(() => activeCursor(page)).toEqual({ cell: 2, line: 7 });
  });

  test('rows follow edits: the line moves, the row and the summary are marked out of date, a click goes to the current line', async ({
    page
  }) => {
    const sidebar = page.locator('#jp-syncfree-sidebar');
    const row = sidebar.locator('.jp-syncfree-sidebar-row[data-cell-id="train"][data-report-line="6"]');
    await expect(row).toHaveAttribute('data-line', '6');
    await expect(row).not.toHaveClass(/jp-syncfree-stale/);
    const cell = page.locator('.jp-Notebook .jp-Cell >> nth=2');
    await expect(cell.locator('.jp-syncfree-stale-note')).toBeHidden();

    // Insert a line above everything in the train cell.
    await cell.locator('.jp-InputArea-editor .cm-line').first().click();
    await page.keyboard.press('Control+Home');
    await page.keyboard.press('Enter');

    await expect(row).toHaveAttribute('data-line', '7');
    await expect(row).toHaveClass(/jp-syncfree-stale/);
    await expect(row.locator('.jp-syncfree-sidebar-where')).toHaveText('line 7');
    await expect(cell.locator('.jp-syncfree-stale-note')).toBeVisible();
    await expect(cell.locator('.jp-syncfree-stale-note')).toHaveText('Out of date: the cell was edited since this run');

    await row.click();
    await expect.poll(() => activeCursor(page)).toEqual({ cell: 2, line: 7 });

    // Undone: fresh again, back on line 6.
    await page.keyboard.press('Control+z');
    await expect(row).toHaveAttribute('data-line', '6');
    await expect(row).not.toHaveClass(/jp-syncfree-stale/);
    await expect(cell.locator('.jp-syncfree-stale-note')).toBeHidden();
  });

  test('next and previous sync step through the marked lines of all cells', async ({ page }) => {
    await page.locator('.jp-Notebook .jp-Cell >> nth=1').click();
    await page.keyboard.press('Escape');
    await runCommand(page, 'syncfree:next-sync');
    await expect.poll(() => activeCursor(page)).toEqual({ cell: 2, line: 6 });
    await runCommand(page, 'syncfree:next-sync');
    await expect.poll(() => activeCursor(page)).toEqual({ cell: 2, line: 7 });
    await runCommand(page, 'syncfree:next-sync');
    await expect.poll(() => activeCursor(page)).toEqual({ cell: 3, line: 3 });
    await runCommand(page, 'syncfree:previous-sync');
    await expect.poll(() => activeCursor(page)).toEqual({ cell: 2, line: 7 });
  });

  test('follows the active notebook and says how to start in one without reports', async ({ page }) => {
    const sidebar = page.locator('#jp-syncfree-sidebar');
    await expect(sidebar.locator('.jp-syncfree-sidebar-row').first()).toBeVisible();
    await page.notebook.createNew('empty.ipynb');
    await expect(sidebar.locator('.jp-syncfree-sidebar-empty')).toContainText('%load_ext syncfree');
    await page.notebook.activate('syncs.ipynb');
    await expect(sidebar.locator('.jp-syncfree-sidebar-row').first()).toBeVisible();
  });

  test('clearing the reports asks first, then clears the markers and the sidebar', async ({ page }) => {
    const clear = page.locator('#jp-syncfree-sidebar [data-command="syncfree:clear-markers"]');
    await expect(clear).toHaveAttribute('title', /ALL cells/);
    await clear.click();
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog).toContainText('all 3 cells');
    await dialog.locator('button', { hasText: 'Cancel' }).click();
    await expect(page.locator('.jp-syncfree-marker').first()).toBeVisible();
    await clear.click();
    await dialog.locator('button', { hasText: 'Clear all' }).click();
    await expect(page.locator('.jp-syncfree-marker')).toHaveCount(0);
    await expect(page.locator('#jp-syncfree-sidebar .jp-syncfree-sidebar-empty')).toContainText('%%syncfree');
  });
});
