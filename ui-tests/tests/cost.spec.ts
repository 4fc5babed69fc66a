import { expect, test } from '@jupyterlab/galata';
import { cellAt, markerOn, openFixture, runCommand } from './utils';

/*
 * cost.ipynb (tests/notebooks/generate.py): cell 1 measured on a GPU with what each sync
 * costs (the GPU time it loses, issue 37): line 5 a mask index (173 ms lost, 1.9 ms
 * blocked), line 6 an `.item()` (47 ms lost, 5960 ms blocked), line 7 both (12 and 2.5 ms
 * lost), line 2 a tensor built once (3.2 ms lost, 150 ms blocked); cell 2 predicted on CPU.
 */
const COSTED = 0;
const PREDICTED = 1;

test('a GPU report leads with what its syncs cost everywhere; a predicted one shows counts and says there is no cost (issue 37)', async ({
  page,
  tmpPath
}) => {
  await openFixture(page, tmpPath, 'cost.ipynb');
  const costed = cellAt(page, COSTED).locator('.jp-syncfree-summary');
  await expect(costed.locator('.jp-syncfree-title')).toHaveText(
    'syncfree: 401 syncs at 5 sites, 238 ms GPU time lost (blocked 6.1 s) · NVIDIA H200'
  );
  await expect(costed.locator('thead th')).toHaveText(['line', 'what', 'count', 'cost', 'rule']);
  const predicted = cellAt(page, PREDICTED).locator('.jp-syncfree-summary');
  await expect(predicted.locator('.jp-syncfree-title')).toHaveText('syncfree: 3 predicted syncs at 1 site');
  await expect(predicted.locator('.jp-syncfree-note')).toContainText('no GPU, no cost');
  // No time column of dashes, no number made up.
  await expect(predicted.locator('thead th')).toHaveText(['line', 'what', 'count', 'rule']);
  await expect(predicted.locator('tbody')).not.toContainText('ms');

  // The card of a line with two sites: the line's cost leads its totals.
  await markerOn(page, COSTED, 7).click();
  const card = page.locator('.jp-syncfree-card');
  await expect(card.locator('.jp-syncfree-card-total')).toHaveText('×200 · 14.5 ms GPU time lost');
  await expect(card.locator('.jp-syncfree-card-cost').first()).toHaveText(
    "costs ≈ 0.12 ms of GPU time each time it runs (12.0 ms in all), 0.2 % of the cell's GPU time"
  );
  await page.keyboard.press('Escape');
  await markerOn(page, PREDICTED, 4).click();
  await expect(card.locator('.jp-syncfree-card-blocked')).toHaveText('no cost without a GPU');
  await expect(card.locator('.jp-syncfree-card-cost')).toHaveCount(0);
  await page.keyboard.press('Escape');

  await runCommand(page, 'syncfree:open-sidebar');
  const sidebar = page.locator('#jp-syncfree-sidebar');
  await expect(sidebar.locator('[data-total="cost"]')).toHaveText('238 ms GPU time lost');
  await expect(sidebar.locator('.jp-syncfree-sidebar-no-cost')).toHaveCount(0);
  await expect(sidebar.locator('[data-sort="blocked"]')).toHaveText(/^Cost/);
  await expect(sidebar.locator('.jp-syncfree-sidebar-cell-totals')).toHaveText([
    '401 syncs · 238 ms GPU time lost',
    '3 predicted syncs'
  ]);
  // The syncs paid once, under their heading, by what they cost: not the 150 ms the CPU waited.
  const once = sidebar.locator('.jp-syncfree-sidebar-once');
  await expect(once.locator('.jp-syncfree-sidebar-once-name')).toHaveText('Once (setup, compilation)');
  await expect(once.locator('.jp-syncfree-sidebar-once-totals')).toHaveText('1 sync · 3.20 ms GPU time lost');
  const rows = sidebar.locator('.jp-syncfree-sidebar-row[data-cell-id="costed"]');
  await expect(rows.locator('.jp-syncfree-sidebar-where')).toHaveText(['5', '6', '7', '7', '2']);
  await expect(rows.locator('[data-cost]')).toHaveText(['173 ms', '47.0 ms', '12.0 ms', '2.50 ms', '3.20 ms']);
  // A predicted row beside them: no cost, and it says why.
  const guess = sidebar.locator('.jp-syncfree-sidebar-row[data-cell-id="predicted"] .jp-syncfree-sidebar-blocked');
  await expect(guess).toHaveText('—');
  await expect(guess).toHaveAttribute('title', 'Predicted without a GPU: no cost, nothing timed');
  await expect(page.locator('.jp-syncfree-status')).toHaveText('Syncs: 404 syncs · 238 ms GPU time lost');
});
