import { expect, test } from '@jupyterlab/galata';
import { cellAt, markerOn, openFixture } from './utils';

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
