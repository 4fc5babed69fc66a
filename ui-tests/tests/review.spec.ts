import { IJupyterLabPageFixture, expect, test } from '@jupyterlab/galata';
import {
  activeCursor,
  cellAt,
  cellLines,
  cellMarkers,
  cellSource,
  lineOfMarker,
  markerOn,
  openFixture,
  runCommand,
  setCellSource
} from './utils';

/*
 * Issue 26: the notebook reviewed again in Chromium. syncs.ipynb (tests/notebooks/generate.py):
 * cell 2 "train" (line 6 `.item()` ×64, line 7 a print), cell 3 "prepare" (rewrites on
 * lines 3, SF401 safe, and 4, SF104 review), cell 4 "predicted".
 */
const TRAIN = 2;
const PREPARE = 3;
const MIME = 'application/vnd.syncfree.report.v1+json';

async function isDirty(page: IJupyterLabPageFixture): Promise<boolean> {
  return page.evaluate(() => (window as any).jupyterapp.shell.currentWidget.context.model.dirty as boolean);
}

/** The notebook file as the server has it (what was saved). */
async function savedText(page: IJupyterLabPageFixture, path: string): Promise<string> {
  return page.evaluate(async file => {
    const model = await (window as any).jupyterapp.serviceManager.contents.get(file, { content: true });
    return JSON.stringify(model.content);
  }, path);
}

/**
 * Resolved once the notebook's kernel has told its language: JupyterLab then writes the kernel's `kernelspec`
 * and `language_info` into the notebook, an edit that made a save made before it dirty again.
 */
async function kernelSettled(page: IJupyterLabPageFixture): Promise<void> {
  await page.evaluate(async () => {
    const panel = (window as any).jupyterapp.shell.currentWidget;
    await panel.sessionContext.ready;
    const kernel = panel.sessionContext.session?.kernel;
    if (kernel) {
      await kernel.info; // the panel's own handler of it, registered first, has run when this resolves
    }
  });
}

async function clearAll(page: IJupyterLabPageFixture): Promise<void> {
  await page.locator('#jp-syncfree-sidebar [data-command="syncfree:clear-markers"]').click();
  await page.locator('.jp-Dialog button', { hasText: 'Clear all' }).click();
}

