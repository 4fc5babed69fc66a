import { expect, test } from '@jupyterlab/galata';
import { cellAt, cellMarkers, markerOn, openFixture } from './utils';

/*
 * hostile.ipynb (tests/notebooks/generate.py): cells 0-5 carry reports that break the
 * schema (not JSON, wrong types, an unknown property, a huge string, a negative line,
 * an array); cell 6 a report that is valid but whose strings are all markup and whose
 * second site is on line 999; cell 7 a valid report.
 */
test.describe('a notebook with malformed and hostile reports', () => {
  test('ignores the bad ones, sets every string as text, and keeps working', async ({ page, tmpPath }) => {
    const warnings: string[] = [];
    page.on('console', message => {
      if (message.type() === 'warning' && message.text().startsWith('syncfree:')) {
        warnings.push(message.text());
      }
    });
    const errors: string[] = [];
    page.on('pageerror', error => errors.push(error.message));

    await openFixture(page, tmpPath, 'hostile.ipynb');
    await expect(cellMarkers(page, 7)).toHaveCount(1);
    for (let cell = 0; cell < 6; cell++) {
      await expect(cellMarkers(page, cell)).toHaveCount(0);
      await expect(cellAt(page, cell).locator('.jp-syncfree-invalid')).toContainText('malformed');
    }
    // Line 999 is dropped; line 2 is marked.
    await expect(cellMarkers(page, 6)).toHaveCount(1);
    expect(warnings.some(w => w.includes('ignored'))).toBe(true);
    expect(warnings.some(w => w.includes('line 999'))).toBe(true);

    // The markup is shown as text in the summary and in the card, and never runs.
    const summary = cellAt(page, 6).locator('.jp-syncfree-summary');
    await expect(summary).toContainText('<img src=x');
    await markerOn(page, 6, 2).click();
    const card = page.locator('.jp-syncfree-card');
    await expect(card).toContainText('<script>');
    await expect(card.locator('img, script')).toHaveCount(0);
    await expect(summary.locator('img, script')).toHaveCount(0);
    expect(await page.evaluate(() => (window as any).syncfreePwned)).toBeUndefined();

    // The notebook still edits normally.
    await cellAt(page, 7).locator('.cm-content').click();
    await page.keyboard.press('End');
    await page.keyboard.type('  # still editable');
    await expect(cellAt(page, 7).locator('.cm-content')).toContainText('# still editable');
    await expect(markerOn(page, 7, 2)).toHaveClass(/jp-syncfree-stale/);
    expect(errors).toEqual([]);
  });
});
