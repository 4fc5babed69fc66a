import { expect, test } from '@jupyterlab/galata';
import { cellAt, cellLines, cellSource, markerOn, openFixture } from './utils';

/*
 * syncs.ipynb (tests/notebooks/generate.py): cell 2 is a training loop whose line 6
 * synced 64x through .item() and line 7 printed a tensor; cell 3 has rewrites on
 * lines 3 (SF401, safe) and 4 (SF104, review).
 */
const TRAIN = 2;
const PREPARE = 3;

test.describe('the sync card', () => {
  test.beforeEach(async ({ page, tmpPath }) => {
    await openFixture(page, tmpPath, 'syncs.ipynb');
  });

  test('hovering a marker says what synced, how often, how long, and why', async ({ page }) => {
    await markerOn(page, TRAIN, 6).hover();
    const card = page.locator('.jp-syncfree-card');
    await expect(card).toBeVisible();
    await expect(card.locator('.jp-syncfree-card-title')).toHaveText('Sync at line 6');
    await expect(card.locator('.jp-syncfree-card-kind')).toHaveText('.item()');
    await expect(card.locator('.jp-syncfree-card-count')).toHaveText('×64');
    await expect(card.locator('.jp-syncfree-card-blocked')).toHaveText('blocked 41.2 ms');
    await expect(card.locator('.jp-syncfree-card-rule-code').first()).toHaveText('SF101');
    await expect(card.locator('.jp-syncfree-card-why')).not.toBeEmpty();
    await expect(card.locator('.jp-syncfree-card-dependency')).toContainText('dependency');
    await expect(card.locator('.jp-syncfree-card-examples pre')).toHaveCount(2);


    // The pointer leaves the line and the card: the card goes.
    await page.mouse.move(5, 5);
    await expect(card).toHaveCount(0);
  });

  test('a hovered card sits inside the viewport, keeps its header on top, and Escape closes it in command mode', async ({
    page
  }) => {
    await cellAt(page, TRAIN).click();
    await page.keyboard.press('Escape');
    await markerOn(page, TRAIN, 6).hover();
    const card = page.locator('.jp-syncfree-card');
    await expect(card).toBeVisible();
    // CodeMirror draws a tooltip at top -10000px and places it at its next measure: wait for that.
    await expect.poll(async () => (await card.boundingBox())?.y ?? -10000).toBeGreaterThan(-10000);
    const box = (await card.boundingBox())!;
    const viewport = page.viewportSize()!;
    expect(box.y).toBeGreaterThanOrEqual(0);
    expect(box.y + box.height).toBeLessThanOrEqual(viewport.height);
    expect(box.x + box.width).toBeLessThanOrEqual(viewport.width);
    const header = card.locator('.jp-syncfree-card-header');
    expect(await header.evaluate(node => getComputedStyle(node).position)).toBe('sticky');
    // Command mode: the focus is not in the editor, Escape still closes the card.
    await card.hover();
    await page.keyboard.press('Escape');
    await expect(card).toHaveCount(0);
  });

  test('hovering the text of a line shows the same card, with library frames', async ({ page }) => {
    // Over the first characters of line 7 (`print(...)`), not the blank space after it.
    await cellLines(page, TRAIN).nth(6).hover({ position: { x: 12, y: 6 } });
    const card = page.locator('.jp-syncfree-card');
    await expect(card.locator('.jp-syncfree-card-title')).toHaveText('Sync at line 7');
    await expect(card.locator('.jp-syncfree-card-frames li').first()).toContainText('torch/_tensor.py:568 in __repr__');
  });

  test('Apply rewrite changes the cell in one edit, and one undo restores it', async ({ page }) => {
    const before = await cellSource(page, PREPARE);
    await markerOn(page, PREPARE, 3).click();
    const card = page.locator('.jp-syncfree-card');
    await expect(card.locator('.jp-syncfree-card-del')).toContainText('torch.tensor([0.5, 2.0], device="cuda")');
    await expect(card.locator('.jp-syncfree-card-add')).toContainText('.to("cuda", non_blocking=True)');
    await card.locator('.jp-syncfree-card-apply').click();

    await expect.poll(() => cellSource(page, PREPARE)).toBe(
      before.replace('torch.tensor([0.5, 2.0], device="cuda")', 'torch.tensor([0.5, 2.0]).to("cuda", non_blocking=True)')
    );
    await expect(card).toHaveCount(0);
    // The cell no longer matches its report: its markers say so.
    await expect(markerOn(page, PREPARE, 3)).toHaveClass(/jp-syncfree-stale/);

    await page.keyboard.press('Control+z');
    await expect.poll(() => cellSource(page, PREPARE)).toBe(before);
    await expect(markerOn(page, PREPARE, 3)).not.toHaveClass(/jp-syncfree-stale/);
  });

  test('from the keyboard: open the card at the cursor, tab to Apply, press Enter', async ({ page }) => {
    await cellLines(page, PREPARE).nth(3).click();
    await page.keyboard.press('Control+Alt+i');
    const card = page.locator('.jp-syncfree-card');
    await expect(card).toBeFocused();
    await expect(card.locator('.jp-syncfree-card-review')).toBeVisible();
    const apply = card.locator('.jp-syncfree-card-apply');
    for (let i = 0; i < 5 && !(await apply.evaluate(node => node === document.activeElement)); i++) {
      await page.keyboard.press('Tab');
    }
    await expect(apply).toBeFocused();
    await page.keyboard.press('Enter');
    await expect.poll(async () => (await cellSource(page, PREPARE)).split('\n')[3]).toBe(
      'best = torch.max(scores.sum(), scores.mean())'
    );
  });

  test('Escape closes a card opened from the keyboard and returns to the editor', async ({ page }) => {
    await cellLines(page, TRAIN).nth(5).click();
    await page.keyboard.press('Control+Alt+i');
    const card = page.locator('.jp-syncfree-card');
    await expect(card).toBeFocused();
    await page.keyboard.press('Escape');
    await expect(card).toHaveCount(0);
    await expect(cellAt(page, TRAIN).locator('.cm-content')).toBeFocused();
  });

  test('a rewrite is refused once its own line changed since its report', async ({ page }) => {
    await cellLines(page, PREPARE).nth(2).click();
    await page.keyboard.press('End');
    await page.keyboard.type('  # edited');
    const edited = await cellSource(page, PREPARE);
    await page.keyboard.press('Control+Alt+r');
    await expect(page.locator('.Toastify__toast').filter({ hasText: 'changed since this report' })).toBeVisible();
    expect(await cellSource(page, PREPARE)).toBe(edited);
  });
});
