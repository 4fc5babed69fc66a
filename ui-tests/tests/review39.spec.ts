import { expect, test } from '@jupyterlab/galata';
import { activeCursor, cellAt, cellMarkers, markerOn, openFixture, runCommand } from './utils';

/** Relative luminance (WCAG) of a CSS rgb()/rgba() colour, over white or black as given. */
function luminance(color: string): number {
  const [r, g, b] = (color.match(/[\d.]+/g) ?? ['0', '0', '0']).slice(0, 3).map(v => {
    const c = Number(v) / 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

function contrast(a: string, b: string): number {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

/** The training cell of syncs.ipynb (tests/notebooks/generate.py). */
const TRAIN = 2;
const PREPARE = 3;

test('the "Out of date" chip of an edited cell reads in the dark theme (issue 39)', async ({ page, tmpPath }) => {
  await openFixture(page, tmpPath, 'syncs.ipynb');
  await page.theme.setDarkTheme();
  await page.notebook.enterCellEditingMode(TRAIN);
  await page.keyboard.press('Control+End');
  await page.keyboard.type('  # edited');
  const chip = cellAt(page, TRAIN).locator('.jp-syncfree-stale-note');
  await expect(chip).toBeVisible();
  const colors = await chip.evaluate(node => {
    const style = getComputedStyle(node);
    // The chip's text colour is opaque or nearly: composite it over its own background.
    const text = style.color.match(/[\d.]+/g)!.map(Number);
    const back = style.backgroundColor.match(/[\d.]+/g)!.map(Number);
    const alpha = text.length > 3 ? text[3] : 1;
    const mixed = [0, 1, 2].map(i => Math.round(text[i] * alpha + back[i] * (1 - alpha)));
    return { text: `rgb(${mixed.join(', ')})`, background: style.backgroundColor };
  });
  // WCAG AA for small text.
  expect(contrast(colors.text, colors.background)).toBeGreaterThan(4.5);
  await page.theme.setLightTheme();
});

test('a rewrite preview of short lines has no empty sideways scrollbar (issue 39)', async ({ page, tmpPath }) => {
  await openFixture(page, tmpPath, 'syncs.ipynb');
  await markerOn(page, PREPARE, 3).click();
  const diff = page.locator('.jp-syncfree-card .jp-syncfree-card-diff');
  await expect(diff).toBeVisible();
  // Headless Chromium draws no scrollbars at all: what is asked of it is what a desktop draws.
  const layout = await diff.evaluate(node => ({
    overflowX: getComputedStyle(node).overflowX,
    wider: node.scrollWidth > node.clientWidth
  }));
  expect(layout.wider).toBe(false);
  expect(layout.overflowX).not.toBe('scroll');
});

/*
 * review39.ipynb (tests/notebooks/generate.py): cell 1 holds a report crafted with a second
 * site on line 9 of its 3 lines; cell 2 the merged report of a 2-rank job (predicted): 20
 * syncs at ddp_train.py:53 on both ranks, 1 at ddp_train.py:55 on rank 0 only.
 */
const CRAFTED = 0;
const DDP = 1;

test('a merged rank report in a notebook is in the Syncs panel, its rows naming file:line (issue 39, item 7)', async ({
  page,
  tmpPath
}) => {
  await openFixture(page, tmpPath, 'review39.ipynb');
  // The merged table is drawn in the cell's output.
  await expect(cellAt(page, DDP).locator('.jp-syncfree-merged tbody tr')).toHaveCount(2);
  await runCommand(page, 'syncfree:open-sidebar');
  const sidebar = page.locator('#jp-syncfree-sidebar');
  await expect(sidebar).toBeVisible();
  await expect(sidebar).not.toContainText('No syncs reported');
  await expect(sidebar.locator('.jp-syncfree-sidebar-cell-name')).toHaveText([
    'Cell 1',
    'Cell 2: merged report, 2 ranks'
  ]);
  // The merged syncs count in the notebook's totals: 3 in cell 1 (line 9 is not in it) and 21.
  await expect(sidebar.locator('[data-total="syncs"]')).toHaveText('24 syncs');
  await expect(sidebar.locator('[data-total="cells"]')).toHaveText('2 cells');
  const rows = sidebar.locator('.jp-syncfree-sidebar-row[data-file]');
  await expect(rows.locator('.jp-syncfree-sidebar-where')).toHaveText(['ddp_train.py:53', 'ddp_train.py:55']);
  await expect(rows.locator('.jp-syncfree-sidebar-count')).toHaveText([/^×20/, /^×1/]);
  await expect(rows.first().locator('.jp-syncfree-sidebar-label')).toHaveText('.item()');
  await expect(rows.first()).toHaveAttribute('title', /^ddp_train\.py:53: \.item\(\) ×20 \(predicted\)/);
  // Predicted without a GPU: no cost and no time column is made up for it.
  await expect(rows.first().locator('.jp-syncfree-sidebar-blocked')).toHaveText('—');

  // A row of a script goes to no cell line: the active cell and its cursor stay where they were.
  await page.notebook.selectCells(CRAFTED);
  const before = await activeCursor(page);
  await rows.first().click();
  await rows.first().press('Enter');
  expect(await activeCursor(page)).toEqual(before);
  await expect(page.locator('.lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current')).toHaveText(/review39\.ipynb/);
  await expect(page.locator('.lm-DockPanel-tabBar .lm-TabBar-tab', { hasText: 'ddp_train.py' })).toHaveCount(0);
});

test("a crafted report's sites past the cell's end are left out of the summary and the panel alike (issue 39, item 12c)", async ({
  page,
  tmpPath
}) => {
  await openFixture(page, tmpPath, 'review39.ipynb');
  const summary = cellAt(page, CRAFTED).locator('.jp-syncfree-summary');
  await expect(summary.locator('.jp-syncfree-title')).toHaveText(/^syncfree: 3 syncs at 1 site\b/);
  await expect(summary.locator('.jp-syncfree-left-out')).toHaveText(
    "1 site on lines past the cell's end (line 9) left out: this report does not match the cell"
  );
  await expect(summary.locator('tbody tr')).toHaveCount(1);
  await expect(summary.locator('tbody tr td').first()).toHaveText('2');
  // One marker, on line 2.
  await expect(cellMarkers(page, CRAFTED)).toHaveCount(1);
  await expect(markerOn(page, CRAFTED, 2)).toHaveCount(1);

  await runCommand(page, 'syncfree:open-sidebar');
  const sidebar = page.locator('#jp-syncfree-sidebar');
  const header = sidebar
    .locator('.jp-syncfree-sidebar-cell')
    .filter({ has: page.locator('.jp-syncfree-sidebar-cell-name', { hasText: /^Cell 1$/ }) });
  // The cell's header counts what the summary counts: 3 syncs, 1.50 ms blocked, not 8 and 5.50 ms.
  await expect(header.locator('.jp-syncfree-sidebar-cell-totals')).toHaveText('3 syncs · 1.50 ms blocked');
  const rows = sidebar.locator('.jp-syncfree-sidebar-row[data-cell-id="crafted"]');
  await expect(rows).toHaveCount(1);
  await expect(rows.locator('.jp-syncfree-sidebar-where')).toHaveText('2');
});
