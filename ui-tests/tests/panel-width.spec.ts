import { expect, test } from '@jupyterlab/galata';
import { runCode, runCommand, setCellSource } from './utils';

const FRAMEWORK = [
  'import torch',
  '',
  'def check(loss):',
  '    if torch.isnan(loss):',
  '        return False',
  '    return True',
  ''
].join('\n');

const SETUP = [
  'import importlib, os, sys, tempfile',
  'import torch',
  'root = os.path.join(tempfile.mkdtemp(), "site-packages")',
  'os.makedirs(os.path.join(root, "pkg"))',
  `open(os.path.join(root, "pkg", "__init__.py"), "w").write(${JSON.stringify(FRAMEWORK)})`,
  'sys.path.insert(0, root)',
  'importlib.invalidate_caches()',
  'import pkg',
  '%load_ext syncfree'
].join('\n');

const CELL = (steps: number) =>
  [
    '%%syncfree',
    // Positive values: the masked line runs in every run (with randn, all 8 negative one run in 256 left it out of
    // the first run, and the re-run showed two "new" rows).
    'x = torch.rand(8, device="cuda") + 0.1',
    `for step in range(${steps}):`,
    '    v = x.sum().item()',
    '    if bool(x.max() > 0):',
    '        y = x[x > 0]',
    '    ok = pkg.check(x.sum())',
    'c = x.cpu()'
  ].join('\n');

/**
 * Issue 39: the Syncs panel at its default width (250 px) of a cell re-run with more syncs
 * ("new" and "+1 sync" chips), a library line and one-off rows, predicted (no GPU).
 */
test('the Syncs panel reads at its default 250 px: whole labels, chips beside or under them, no overlap', async ({
  page
}) => {
  await page.notebook.createNew('width.ipynb');
  await runCode(page, 0, SETUP);
  await page.notebook.addCell('code', '');
  await setCellSource(page, 1, CELL(3));
  await page.notebook.runCell(1, true);
  await setCellSource(page, 1, CELL(4).replace('c = x.cpu()', 'c = x.cpu()\nd = x.tolist()'));
  await page.notebook.runCell(1, true);
  await runCommand(page, 'syncfree:open-sidebar');
  const sidebar = page.locator('#jp-syncfree-sidebar');
  const rows = sidebar.locator('.jp-syncfree-sidebar-row');
  await expect(rows).toHaveCount(6);
  await expect(sidebar.locator('.jp-syncfree-sidebar-library')).toHaveCount(1);
  await expect(sidebar.locator('.jp-syncfree-sidebar-delta', { hasText: 'new' })).toHaveCount(1);
  if (process.env.SYNCFREE_SCREENSHOTS) {
    await sidebar.screenshot({ path: 'panel-250.png' });
  }
  const layout = await sidebar.evaluate(panel => {
    const box = (e: Element) => e.getBoundingClientRect();
    const overlap = (a: DOMRect, b: DOMRect) =>
      a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
    const body = panel.querySelector('.jp-syncfree-sidebar-body')!;
    const problems: string[] = [];
    for (const row of Array.from(panel.querySelectorAll('.jp-syncfree-sidebar-row'))) {
      const label = row.querySelector('.jp-syncfree-sidebar-label')!;
      if (label.scrollWidth > label.clientWidth + 1) {
        problems.push(`label cut: ${label.textContent}`);
      }
      const parts = Array.from(
        row.querySelectorAll(
          '[role="gridcell"], .jp-syncfree-sidebar-label, .jp-syncfree-sidebar-delta, .jp-syncfree-sidebar-rule, .jp-syncfree-sidebar-library'
        )
      );
      for (let i = 0; i < parts.length; i++) {
        for (let j = i + 1; j < parts.length; j++) {
          if (!parts[i].contains(parts[j]) && !parts[j].contains(parts[i]) && overlap(box(parts[i]), box(parts[j]))) {
            problems.push(`overlap: ${parts[i].textContent} / ${parts[j].textContent}`);
          }
        }
      }
    }
    const what = panel.querySelector('.jp-syncfree-sidebar-column-what')!;
    const buttons = Array.from(what.querySelectorAll('button')).map(b => box(b).top);
    return {
      width: box(panel).width,
      problems,
      scrolls: body.scrollWidth > body.clientWidth + 1,
      headerOneLine: buttons.every(top => Math.abs(top - buttons[0]) < 2)
    };
  });
  expect(layout.width).toBeLessThanOrEqual(260);
  expect(layout.problems).toEqual([]);
  expect(layout.scrolls).toBe(false);
  expect(layout.headerOneLine).toBe(true);
});
