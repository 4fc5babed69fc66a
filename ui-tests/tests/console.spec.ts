import { expect, test } from '@jupyterlab/galata';
import type { ConsoleMessage } from '@playwright/test';
import { openFixture } from './utils';

/**
 * Opening and closing notebooks, with and without reports, logs no error to the
 * page's console (the cell report plugin once crashed on destroy, disconnecting from
 * the outputs of a disposed cell model).
 */
test.describe('the console', () => {
  test('stays free of errors while notebooks open and close', async ({ page, tmpPath }) => {
    const errors: string[] = [];
    const listen = (message: ConsoleMessage) => {
      if (message.type() === 'error') {
        errors.push(message.text());
      }
    };
    page.on('console', listen);
    page.on('pageerror', error => errors.push(String(error)));

    await openFixture(page, tmpPath, 'syncs.ipynb');
    await expect(page.locator('.jp-syncfree-marker').first()).toBeVisible();
    await page.notebook.createNew('empty.ipynb');
    await page.notebook.setCell(0, 'code', 'x = 1');
    await page.notebook.close(true);
    await page.notebook.activate('syncs.ipynb');
    await page.notebook.close(true);
    await openFixture(page, tmpPath, 'syncs.ipynb');
    await expect(page.locator('.jp-syncfree-marker').first()).toBeVisible();
    await page.notebook.close(true);
    await page.waitForTimeout(500);

    page.off('console', listen);
    const ours = errors.filter(text => /syncfree|CodeMirror plugin crashed|changed/i.test(text));
    expect(ours).toEqual([]);
  });
});
