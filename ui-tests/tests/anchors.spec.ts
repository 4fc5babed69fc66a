import { expect, test } from '@jupyterlab/galata';
import { activeCursor, cellAt, cellMarkers, lineOfMarker, runCode, runCommand } from './utils';

/**
 * Issue 39: a site stays on the line that ran, not on the run's line number, through what
 * makes a new editor for the cell (Move Cell Down, cut and paste, save, close and reopen),
 * and runs of a cell are compared by what synced where in the code.
 */
const CELL = [
  '%%syncfree',
  'x = torch.ones(4, device="cuda")',
  'w = torch.ones(4, 4, device="cuda")',
  'for step in range(3):',
  '    y = x @ w',
  '    s = y.sum().item()'
].join('\n');

/** The 1-based line of the `.item()` line in the cell's editor now. */
async function itemLine(page: any, cell: number): Promise<number> {
  const lines = cellAt(page, cell).locator('.jp-InputArea-editor .cm-line');
  const texts = await lines.allTextContents();
  return texts.findIndex(text => text.includes('.item()')) + 1;
}

/** The index of the cell whose editor holds the `.item()` line (-1 while none does). */
async function itemCell(page: any): Promise<number> {
  const cells = page.locator('.jp-Notebook .jp-Cell');
  const count = await cells.count();
  for (let i = 0; i < count; i++) {
    const texts = await cells.nth(i).locator('.jp-InputArea-editor .cm-line').allTextContents();
    if (texts.some((text: string) => text.includes('.item()'))) {
      return i;
    }
  }
  return -1;
}

/** The `.item()` cell's marker sits beside its `.item()` line, and the panel's row names that line. */
async function expectOnItemLine(page: any, cell: number): Promise<void> {
  await expect.poll(() => itemLine(page, cell)).toBeGreaterThan(6);
  const line = await itemLine(page, cell);
  await expect(cellMarkers(page, cell)).toHaveCount(1);
  await expect.poll(() => lineOfMarker(page, cell, cellMarkers(page, cell).first())).toBe(line);
  // A highlight (drawn faded on a stale cell, or not at all) is never on another line.
  const highlighted = cellAt(page, cell).locator('.jp-syncfree-line');
  await expect(highlighted.filter({ hasNotText: '.item()' })).toHaveCount(0);
  const row = page.locator('#jp-syncfree-sidebar .jp-syncfree-sidebar-row[data-nav="site"]');
  await expect(row).toHaveCount(1);
  await expect(row).toHaveAttribute('data-line', String(line));
  await expect(row).toHaveAttribute('data-stale', 'true');
  // Enter on the row jumps to the anchored line.
  await row.focus();
  await page.keyboard.press('Enter');
  await expect.poll(() => activeCursor(page)).toEqual({ cell, line });
}

