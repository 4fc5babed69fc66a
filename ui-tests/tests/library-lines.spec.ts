import { expect, test } from '@jupyterlab/galata';
import { markerOn, runCode, runCommand } from './utils';

/*
 * Library lines (issue 21) in a real kernel: a %%syncfree cell calls into an installed
 * package (a tiny framework written to a temporary site-packages folder put on sys.path)
 * whose own lines sync. The kernel has no CUDA, so syncs are predicted. The card and the
 * Syncs panel show the package's file:line under the user's line, with the rule of that
 * library line (a Python condition, SF103), while the user's line keeps the rule of what
 * it does: call into a library (SF700), not a Python condition.
 */
const FRAMEWORK = [
  'import torch',
  '',
  'class Trainer:',
  '    def __init__(self, steps):',
  '        self.steps = steps',
  '',
  '    def train(self, loss_fn):',
  '        for step in range(self.steps):',
  '            loss = loss_fn()',
  '            if torch.isnan(loss) or torch.isinf(loss):',
  '                continue',
  ''
].join('\n');
const CONDITION_LINE = 10;

// The package is written by the kernel itself: JSON.stringify of ASCII text is a valid Python string literal.
const SETUP = [
  'import importlib, os, sys, tempfile',
  'import torch',
  'root = os.path.join(tempfile.mkdtemp(), "site-packages")',
  'os.makedirs(os.path.join(root, "fakeframe"))',
  `open(os.path.join(root, "fakeframe", "__init__.py"), "w").write(${JSON.stringify(FRAMEWORK)})`,
  'sys.path.insert(0, root)',
  'importlib.invalidate_caches()',
  'import fakeframe',
  '%load_ext syncfree'
].join('\n');

const CELL = [
  '%%syncfree',
  'x = torch.ones(3, device="cuda")',
  'fakeframe.Trainer(4).train(lambda: (x * 2).sum())'
].join('\n');
const USER_LINE = 3;
const WHERE = `inside fakeframe/__init__.py:${CONDITION_LINE}`;

test('the card and the Syncs panel show the library line under the user line, with its own rule', async ({ page }) => {
  await page.notebook.createNew('library-lines.ipynb');
  await runCode(page, 0, SETUP);
  await page.notebook.addCell('code', '');
  await runCode(page, 1, CELL);

  // The card of the user's line: the library line under it, with the rule of that line.
  const marker = markerOn(page, 1, USER_LINE);
  await expect(marker).toHaveCount(1);
  await marker.hover();
  const card = page.locator('.jp-syncfree-card');
  await expect(card).toBeVisible();
  await expect(card.locator('.jp-syncfree-card-title')).toHaveText(`Predicted sync at line ${USER_LINE}`);
  const site = card.locator('.jp-syncfree-card-site').first();
  await expect(site.locator('.jp-syncfree-card-count')).toHaveText('×8'); // isnan and isinf, 4 steps
  const library = site.locator('.jp-syncfree-card-library-line');
  await expect(library).toContainText(WHERE);
  await expect(library).toContainText('if torch.isnan(loss) or torch.isinf(loss):');
  await expect(library).toContainText('SF103');
  // Both rules are explained: the library line's (a Python condition) and the user line's (a library call).
  const rules = card.locator('.jp-syncfree-card-rule');
  const condition = rules.filter({ has: page.locator('.jp-syncfree-card-rule-code', { hasText: 'SF103' }) });
  await expect(condition.locator('.jp-syncfree-card-rule-title')).toContainText('Python condition');
  const call = rules.filter({ has: page.locator('.jp-syncfree-card-rule-code', { hasText: 'SF700' }) });
  await expect(call.locator('.jp-syncfree-card-rule-title')).toContainText('library call');
  // The user's line is not called a Python condition: that is the library line's rule.
  await expect(site.locator('.jp-syncfree-card-site-head')).not.toContainText('condition');
  await page.mouse.move(5, 5);
  await expect(card).toHaveCount(0);

  // The Syncs panel: the row of the user's line, the library line under it, the user line's rule.
  await runCommand(page, 'syncfree:open-sidebar');
  const sidebar = page.locator('#jp-syncfree-sidebar');
  await expect(sidebar.locator('[data-total="syncs"]')).toHaveText('8 predicted syncs');
  const row = sidebar.locator('.jp-syncfree-sidebar-row').first();
  await expect(row).toHaveAttribute('data-line', String(USER_LINE));
  const where = row.locator('.jp-syncfree-sidebar-library');
  await expect(where).toHaveText(WHERE);
  await expect(where).toHaveAttribute('title', /SF103/);
  await expect(row.locator('.jp-syncfree-sidebar-rule')).toHaveText('SF700');
});
