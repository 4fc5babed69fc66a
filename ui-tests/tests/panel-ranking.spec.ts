import { IJupyterLabPageFixture, expect, test } from '@jupyterlab/galata';
import type { Locator } from '@playwright/test';
import { runCommand, setCellSource } from './utils';

/*
 * The Syncs panel ranks as `syncfree run`, the card and the json do (issue 21, phases;
 * sites.py rank_key, ported in src/sidebar/cost.ts): recurring syncs first, by their blocked
 * time after the first call; the syncs paid once (setup, a final checkpoint, compilation)
 * after them under a heading of their own; without times (predict mode) by count.
 */

const ROW = '.jp-syncfree-sidebar-row';

/** Run a cell of this text, set through the model (typing it would auto-indent). */
async function runSource(page: IJupyterLabPageFixture, index: number, source: string): Promise<void> {
  await setCellSource(page, index, source);
  await page.notebook.runCell(index, true);
}

/** The panel's list, in order: rows as "line: what", the once heading as "once: totals". */
async function drawn(sidebar: Locator): Promise<string[]> {
  return sidebar
    .locator(`.jp-syncfree-sidebar-list > ${ROW}, .jp-syncfree-sidebar-once`)
    .evaluateAll(nodes =>
      nodes.map(node =>
        node.classList.contains('jp-syncfree-sidebar-once')
          ? `once: ${node.querySelector('.jp-syncfree-sidebar-once-totals')!.textContent}`
          : `${(node as HTMLElement).dataset.line}: ${node.querySelector('.jp-syncfree-sidebar-label')!.textContent}`
      )
    );
}

// A real run in the kernel (no CUDA: predict mode). The module move (line 3) and the checkpoint
// (line 7) run once, 16 syncs each; the `.item()` in the loop (line 6) syncs 3 times, every step.
const PREDICTED_CELL = [
  '%%syncfree',
  'layers = [torch.nn.Linear(4, 4) for _ in range(8)]',
  'model = torch.nn.Sequential(*layers).to("cuda")',
  'x = torch.ones(4, device="cuda")',
  'for step in range(3):',
  '    print(model(x).sum().item())',
  'torch.save(model.state_dict(), "checkpoint.pt")'
].join('\n');

test('predict mode: the recurring sync by count first, the syncs paid once after it under their heading', async ({
  page
}) => {
  await page.notebook.createNew('panel-ranking.ipynb');
  await runSource(page, 0, 'import torch\n%load_ext syncfree');
  await page.notebook.addCell('code', '');
  await runSource(page, 1, PREDICTED_CELL);
  await runCommand(page, 'syncfree:open-sidebar');
  const sidebar = page.locator('#jp-syncfree-sidebar');
  await expect(sidebar.locator('[data-total="syncs"]')).toHaveText('35 predicted syncs');
  // By count, the 16-sync lines would come first; they are paid once, the 3 syncs every step.
  await expect
    .poll(() => drawn(sidebar))
    .toEqual(['6: .item()', 'once: 32 syncs', '3: copy from pageable host memory', '7: copy to the host']);
  await expect(sidebar.locator('.jp-syncfree-sidebar-once-name')).toHaveText('Once (setup, compilation)');
  const rows = sidebar.locator(ROW);
  await expect(rows.nth(1)).toHaveAttribute('title', /once: the line runs once/);
  // No times: no first call apart.
  await expect(sidebar.locator('.jp-syncfree-sidebar-first')).toHaveCount(0);
});

// A measured report, as a GPU kernel writes it: made by the kernel with syncfree's own report
// builder (real source hash, rules from the catalog), saved in a notebook that is then opened.
const MEASURED_CELL = [
  '%%syncfree',
  'layers = [torch.nn.Linear(512, 512) for _ in range(8)]',
  'model = torch.nn.Sequential(*layers).to("cuda")',
  'x = torch.randn(64, 512, device="cuda")',
  'for step in range(100):',
  '    loss = model(x).sum()',
  '    print(loss.item())',
  '    keep = torch.nonzero(x > 3)',
  'torch.save(model.state_dict(), "ck.pt")'
].join('\n');

