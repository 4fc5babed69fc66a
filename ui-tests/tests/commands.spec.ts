import { expect, test } from '@jupyterlab/galata';
import { cellMarkers, cellSource, runCommand } from './utils';

/* These run a real kernel (ipykernel + CPU torch): no CUDA, so syncs are predicted. */
test.describe('syncfree commands with a kernel', () => {
  test('the toolbar button loads the extension, adds %%syncfree and runs the cell', async ({ page }) => {
    await page.notebook.createNew('check.ipynb');
    await page.notebook.setCell(0, 'code', 'import torch\nx = torch.arange(10.0)\ns = x.sum().item()');
    await page.locator('.jp-NotebookPanel-toolbar [data-command="syncfree:check-cell"]').click();
    await expect.poll(() => cellSource(page, 0)).toBe('%%syncfree\nimport torch\nx = torch.arange(10.0)\ns = x.sum().item()');
    const marker = cellMarkers(page, 0).and(page.locator('[data-line="4"]'));
    await expect(marker).toHaveCount(1, { timeout: 30000 });
    // Checking again leaves the magic line alone.
    await page.locator('.jp-NotebookPanel-toolbar [data-command="syncfree:check-cell"]').click();
    await expect(page.locator('.jp-Notebook .jp-Cell >> nth=0').locator('.jp-InputPrompt')).toHaveText('[2]:', { timeout: 30000 });
    expect((await cellSource(page, 0)).match(/%%syncfree/g)).toHaveLength(1);
  });

  test('says once how to install syncfree when the kernel cannot import it', async ({ page }) => {
    await page.notebook.createNew('missing.ipynb');
    // Makes `import syncfree` raise ModuleNotFoundError in this kernel.
    await page.notebook.setCell(0, 'code', "import sys\nsys.modules['syncfree'] = None");
    await page.notebook.runCell(0, true);
    await page.notebook.addCell('code', 'y = 1');
    await runCommand(page, 'syncfree:check-cell');
    const message = page.locator('.Toastify__toast').filter({ hasText: 'pip install jupyterlab-syncfree' });
    await expect(message).toHaveCount(1);
    expect(await cellSource(page, 1)).toBe('y = 1');
  });

  test('watch mode is toggled in the kernel and shown as toggled', async ({ page }) => {
    await page.notebook.createNew('watch.ipynb');
    await runCommand(page, 'syncfree:open-sidebar');
    const button = page.locator('#jp-syncfree-sidebar [data-command="syncfree:toggle-watch"]');
    await runCommand(page, 'syncfree:toggle-watch');
    await expect(button).toHaveClass(/lm-mod-toggled/);
    await expect(page.locator('.Toastify__toast').filter({ hasText: 'watch mode is on' })).toBeVisible();
    await runCommand(page, 'syncfree:toggle-watch');
    await expect(button).not.toHaveClass(/lm-mod-toggled/);
  });
});