test.describe('issue 26 with the syncs notebook', () => {
  test.beforeEach(async ({ page, tmpPath }) => {
    await openFixture(page, tmpPath, 'syncs.ipynb');
  });

  test('1. Clear is an edit of the notebook: dirty, saved without the reports, and undoable', async ({
    page,
    tmpPath
  }) => {
    await runCommand(page, 'syncfree:open-sidebar');
    await expect(markerOn(page, TRAIN, 6)).toHaveCount(1);
    // The train cell printed before its report, as a real run does: the report is its
    // second output (removing it from the output area alone never reached the file then).
    await page.evaluate(index => {
      const cell = (window as any).jupyterapp.shell.currentWidget.content.widgets[index];
      const shared = cell.model.sharedModel;
      const outputs = shared.getOutputs();
      shared.updateOutputs(0, outputs.length, [
        { output_type: 'stream', name: 'stdout', text: 'last 0.5\n' },
        ...outputs
      ]);
    }, TRAIN);
    await expect(cellAt(page, TRAIN).locator('.jp-OutputArea-output').first()).toContainText('last 0.5');
    await kernelSettled(page);
    await page.notebook.save();
    expect(await isDirty(page)).toBe(false);
    const path = `${tmpPath}/syncs.ipynb`;
    await clearAll(page);
    await expect(page.locator('.jp-syncfree-marker')).toHaveCount(0);
    await expect.poll(() => isDirty(page)).toBe(true);
    // Saved: the file has no report left.
    await page.notebook.save();
    expect(await savedText(page, path)).not.toContain(MIME);

    // The notice's Undo puts every report back, as an edit that is saved too.
    const notice = page.locator('.Toastify__toast').filter({ hasText: 'Cleared the syncfree reports of 3 cells' });
    await notice.getByRole('button', { name: 'Undo' }).click();
    await expect(markerOn(page, TRAIN, 6)).toHaveCount(1);
    await expect(markerOn(page, PREPARE, 3)).toHaveCount(1);
    await expect(page.locator('#jp-syncfree-sidebar [data-total="syncs"]')).toHaveText('77 syncs');
    await expect.poll(() => isDirty(page)).toBe(true);
    await page.notebook.save();
    expect(await savedText(page, path)).toContain(MIME);

    // Cleared, saved and reopened: no report comes back.
    await clearAll(page);
    await expect(page.locator('.jp-syncfree-marker')).toHaveCount(0);
    await page.notebook.save();
    await page.notebook.close(true);
    await page.notebook.openByPath(path);
    await page.notebook.activate('syncs.ipynb');
    await cellAt(page, TRAIN).waitFor();
    await expect(cellAt(page, TRAIN).locator('.cm-line').first()).toBeVisible();
    await expect(cellAt(page, TRAIN).locator('.jp-OutputArea-output').first()).toContainText('last 0.5');
    await expect(page.locator('.jp-syncfree-summary')).toHaveCount(0);
    await expect(page.locator('.jp-syncfree-marker')).toHaveCount(0);
    await expect(page.locator('#jp-syncfree-sidebar .jp-syncfree-sidebar-empty')).toBeVisible();
  });

  test('2. markers come back when an edit restores the text: delete and undo, cut and paste', async ({ page }) => {
    const before = await cellSource(page, TRAIN);
    await cellLines(page, TRAIN).nth(5).click();
    // Empty line 6 and join it to line 5: the line is gone.
    await page.keyboard.press('End');
    await page.keyboard.press('Shift+Home');
    await page.keyboard.press('Shift+Home');
    await page.keyboard.press('Backspace');
    await page.keyboard.press('Backspace');
    await expect.poll(() => cellSource(page, TRAIN)).not.toBe(before);
    await expect(markerOn(page, TRAIN, 6)).toHaveCount(0);
    for (let i = 0; i < 4 && (await cellSource(page, TRAIN)) !== before; i++) {
      await page.keyboard.press('Control+z');
    }
    expect(await cellSource(page, TRAIN)).toBe(before);
    const marker = markerOn(page, TRAIN, 6);
    await expect(marker).toHaveCount(1);
    await expect(marker).not.toHaveClass(/jp-syncfree-stale/);
    expect(await lineOfMarker(page, TRAIN, marker)).toBe(6);
    await cellLines(page, TRAIN).nth(5).click();
    await page.keyboard.press('Control+Alt+i');
    await expect(page.locator('.jp-syncfree-card-title')).toHaveText('Sync at line 6');
    await page.keyboard.press('Escape');

    // Select all, cut, paste the same text back.
    await cellLines(page, TRAIN).nth(2).click();
    await page.keyboard.press('Control+a');
    await page.keyboard.press('Control+x');
    await expect(cellMarkers(page, TRAIN)).toHaveCount(0);
    await page.keyboard.press('Control+v');
    await expect.poll(() => cellSource(page, TRAIN)).toBe(before);
    await expect(markerOn(page, TRAIN, 6)).toHaveCount(1);
    await expect(markerOn(page, TRAIN, 7)).toHaveCount(1);
    await cellLines(page, TRAIN).nth(5).click();
    await page.keyboard.press('Control+Alt+i');
    await expect(page.locator('.jp-syncfree-card-title')).toHaveText('Sync at line 6');
    await expect(page.locator('.Toastify__toast').filter({ hasText: 'No sync is marked' })).toHaveCount(0);
  });

  test('6. a deleted marked line: its row says so and Enter goes nowhere', async ({ page }) => {
    await runCommand(page, 'syncfree:open-sidebar');
    const sidebar = page.locator('#jp-syncfree-sidebar');
    const row = sidebar.locator('.jp-syncfree-sidebar-row[data-cell-id="train"][data-report-line="6"]');
    await expect(row).toHaveAttribute('data-line', '6');
    await cellLines(page, TRAIN).nth(5).click();
    await page.keyboard.press('End');
    await page.keyboard.press('Shift+Home');
    await page.keyboard.press('Shift+Home');
    await page.keyboard.press('Backspace');
    await page.keyboard.press('Backspace');
    await expect(row).toHaveAttribute('data-deleted', 'true');
    await expect(row.locator('.jp-syncfree-sidebar-where')).toHaveText('6 (deleted)');
    await expect(row).toHaveAttribute('title', /line 6 was deleted since this run/);
    // Put the cursor elsewhere: a click and Enter on the row leave it there.
    await cellLines(page, PREPARE).nth(1).click();
    const where = await activeCursor(page);
    // (aria-disabled: Playwright would wait for it to be enabled. The panel redraws its rows as the active cell
    // changes: a row replaced between finding it and clicking it is found again.)
    await expect(row).toBeVisible();
    await expect(async () => row.click({ force: true, timeout: 2000 })).toPass();
    await page.keyboard.press('Enter');
    expect(await activeCursor(page)).toEqual(where);
  });

  test('3. the panel’s buttons keep no focus: Shift+Enter runs the cell, not Watch again', async ({ page }) => {
    await runCommand(page, 'syncfree:open-sidebar');
    const watch = page.locator('#jp-syncfree-sidebar [data-command="syncfree:toggle-watch"]');
    await cellAt(page, 1).click();
    await page.keyboard.press('Escape');
    await watch.click();
    await expect(watch).toHaveClass(/lm-mod-toggled/, { timeout: 30000 });
    expect(await watch.evaluate(node => node.contains(document.activeElement))).toBe(false);
    // The focus is still in the notebook: Shift+Enter runs cell 1 and watch mode stays on.
    await page.keyboard.press('Shift+Enter');
    await expect(cellAt(page, 1).locator('.jp-InputPrompt')).toHaveText(/\[\d+\]:/, { timeout: 30000 });
    await expect(watch).toHaveClass(/lm-mod-toggled/);
    await expect(page.locator('.Toastify__toast').filter({ hasText: 'watch mode is off' })).toHaveCount(0);
  });

  test('5. rows at the default width: labels whole (issue 39: ".it…" did not read), full text in the tooltip', async ({
    page
  }) => {
    await runCommand(page, 'syncfree:open-sidebar');
    const sidebar = page.locator('#jp-syncfree-sidebar');
    const rows = sidebar.locator('.jp-syncfree-sidebar-row');
    await expect(rows).toHaveCount(8);
    const width = await sidebar.evaluate(node => node.clientWidth);
    expect(width).toBeLessThan(300);
    const shape = await sidebar.evaluate(node =>
      Array.from(node.querySelectorAll<HTMLElement>('.jp-syncfree-sidebar-row')).map(row => {
        const label = row.querySelector<HTMLElement>('.jp-syncfree-sidebar-label')!;
        // A label wraps rather than being cut; chips go under it.
        return {
          cut: label.scrollWidth > label.clientWidth + 1,
          fitsColumn: label.getBoundingClientRect().right <= row.getBoundingClientRect().right
        };
      })
    );
    for (const row of shape) {
      expect(row).toEqual({ cut: false, fitsColumn: true });
    }
    await expect(rows.first()).toHaveAttribute('title', /\.item\(\) ×64/);
  });

  test('8. Apply rewrite on an edited cell: applies when its line is unchanged, else disabled with the reason', async ({
    page
  }) => {
    // An edit on line 2: line 3's rewrite still applies, on the text as it is now.
    await cellLines(page, PREPARE).nth(1).click();
    await page.keyboard.press('End');
    await page.keyboard.type('  # edited');
    await markerOn(page, PREPARE, 3).click();
    const card = page.locator('.jp-syncfree-card');
    const apply = card.locator('.jp-syncfree-card-apply');
    await expect(card.locator('.jp-syncfree-card-stale')).toBeVisible();
    await expect(apply).toBeEnabled();
    await expect(card.locator('.jp-syncfree-card-add')).toContainText('non_blocking=True');
    // The whole rewrite is readable in the card: its lines wrap, nothing scrolls sideways.
    const diff = card.locator('.jp-syncfree-card-diff');
    expect(await diff.evaluate(node => node.scrollWidth <= node.clientWidth + 1)).toBe(true);
    await apply.click();
    await expect
      .poll(async () => (await cellSource(page, PREPARE)).split('\n')[2])
      .toBe('weights = torch.tensor([0.5, 2.0]).to("cuda", non_blocking=True)');
    expect((await cellSource(page, PREPARE)).split('\n')[1]).toContain('# edited');

    // An edit on line 4 itself: its rewrite is disabled before any click, and says why.
    await cellLines(page, PREPARE).nth(3).click();
    await page.keyboard.press('End');
    await page.keyboard.type(' # mine');
    await markerOn(page, PREPARE, 4).click();
    await expect(apply).toBeDisabled();
    await expect(card.locator('.jp-syncfree-card-status')).toContainText('changed since this report');
  });

  test('11. Ctrl+Alt+R on a review-first rewrite shows the card with its warning instead of applying', async ({
    page
  }) => {
    const before = await cellSource(page, PREPARE);
    await cellLines(page, PREPARE).nth(3).click();
    await page.keyboard.press('Control+Alt+r');
    const card = page.locator('.jp-syncfree-card');
    await expect(card).toBeFocused();
    await expect(card.locator('.jp-syncfree-card-review')).toBeVisible();
    await expect(card.locator('.jp-syncfree-card-diff')).toBeVisible();
    expect(await cellSource(page, PREPARE)).toBe(before);
    // A safe one still applies at once.
    await page.keyboard.press('Escape');
    await cellLines(page, PREPARE).nth(2).click();
    await page.keyboard.press('Control+Alt+r');
    await expect.poll(async () => (await cellSource(page, PREPARE)).split('\n')[2]).toContain('non_blocking=True');
  });

  test('10. the card’s dependency and diff lines read at 4.5:1, light and dark', async ({ page }) => {
    const measure = (root: Element) => {
      const parse = (text: string): number[] => {
        const srgb = /color\(srgb ([\d.e-]+) ([\d.e-]+) ([\d.e-]+)(?: \/ ([\d.e-]+))?\)/.exec(text);
        if (srgb) {
          return [+srgb[1] * 255, +srgb[2] * 255, +srgb[3] * 255, srgb[4] === undefined ? 1 : +srgb[4]];
        }
        const rgb = /rgba?\(([\d.]+),? ([\d.]+),? ([\d.]+)(?:,? \/? ?([\d.]+))?\)/.exec(text);
        return rgb ? [+rgb[1], +rgb[2], +rgb[3], rgb[4] === undefined ? 1 : +rgb[4]] : [0, 0, 0, 0];
      };
      // The background an element's text is drawn on: its own and its ancestors', composited.
      const background = (el: Element | null): number[] => {
        const layers: number[][] = [];
        for (let node = el; node; node = node.parentElement) {
          const c = parse(getComputedStyle(node).backgroundColor);
          if (c[3] > 0) {
            layers.push(c);
            if (c[3] >= 1) {
              break;
            }
          }
        }
        let out = [255, 255, 255];
        for (const c of layers.reverse()) {
          out = out.map((v, i) => v * (1 - c[3]) + c[i] * c[3]);
        }
        return out;
      };
      const luminance = (c: number[]) => {
        const [r, g, b] = c.slice(0, 3).map(v => {
          const x = v / 255;
          return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4;
        });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
      };
      const out: Record<string, number> = {};
      for (const name of ['dependency-true', 'dependency-false', 'add', 'del']) {
        const el = root.querySelector(`.jp-syncfree-card-${name}`);
        if (el) {
          const fg = luminance(parse(getComputedStyle(el).color));
          const bg = luminance(background(el));
          out[name] = Math.round(((Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05)) * 100) / 100;
        }
      }
      return out;
    };
    for (const dark of [false, true]) {
      if (dark) {
        await page.theme.setDarkTheme();
      }
      const ratios: Record<string, number> = {};
      for (const [cell, line] of [
        [PREPARE, 3],
        [TRAIN, 6]
      ]) {
        await markerOn(page, cell, line).click();
        const card = page.locator('.jp-syncfree-card');
        await expect(card.locator('.jp-syncfree-card-dependency')).toBeVisible();
        Object.assign(ratios, await card.evaluate(measure));
        await card.locator('.jp-syncfree-card-close').click();
        await expect(card).toHaveCount(0);
      }
      expect(Object.keys(ratios).sort()).toEqual(['add', 'del', 'dependency-false', 'dependency-true']);
      for (const [name, value] of Object.entries(ratios)) {
        expect(value, `${name} (${dark ? 'dark' : 'light'})`).toBeGreaterThanOrEqual(4.5);
      }
    }
  });

  test('polish: Alt+F8 lands on the call and shows its card; a row click lands on the column', async ({ page }) => {
    await cellAt(page, 1).click();
    await page.keyboard.press('Escape');
    await page.keyboard.press('Alt+F8');
    await expect.poll(() => activeCursor(page)).toEqual({ cell: TRAIN, line: 6 });
    const column = () =>
      page.evaluate(
        () => (window as any).jupyterapp.shell.currentWidget.content.activeCell.editor.getCursorPosition().column
      );
    expect(await column()).toBe(13);
    await expect(page.locator('.jp-syncfree-card-title')).toHaveText('Sync at line 6');
    await page.keyboard.press('Alt+F8');
    await expect.poll(() => activeCursor(page)).toEqual({ cell: TRAIN, line: 7 });
    expect(await column()).toBe(0);
    await expect(page.locator('.jp-syncfree-card-title')).toHaveText('Sync at line 7');
    await expect(page.locator('.jp-syncfree-card')).toHaveCount(1);

    await runCommand(page, 'syncfree:open-sidebar');
    await page.locator('#jp-syncfree-sidebar .jp-syncfree-sidebar-row[data-cell-id="prepare"][data-line="5"]').click();
    await expect.poll(() => activeCursor(page)).toEqual({ cell: PREPARE, line: 5 });
    expect(await column()).toBe(7);
  });

  test('polish: the filter says "N of M"; after Clear the filters hold no old entries', async ({ page }) => {
    await runCommand(page, 'syncfree:open-sidebar');
    const sidebar = page.locator('#jp-syncfree-sidebar');
    await sidebar.locator('[data-control="text"]').fill('mask');
    await expect(sidebar.locator('.jp-syncfree-sidebar-filter-count')).toHaveText('1 of 8');
    await sidebar.locator('[data-control="text"]').fill('');
    await expect(sidebar.locator('.jp-syncfree-sidebar-filter-count')).toHaveText('');
    await sidebar.locator('[data-control="kind"]').selectOption('item');
    await clearAll(page);
    await expect(sidebar.locator('.jp-syncfree-sidebar-empty')).toBeVisible();
    await expect(sidebar.locator('[data-control="kind"] option')).toHaveCount(1);
    await expect(sidebar.locator('[data-control="rule"] option')).toHaveCount(1);
  });
});

