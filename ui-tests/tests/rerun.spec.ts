import { expect, test } from '@jupyterlab/galata';
import { runCode, runCommand } from './utils';

const cell = (steps: number) =>
  ['%%syncfree', 'x = torch.ones(4, device="cuda")', `for _ in range(${steps}):`, '    v = x.sum().item()'].join('\n');

test('the Syncs sidebar shows the change since a cell\'s previous run', async ({ page }) => {
  await page.notebook.createNew('rerun.ipynb');
  await runCode(page, 0, 'import torch\n%load_ext syncfree');
  await page.notebook.addCell('code', '');
  await runCode(page, 1, cell(3));
  await runCommand(page, 'syncfree:open-sidebar');
  const sidebar = page.locator('#jp-syncfree-sidebar');
  // Predicted in this CPU-only kernel, and said so.
  await expect(sidebar.locator('[data-total="syncs"]')).toHaveText('3 predicted syncs');

  // The same cell, now with two more iterations: 5 predicted syncs, +2 against the last run.
  await runCode(page, 1, cell(5));
  await expect(sidebar.locator('[data-total="syncs"]')).toHaveText('5 predicted syncs');
  await expect(sidebar).toContainText('+2 syncs vs previous run');
  await expect(sidebar.locator('.jp-syncfree-sidebar-row .jp-syncfree-sidebar-delta')).toHaveText('+2 syncs');
});
