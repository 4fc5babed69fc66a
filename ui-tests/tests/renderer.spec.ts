import { expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';
import { WINDOWING_OFF, activeCursor, cellAt, openFixture } from './utils';

/** Relative luminance (WCAG) of a CSS rgb()/rgba() colour. */
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

test.describe('the report summary under a cell', () => {
  test('reads well in the dark theme, and its rows jump to their line', async ({ page, tmpPath }) => {
    await openFixture(page, tmpPath, 'syncs.ipynb');
    await page.theme.setDarkTheme();
    const summary = cellAt(page, 2).locator('.jp-syncfree-summary');
    await expect(summary.locator('.jp-syncfree-title')).toContainText('syncfree: 72 syncs at 2 sites, blocked 42.1 ms');
    await expect(summary.locator('tbody tr')).toHaveCount(2);

    const colors = await summary.evaluate(node => {
      const background = (element: Element | null): string => {
        for (let e = element; e; e = e.parentElement) {
          const color = getComputedStyle(e).backgroundColor;
          if (color !== 'rgba(0, 0, 0, 0)' && color !== 'transparent') {
            return color;
          }
        }
        return 'rgb(255, 255, 255)';
      };
      const cell = node.querySelector('tbody td')!;
      return { text: getComputedStyle(cell).color, background: background(cell) };
    });
    // WCAG AA for normal text.
    expect(contrast(colors.text, colors.background)).toBeGreaterThan(4.5);
    expect(luminance(colors.background)).toBeLessThan(0.2);

    await summary.locator('tbody tr').nth(1).click();
    await expect.poll(() => activeCursor(page)).toEqual({ cell: 2, line: 7 });

    await summary.locator('.jp-syncfree-open-sidebar').click();
    await expect(page.locator('#jp-syncfree-sidebar')).toBeVisible();
    await page.theme.setLightTheme();
  });
});

test.describe('summaries of a long notebook', () => {
  test.use({ mockSettings: WINDOWING_OFF });

  test('are drawn as they come near the visible part of the notebook, holding their height until then', async ({ page, tmpPath }) => {
    // syncs.ipynb's training cell and its report, 60 times over.
    const source = JSON.parse(fs.readFileSync(path.resolve(__dirname, 'notebooks/syncs.ipynb'), 'utf8'));
    const train = source.cells.find((cell: { id: string }) => cell.id === 'train');
    source.cells = Array.from({ length: 60 }, (_, i) => ({ ...train, id: `train-${i}` }));
    await page.contents.uploadContent(JSON.stringify(source), 'text', `${tmpPath}/long.ipynb`);
    await page.notebook.openByPath(`${tmpPath}/long.ipynb`);
    await page.notebook.activate('long.ipynb');

    const summaries = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-syncfree-summary');
    await expect(summaries).toHaveCount(60);
    await expect(summaries.first().locator('.jp-syncfree-title')).toContainText('syncfree: 72 syncs');
    // Far below: a placeholder about the drawn summary's height (headline and table).
    const last = summaries.last();
    await expect(last).toBeEmpty();
    const placeholder = (await last.boundingBox())!.height;
    expect(placeholder).toBeGreaterThan(40);

    await last.scrollIntoViewIfNeeded();
    await expect(last.locator('.jp-syncfree-title')).toContainText('syncfree: 72 syncs');
    await expect(last.locator('tbody tr')).toHaveCount(2);
    const drawn = (await last.boundingBox())!.height;
    expect(Math.abs(drawn - placeholder)).toBeLessThan(0.35 * drawn);
  });
});
