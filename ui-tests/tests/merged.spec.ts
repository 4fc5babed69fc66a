import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';
import { runCode } from './utils';

/**
 * A distributed job from a notebook: `%syncfree run --nproc-per-node 2` starts two real
 * ranks through torchrun (gloo on CPU: predict mode routes the script's NCCL to it), and
 * the merged report is drawn as a table with a column per rank.
 */

// Written for GPUs; every rank reads an all-reduced value on the host (line 8), rank 0
// alone formats a tensor (line 10): the divergent site.
const JOB = [
  'import torch',
  'import torch.distributed as dist',
  '',
  'dist.init_process_group("nccl")',
  'x = torch.ones(4, device="cuda")',
  'for step in range(3):',
  '    dist.all_reduce(x)',
  '    total = x.sum().item()',
  'if dist.get_rank() == 0:',
  '    print(f"rank 0 says {x.sum():.1f}")',
  'dist.destroy_process_group()',
  ''
].join('\n');

test.describe('the merged report of a distributed job', () => {
  test('a 2-rank job run from a cell shows each rank, the divergent site and the totals; a site opens its line', async ({
    page,
    tmpPath
  }) => {
    test.setTimeout(240000);
    await page.contents.uploadContent(JOB, 'text', `${tmpPath}/job.py`);
    await page.notebook.createNew('ranks.ipynb');
    await runCode(
      page,
      0,
      '%load_ext syncfree\n%syncfree run --standalone --nproc-per-node 2 --rank-report-dir ranks job.py'
    );
    const output = page.locator('.jp-Notebook .jp-Cell').first().locator('.jp-OutputArea');
    // The program's own output, streamed into the cell.
    await expect(output).toContainText('rank 0 says 32.0');
    const merged = output.locator('.jp-syncfree-merged');
    await expect(merged.locator('.jp-syncfree-title')).toHaveText(
      'syncfree · 2 ranks · predicted on the CPU (no CUDA device)'
    );
    await expect(merged.locator('.jp-syncfree-merged-summary')).toContainText(
      '7 syncs on 2 of 2 ranks at 2 sites (predicted)'
    );
    await expect(merged.locator('thead th')).toHaveText(['where', 'what', 'rank 0', 'rank 1', 'total', 'rule']);

    const rows = merged.locator('tbody tr');
    await expect(rows).toHaveCount(2);
    const every = rows.filter({ hasText: 'job.py:8' });
    await expect(every.locator('td')).toHaveText([
      'job.py:8',
      '.item()',
      '×3',
      '×3',
      '×6',
      'SF101 .item() waits for the GPU'
    ]);
    await expect(every).not.toHaveClass(/jp-syncfree-divergent/);
    const rankZeroOnly = rows.filter({ hasText: 'job.py:10' });
    await expect(rankZeroOnly).toHaveClass(/jp-syncfree-divergent/);
    await expect(rankZeroOnly.locator('.jp-syncfree-divergent-mark')).toHaveText('divergent');
    // Line 10 runs once (a module-level `if`): badged, and ranked after the recurring line 8.
    await expect(rankZeroOnly.locator('.jp-syncfree-phase-mark')).toHaveText('once');
    await expect(every.locator('.jp-syncfree-phase-mark')).toHaveCount(0);
    await expect(rows.first()).toContainText('job.py:8');
    await expect(rankZeroOnly.locator('td.jp-syncfree-num')).toHaveText(['×1', '—', '×1']);
    await expect(merged.locator('tfoot th, tfoot td')).toHaveText(['per rank', '×4', '×3', '×7', '']);
    await expect(merged.locator('.jp-syncfree-extremes')).toHaveText('Most: rank 0: 4 syncs · least: rank 1: 3 syncs');

    // The site's file is under the lab's root: its place opens the file at the line.
    const link = rankZeroOnly.locator('button.jp-syncfree-open-file');
    await expect(link).toHaveText('job.py:10');
    await link.click();
    await expect(page.locator('.lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current')).toContainText('job.py');
    // The cursor where the line's code starts (the status bar's line and column).
    await expect(page.locator('#jp-main-statusbar')).toContainText('Ln 10, Col 5');

    // The rank reports were kept: `%syncfree merge` shows the same table again.
    await page.notebook.activate('ranks.ipynb');
    await page.notebook.addCell('code', '%syncfree merge ranks');
    await page.notebook.runCell(1, true);
    const again = page.locator('.jp-Notebook .jp-Cell').nth(1).locator('.jp-syncfree-merged');
    await expect(again.locator('tfoot th, tfoot td')).toHaveText(['per rank', '×4', '×3', '×7', '']);
  });
});

