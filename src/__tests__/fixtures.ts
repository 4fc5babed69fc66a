import { sourceHash } from '../hash';
import type { SyncReport, SyncSite } from '../tokens';

export const CELL = ['%%syncfree', 'x = torch.randn(8, device="cuda")', 's = x.sum().item()', 'print(s)'].join('\n');

export function site(overrides: Partial<SyncSite> = {}): SyncSite {
  return {
    line: 3,
    kind: 'item',
    count: 1,
    blocked_ms: 0.5,
    chain: [3],
    frames: [],
    rule: 'SF101',
    message: '`.item()` synced 1x, blocked 0.5 ms',
    label: '`.item()`',
    ...overrides
  };
}

export function report(overrides: Partial<SyncReport> = {}, text = CELL): SyncReport {
  return {
    version: 1,
    cell_id: 'abc',
    source_hash: sourceHash(text),
    mode: 'warn',
    device: { kind: 'cuda', name: 'NVIDIA H100', torch: '2.11.0' },
    totals: { syncs: 1, sites: 1, blocked_ms: 0.5, wall_ms: 3 },
    sites: [site()],
    findings: [
      {
        rule: 'SF101',
        range: { line: 3, col: 4, end_line: 3, end_col: 18 },
        message: '`.item()` copies the value to the host and waits for the GPU',
        certainty: 'certain',
        fix: null
      }
    ],
    rules: {
      SF101: {
        code: 'SF101',
        title: '.item() on a CUDA tensor',
        category: 'data-dependent control flow',
        dependency: 'true',
        cuda_call: 'cudaMemcpyAsync + cudaStreamSynchronize',
        why: 'The CPU needs the value.',
        fix: 'Keep it on the GPU.',
        example_before: 's += y.sum().item()',
        example_after: 's += y.sum()',
        fix_safety: 'none'
      }
    },
    truncated: { sites: false, findings: false, frames: false },
    ...overrides
  };
}

/** A cell whose `.item()` in a loop has a mechanical rewrite (line 4). */
export const LOOP_CELL = [
  '%%syncfree',
  'total = torch.zeros((), device="cuda")',
  'for step in range(100):',
  '    total += model(x).sum().item()',
  'print(total)'
].join('\n');

export function loopReport(overrides: Partial<SyncReport> = {}, text = LOOP_CELL): SyncReport {
  const base = report({}, text);
  return {
    ...base,
    totals: { syncs: 101, sites: 2, blocked_ms: 42.5, wall_ms: 60 },
    sites: [
      site({
        line: 4,
        chain: [4],
        count: 100,
        blocked_ms: 41.2,
        message: '`.item()` synced 100x, blocked 41.2 ms',
        frames: [{ file: '/usr/lib/python3/site-packages/torch/_tensor.py', line: 1042, name: 'item' }]
      }),
      site({
        line: 5,
        chain: [5],
        kind: 'print',
        count: 1,
        blocked_ms: 1.3,
        rule: null,
        message: 'printing a tensor synced 1x, blocked 1.3 ms',
        label: 'printing a tensor'
      })
    ],
    findings: [
      {
        rule: 'SF101',
        range: { line: 4, col: 13, end_line: 4, end_col: 34 },
        message: '`.item()` in a loop waits for the GPU every iteration',
        certainty: 'certain',
        fix: {
          title: 'Accumulate on the GPU',
          safety: 'review',
          reason: '`total` becomes a tensor: read it once after the loop.',
          edits: [{ range: { line: 4, col: 13, end_line: 4, end_col: 34 }, text: 'model(x).sum().detach()' }]
        }
      }
    ],
    rules: {
      SF101: { ...base.rules.SF101, dependency: 'false', fix_safety: 'review' }
    },
    ...overrides
  };
}
