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
    message: '.item() synced 1x',
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
