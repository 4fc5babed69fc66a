import { expect, test } from '@jupyterlab/galata';
import { cellSource, markerOn, runCommand, setCellSource } from './utils';

/*
 * These run a real kernel (ipykernel + CPU torch): no CUDA, so syncs are predicted (for
 * tensors the code puts on "cuda").
 */
test.describe('syncfree commands with a kernel', () => {
  test('the toolbar button loads the extension, adds %%syncfree and runs the cell', async ({ page }) => {
    await page.notebook.createNew('check.ipynb');
    await page.notebook.setCell(0, 'code', 'import torch');
    await page.notebook.runCell(0, true);
    await page.notebook.addCell('code', 'x = torch.arange(10.0, device="cuda")\ns = x.sum().item()');
    // Labeled, not an unlabeled hourglass (the empty state names it).
    await expect(page.locator('.jp-NotebookPanel-toolbar [data-command="syncfree:check-cell"]')).toContainText('Check syncs');
    await page.locator('.jp-NotebookPanel-toolbar [data-command="syncfree:check-cell"]').click();
    await expect.poll(() => cellSource(page, 1)).toBe('%%syncfree\nx = torch.arange(10.0, device="cuda")\ns = x.sum().item()');
    const marker = markerOn(page, 1, 3);
    await expect(marker).toHaveCount(1, { timeout: 30000 });
    // Checking again runs the cell again and leaves the magic line alone.
    await page.notebook.selectCells(1);
    await page.locator('.jp-NotebookPanel-toolbar [data-command="syncfree:check-cell"]').click();
    await expect(page.locator('.jp-Notebook .jp-Cell >> nth=1').locator('.jp-InputPrompt')).toHaveText('[3]:', { timeout: 30000 });
    expect((await cellSource(page, 1)).match(/%%syncfree/g)).toHaveLength(1);
  });

  test('says once how to install syncfree when the kernel cannot import it', async ({ page }) => {
    await page.notebook.createNew('missing.ipynb');
    // Makes `import syncfree` raise ModuleNotFoundError in this kernel, as when it is not installed.
    await setCellSource(
      page,
      0,
      [
        'import sys',
        'class NotInstalled:',
        '    def find_spec(self, name, path=None, target=None):',
        "        if name.split('.')[0] == 'syncfree':",
        '            raise ModuleNotFoundError(f"No module named {name!r}", name=name)',
        'sys.meta_path.insert(0, NotInstalled())'
      ].join('\n')
    );
    await page.notebook.runCell(0, true);
    await page.notebook.addCell('code', 'y = 1');
    await runCommand(page, 'syncfree:check-cell');
    const message = page.locator('.Toastify__toast').filter({ hasText: 'pip install syncfree' });
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

  test('watch mode follows %syncfree on and off run in a cell, both ways', async ({ page }) => {
    await page.notebook.createNew('watch-magic.ipynb');
    await runCommand(page, 'syncfree:open-sidebar');
    const button = page.locator('#jp-syncfree-sidebar [data-command="syncfree:toggle-watch"]');
    await expect(button).not.toHaveClass(/lm-mod-toggled/);
    await page.notebook.setCell(0, 'code', '%load_ext syncfree\n%syncfree on');
    await page.notebook.runCell(0, true);
    await expect(button).toHaveClass(/lm-mod-toggled/);
    await expect(button).toContainText('Watching');
    // The button now turns it off (rather than saying it is on).
    await runCommand(page, 'syncfree:toggle-watch');
    await expect(button).not.toHaveClass(/lm-mod-toggled/);
    await page.notebook.addCell('code', '%syncfree on');
    await page.notebook.runCell(1, true);
    await expect(button).toHaveClass(/lm-mod-toggled/);
    await page.notebook.addCell('code', '%syncfree off');
    await page.notebook.runCell(2, true);
    await expect(button).not.toHaveClass(/lm-mod-toggled/);
    await expect(button).toContainText('Watch');
  });
});