// JSON.stringify of ASCII text is a valid Python string literal.
const WRITE_MEASURED = [
  'import json',
  'from syncfree.analyze import analyze_source',
  'from syncfree.kinds import kind_label',
  'from syncfree.report import build_report, mime_bundle, validate_report',
  `SOURCE = ${JSON.stringify(MEASURED_CELL)}`,
  'def site(line, kind, rule, count, blocked_ms, first_ms, phase=None):',
  '    entry = {"line": line, "kind": kind, "count": count, "blocked_ms": blocked_ms, "chain": [line],',
  '             "frames": [], "rule": rule, "label": kind_label(kind), "thread": None, "first_ms": first_ms,',
  '             "message": f"{kind_label(kind)} synced {count}x, blocked {blocked_ms} ms"}',
  '    if phase:',
  '        entry["phase"] = phase',
  '    return entry',
  'report = build_report(',
  '    source=SOURCE, mode="warn", cell_id="train", wall_ms=900.0,',
  '    device={"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130"},',
  '    sites=[site(3, "to_device", "SF303", 16, 150.0, 40.0, "once"),  # the module move: 150 ms, once',
  '           site(7, "item", "SF101", 100, 100.99, 100.0),  # 100 ms at the first call, then 0.01 ms',
  '           site(8, "nonzero", "SF602", 100, 100.0, 1.0),  # 1 ms every step',
  '           site(9, "to_host", "SF301", 16, 120.0, 5.0, "once")],  # the checkpoint: 120 ms, once',
  '    findings=analyze_source(SOURCE.split("\\n", 1)[1], first_line=2))',
  'validate_report(report)',
  'cell = {"id": "train", "cell_type": "code", "execution_count": 2, "metadata": {}, "source": SOURCE,',
  '        "outputs": [{"output_type": "display_data", "data": mime_bundle(report), "metadata": {}}]}',
  'imports = {"id": "imports", "cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [],',
  '           "source": "import torch\\n%load_ext syncfree"}',
  'json.dump({"nbformat": 4, "nbformat_minor": 5, "cells": [imports, cell], "metadata": {"kernelspec":',
  '           {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}}},',
  '          open("panel-measured.ipynb", "w"))'
].join('\n');

test('measured: ranked by the time after the first call, the first call apart, the syncs paid once after', async ({
  page,
  tmpPath
}) => {
  await page.notebook.createNew('panel-writer.ipynb');
  await runSource(page, 0, WRITE_MEASURED);
  await page.notebook.close(true);
  await page.notebook.openByPath(`${tmpPath}/panel-measured.ipynb`);
  await page.notebook.activate('panel-measured.ipynb');
  await runCommand(page, 'syncfree:open-sidebar');
  const sidebar = page.locator('#jp-syncfree-sidebar');
  await expect(sidebar.locator('[data-total="syncs"]')).toHaveText('232 syncs');
  await expect(sidebar.locator('[data-total="blocked"]')).toHaveText('471 ms blocked');
  // By total the 150 ms module move would lead and the 1 ms-per-step nonzero come last.
  await expect
    .poll(() => drawn(sidebar))
    .toEqual([
      '8: nonzero',
      '7: .item()',
      'once: 32 syncs · 270 ms blocked',
      '3: copy from pageable host memory',
      '9: copy to the host'
    ]);
  const rows = sidebar.locator(ROW);
  // The warm-up of `.item()`: its first call apart, in the card's words.
  const blocked = rows.nth(1).locator('.jp-syncfree-sidebar-blocked');
  await expect(blocked.locator('.jp-syncfree-sidebar-first')).toHaveText('first 100 ms');
  await expect(blocked).toHaveAttribute('title', /^first sync 100 ms, then 0\.010 ms per sync ×99\./);
  await expect(rows.nth(2).locator('.jp-syncfree-sidebar-first')).toHaveCount(0);

  // Flat, one heading over the syncs paid once; a column the user picks still sorts.
  await sidebar.locator('[data-control="group"]').uncheck();
  await sidebar.locator('[data-sort="location"]').click();
  await expect(sidebar.locator('.jp-syncfree-sidebar-once')).toHaveCount(0);
  await expect(rows.locator('.jp-syncfree-sidebar-where')).toHaveText(['cell 2:3', 'cell 2:7', 'cell 2:8', 'cell 2:9']);
  // Each row paid once says so itself, and nothing is cut off sideways in the narrow panel.
  await expect(rows.locator('.jp-syncfree-sidebar-count')).toHaveText(['×16once', '×100', '×100', '×16once']);
  const cut = await sidebar.evaluate(node =>
    Array.from(node.querySelectorAll<HTMLElement>(`.jp-syncfree-sidebar-row, .jp-syncfree-sidebar-row > *`))
      .filter(e => e.scrollWidth > e.clientWidth + 1)
      .map(e => `${e.className}: ${e.textContent} (${e.scrollWidth} > ${e.clientWidth})`)
  );
  expect(cut).toEqual([]);
  await sidebar.locator('[data-sort="count"]').click();
  await expect
    .poll(() => drawn(sidebar))
    .toEqual([
      '8: nonzero',
      '7: .item()',
      'once: 32 syncs · 270 ms blocked',
      '3: copy from pageable host memory',
      '9: copy to the host'
    ]);
});