test('markers, highlight and panel row stay on the line that ran through moves, cut/paste, cut/undo and reopen', async ({
  page,
  tmpPath
}) => {
  const path = `${tmpPath}/anchors.ipynb`;
  await page.notebook.createNew('anchors.ipynb');
  await runCode(page, 0, 'import torch\n%load_ext syncfree');
  await page.notebook.addCell('code', '');
  await runCode(page, 1, CELL);
  await page.notebook.addCell('code', '1 + 1');
  await runCommand(page, 'syncfree:open-sidebar');
  await expect(cellMarkers(page, 1)).toHaveCount(1);

  // Two lines typed above the loop: the marker follows the edit.
  await page.notebook.selectCells(1);
  await page.notebook.enterCellEditingMode(1);
  await page.keyboard.press('Control+Home');
  await page.keyboard.press('End');
  await page.keyboard.press('Enter');
  await page.keyboard.type('# a note');
  await page.keyboard.press('Enter');
  await page.keyboard.type('# another');
  await page.keyboard.press('Escape');
  await expectOnItemLine(page, 1);

  // Move Cell Down makes a new editor for the cell: the marker stays on the line that ran.
  await page.notebook.selectCells(1);
  await runCommand(page, 'notebook:move-cell-down');
  await expectOnItemLine(page, 2);

  // Cut and paste it back above the last cell.
  await page.notebook.selectCells(2);
  await runCommand(page, 'notebook:cut-cell');
  await page.notebook.selectCells(0);
  await runCommand(page, 'notebook:paste-cell-below');
  await expectOnItemLine(page, 1);

  // Cut, then undone. The notebook's undo (its shared model's) takes edits made within half a second of each other
  // as one: when the paste above and this cut come that close, the undo takes back both (and the cut before them),
  // and the cell comes back where the move had put it. Where it lands is the undo's; that its marker comes back on
  // its line is this test's.
  await page.notebook.selectCells(1);
  await runCommand(page, 'notebook:cut-cell');
  await expect.poll(() => itemCell(page)).toBe(-1);
  await runCommand(page, 'notebook:undo-cell-action');
  await expect.poll(() => itemCell(page)).toBeGreaterThan(0);
  const restored = await itemCell(page);
  await expectOnItemLine(page, restored);

  // Saved, closed and reopened.
  await page.notebook.save();
  await page.notebook.close(true);
  await page.notebook.openByPath(path);
  await page.notebook.activate('anchors.ipynb');
  await cellAt(page, restored).locator('.cm-line').first().waitFor();
  await runCommand(page, 'syncfree:open-sidebar');
  await expectOnItemLine(page, restored);
});

test('a comment line added at the top and a re-run show no change vs the previous run', async ({ page }) => {
  await page.notebook.createNew('anchors-rerun.ipynb');
  await runCode(page, 0, 'import torch\n%load_ext syncfree');
  await page.notebook.addCell('code', '');
  await runCode(page, 1, CELL);
  await runCommand(page, 'syncfree:open-sidebar');
  const sidebar = page.locator('#jp-syncfree-sidebar');
  await expect(sidebar.locator('[data-total="syncs"]')).toHaveText('3 predicted syncs');
  await runCode(page, 1, CELL.replace('%%syncfree\n', '%%syncfree\n# a comment\n'));
  await expect(sidebar.locator('.jp-syncfree-sidebar-row[data-nav="site"]')).toHaveAttribute('data-line', '7');
  await expect(sidebar).toContainText('same as previous run');
  await expect(sidebar).not.toContainText('gone');
  await expect(sidebar.locator('.jp-syncfree-sidebar-row .jp-syncfree-sidebar-delta')).toHaveCount(0);
});

test('a sync inside a function from an earlier cell names that cell and line, in the card and the output', async ({
  page
}) => {
  await page.notebook.createNew('anchors-defined.ipynb');
  await runCode(page, 0, 'import torch\n%load_ext syncfree');
  await page.notebook.addCell('code', '');
  await runCode(page, 1, 'def helper(t):\n    y = t * 2\n    return y.sum().item()');
  await page.notebook.addCell('code', '');
  await runCode(page, 2, '%%syncfree\nx = torch.ones(4, device="cuda")\nv = helper(x)');
  // The calling line is marked; the card names where inside the earlier cell it synced.
  const marker = cellMarkers(page, 2);
  await expect(marker).toHaveCount(1);
  expect(await lineOfMarker(page, 2, marker.first())).toBe(3);
  await marker.first().click();
  const card = page.locator('.jp-syncfree-card');
  await expect(card.locator('.jp-syncfree-card-defined')).toHaveText(
    'in helper(), defined in In [2] line 3: return y.sum().item()'
  );
  await expect(card).not.toContainText('ipykernel');
  // The summary under the cell says it too; predicted on CPU, no cost is shown.
  const output = cellAt(page, 2).locator('.jp-syncfree-site-where');
  await expect(output).toHaveText('in helper(), defined in In [2] line 3: return y.sum().item()');
  await runCommand(page, 'syncfree:open-sidebar');
  await expect(page.locator('#jp-syncfree-sidebar .jp-syncfree-sidebar-no-cost')).toHaveText(
    'No cost without a GPU: ranked by count.'
  );
});