test.describe('interrupting a distributed job', () => {
  // galata's kernel tracking proxies POST /api/kernels/* expecting JSON; an interrupt answers 204 with no body.
  test.use({ kernels: null });

  test("JupyterLab's interrupt stops every rank as Ctrl-C does, and what they made is drawn", async ({
    page,
    tmpPath
  }) => {
    test.setTimeout(240000);
    const waiting = [
      'import time',
      'import torch',
      'import torch.distributed as dist',
      'dist.init_process_group("nccl")',
      'torch.ones(1, device="cuda").sum().item()',
      'print(f"rank {dist.get_rank()} ready", flush=True)',
      'time.sleep(300)',
      ''
    ].join('\n');
    await page.contents.uploadContent(waiting, 'text', `${tmpPath}/waiting.py`);
    await page.notebook.createNew('interrupt.ipynb');
    await page.notebook.setCell(
      0,
      'code',
      '%load_ext syncfree\n%syncfree run --standalone --nproc-per-node 2 waiting.py'
    );
    const run = page.notebook.runCell(0);
    const output = page.locator('.jp-Notebook .jp-Cell').first().locator('.jp-OutputArea');
    // Each rank has synced once it says so: interrupted before its sync, a slow rank had none (the CI's load).
    await expect(output).toContainText('rank 0 ready', { timeout: 120000 });
    await expect(output).toContainText('rank 1 ready', { timeout: 120000 });
    // The notebook's interrupt: SIGINT to the kernel's process group (jupyter_client's local provisioner).
    await page.evaluate(() => (window as any).jupyterapp.commands.execute('notebook:interrupt-kernel'));
    const merged = output.locator('.jp-syncfree-merged');
    // A module-level line: paid once (its "once" badge in the what cell).
    await expect(merged.locator('tbody tr td')).toHaveText(
      ['waiting.py:5', '.item()once', '×1', '×1', '×2', /^SF101/],
      {
        timeout: 60000
      }
    );
    await expect(merged.locator('.jp-syncfree-error')).toHaveText([
      'rank 0 exited with status 130',
      'rank 1 exited with status 130'
    ]);
    await expect(output).toContainText('KeyboardInterrupt');
    await run; // the kernel is idle again
  });
});

test.describe('README screenshot', () => {
  test.skip(!process.env.SYNCFREE_SCREENSHOTS, 'set SYNCFREE_SCREENSHOTS=1 (make screenshots)');

  test("docs/merged-report.png: examples/ddp_train.py's merged report in a notebook", async ({ page, tmpPath }) => {
    test.setTimeout(240000);
    await page.setViewportSize({ width: 1400, height: 900 });
    await page.contents.uploadFile(path.resolve(__dirname, '../../examples/ddp_train.py'), `${tmpPath}/ddp_train.py`);
    await page.notebook.createNew('ddp.ipynb');
    await runCode(page, 0, '%load_ext syncfree\n%syncfree run --standalone --nproc-per-node 2 ddp_train.py --steps 10');
    const cell = page.locator('.jp-Notebook .jp-Cell').first();
    await expect(cell.locator('.jp-syncfree-merged tbody tr')).toHaveCount(3);
    await expect(cell.locator('button.jp-syncfree-open-file')).toHaveCount(3);
    // The table and what follows it, without torchrun's banner above.
    await cell
      .locator('.jp-syncfree-merged')
      .screenshot({ path: path.resolve(__dirname, '../../docs/merged-report.png') });
  });
});