test.describe('issue 26 with a kernel (CPU torch: syncs are predicted)', () => {
  const run = async (page: IJupyterLabPageFixture, index: number, source: string) => {
    await setCellSource(page, index, source);
    await page.notebook.selectCells(index);
    await runCommand(page, 'syncfree:check-cell');
    await expect(cellAt(page, index).locator('.jp-syncfree-summary')).toBeVisible({ timeout: 60000 });
  };

  test('4. the right line everywhere: %%time cells, the displayed last expression, a call split over lines', async ({
    page
  }) => {
    await page.notebook.createNew('lines.ipynb');
    await page.notebook.setCell(0, 'code', 'import torch');
    await page.notebook.runCell(0, true);

    // (a) Check cell on a %%time cell: the sync is on .item()'s line, no "did not run" ring.
    await page.notebook.addCell('code', '');
    await run(page, 1, '%%time\nx = torch.ones(8, device="cuda")\ny = x.sum().item()');
    expect(await cellSource(page, 1)).toBe('%%syncfree\n%%time\nx = torch.ones(8, device="cuda")\ny = x.sum().item()');
    await expect(cellMarkers(page, 1)).toHaveCount(1);
    await expect(markerOn(page, 1, 4)).toHaveClass(/jp-syncfree-marker-predicted/);
    await expect(cellAt(page, 1).locator('.jp-syncfree-marker-static')).toHaveCount(0);

    // (b) A tensor as the last expression is displayed: a predicted sync on its line.
    await page.notebook.addCell('code', '');
    await run(page, 2, 'z = torch.ones(3, device="cuda")\nz');
    await expect(cellAt(page, 2).locator('.jp-OutputArea-output').first()).toContainText('tensor([1., 1., 1.])');
    await expect(markerOn(page, 2, 3)).toHaveClass(/jp-syncfree-marker-predicted/);
    await expect(cellAt(page, 2).locator('.jp-syncfree-marker-static')).toHaveCount(0);
    await expect(cellAt(page, 2).locator('.jp-syncfree-title')).toContainText('1 predicted sync');
    await expect(cellAt(page, 2).locator('.jp-syncfree-findings')).toHaveCount(0);

    // (c) A chained call split over two lines: one marker, no ring beside it.
    await page.notebook.addCell('code', '');
    await run(page, 3, 'w = torch.ones(3, device="cuda")\nv = (w.sum()\n     .item())');
    await expect(cellMarkers(page, 3)).toHaveCount(1);
    await expect(cellAt(page, 3).locator('.jp-syncfree-marker-static')).toHaveCount(0);
    await expect(cellAt(page, 3).locator('.jp-syncfree-findings')).toHaveCount(0);
  });
});

