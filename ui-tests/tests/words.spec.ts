import { expect, test } from '@jupyterlab/galata';
import type { Locator } from '@playwright/test';
import { cellAt, markerOn, openFixture } from './utils';

/*
 * Words and glyphs as a user reads them, on syncs.ipynb (tests/notebooks/generate.py):
 * cell 2 "train" (measured), 3 "prepare" (measured, and static findings on line 7),
 * 4 "predicted" (predict mode).
 */
const TRAIN = 2;
const PREPARE = 3;
const PREDICTED = 4;

/** The computed style of an element's ::before or ::after. */
function pseudo(locator: Locator, which: '::before' | '::after') {
  return locator.evaluate((node, part) => {
    const style = getComputedStyle(node, part);
    return {
      content: style.content,
      transform: style.transform,
      borderStyle: style.borderTopStyle,
      borderColor: style.borderTopColor,
      background: style.backgroundColor,
      opacity: Number(style.opacity)
    };
  }, which);
}

test.describe('words and glyphs', () => {
  test.beforeEach(async ({ page, tmpPath }) => {
    await openFixture(page, tmpPath, 'syncs.ipynb');
  });

  test('summaries say predicted syncs as such, show code as code and numbers one way', async ({ page }) => {
    const predicted = cellAt(page, PREDICTED).locator('.jp-syncfree-summary');
    await expect(predicted.locator('.jp-syncfree-title')).toHaveText(
      'syncfree: 1 predicted sync at 1 site · no cost without a GPU'
    );
    const train = cellAt(page, TRAIN).locator('.jp-syncfree-summary');
    await expect(train.locator('tbody tr').first().locator('td').nth(1).locator('code')).toHaveText('.item()');
    await expect(train.locator('tbody tr').first().locator('td').nth(2)).toHaveText('×64');
    for (const cell of [TRAIN, PREPARE, PREDICTED]) {
      const text = await cellAt(page, cell).locator('.jp-syncfree-summary').innerText();
      expect(text).not.toContain('`');
      expect(text).not.toMatch(/\b(mask_index|python_bool|tensor_from_python)\b/);
      expect(text).not.toMatch(/\d+x\b/); // counts are written ×N
    }
  });

  test('"Open Syncs panel" looks like a link in the light and the dark theme', async ({ page }) => {
    const link = cellAt(page, TRAIN).locator('.jp-syncfree-open-sidebar');
    for (const theme of ['light', 'dark'] as const) {
      if (theme === 'dark') {
        await page.theme.setDarkTheme();
      }
      const style = await link.evaluate(node => {
        const css = getComputedStyle(node);
        const probe = document.createElement('span');
        probe.style.color = 'var(--jp-content-link-color)';
        node.parentElement!.appendChild(probe);
        const linkColor = getComputedStyle(probe).color;
        probe.remove();
        const title = getComputedStyle(node.parentElement!.querySelector('.jp-syncfree-title')!);
        return {
          decoration: css.textDecorationLine,
          color: css.color,
          linkColor,
          titleColor: title.color,
          background: css.backgroundColor,
          border: css.borderTopStyle
        };
      });
      expect(style.decoration).toContain('underline');
      expect(style.color).toBe(style.linkColor);
      expect(style.color).not.toBe(style.titleColor);
      expect(style.border).toBe('none');
      expect(['rgba(0, 0, 0, 0)', 'transparent']).toContain(style.background);
    }
    await page.theme.setLightTheme();
  });

  test('predicted markers are solid diamonds, stale markers never look like static rings', async ({ page }) => {
    const predicted = await pseudo(markerOn(page, PREDICTED, 3), '::before');
    expect(predicted.borderStyle).toBe('solid'); // not a dashed (spinner-like) ring
    expect(predicted.transform).not.toBe('none'); // rotated: a diamond
    const measured = await pseudo(markerOn(page, TRAIN, 6), '::before');
    const staticRing = await pseudo(markerOn(page, PREPARE, 7), '::before');
    expect(staticRing.transform).toBe('none');
    expect((await pseudo(markerOn(page, PREPARE, 7), '::after')).content).toBe('none');

    // Edit the train cell: its markers turn stale.
    await cellAt(page, TRAIN).locator('.jp-InputArea-editor .cm-line').first().click();
    await page.keyboard.press('Control+End');
    await page.keyboard.type('\n# edited');
    const stale = markerOn(page, TRAIN, 6);
    await expect(stale).toHaveClass(/jp-syncfree-stale/);
    const staleDot = await pseudo(stale, '::before');
    expect(staleDot.opacity).toBeLessThan(1);
    expect(staleDot.background).toBe(measured.background); // keeps its colour: not grey
    expect(staleDot.background).not.toBe(staticRing.borderColor);
    expect((await pseudo(stale, '::after')).content).not.toBe('none'); // the slash
    await page.keyboard.press('Control+z');
  });
});