test('polish: the tour opens clean (its language_info is the kernel’s) and its words match its report', async ({
  page,
  tmpPath
}) => {
  const name = 'tour.ipynb';
  await page.contents.uploadFile(require('path').resolve(__dirname, '../../examples', name), `${tmpPath}/${name}`);
  await page.notebook.openByPath(`${tmpPath}/${name}`);
  await page.notebook.activate(name);
  const dirtyOnceTheKernelIsUp = await page.evaluate(async () => {
    const panel = (window as any).jupyterapp.shell.currentWidget;
    await panel.sessionContext.ready;
    await panel.sessionContext.session.kernel.info;
    await new Promise(resolve => setTimeout(resolve, 1000));
    return panel.context.model.dirty as boolean;
  });
  expect(dirtyOnceTheKernelIsUp).toBe(false);
  await expect(cellAt(page, 12)).toContainText('line 5');
  await expect(cellAt(page, 12)).not.toContainText('line 4');
});

test('polish: a stale marker keeps its shape whole: the slash sits at its corner', async ({ page, tmpPath }) => {
  await openFixture(page, tmpPath, 'syncs.ipynb');
  await cellLines(page, TRAIN).nth(1).click();
  await page.keyboard.press('End');
  await page.keyboard.type(' # edited');
  const marker = markerOn(page, TRAIN, 6);
  await expect(marker).toHaveClass(/jp-syncfree-stale/);
  const geometry = await marker.evaluate(node => {
    const box = node.getBoundingClientRect();
    const after = getComputedStyle(node, '::after');
    const before = getComputedStyle(node, '::before');
    return {
      slashWidth: parseFloat(after.width),
      slashCentre: parseFloat(after.left) - box.width / 2,
      dot: parseFloat(before.width)
    };
  });
  // The slash is shorter than the dot is wide and centred off it, below and right.
  expect(geometry.slashWidth).toBeLessThan(geometry.dot);
  expect(geometry.slashCentre).toBeGreaterThanOrEqual(3);
});
