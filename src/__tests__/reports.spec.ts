import { sha256Hex, sourceHash, sourceHashSoon } from '../hash';
import { parseReport, sameReport } from '../reports';
import { loopReport, report, site } from './fixtures';

const { webcrypto } = jest.requireActual<{ webcrypto: Crypto }>('crypto');

describe('sha256Hex', () => {
  it('matches known digests (the kernel hashes with hashlib.sha256)', () => {
    expect(sha256Hex('')).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    expect(sha256Hex('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    // multi-block, non-ASCII input (UTF-8 encoded); digest from Python's hashlib
    expect(sha256Hex('é'.repeat(100) + '\n%%syncfree')).toBe(
      'f6f7d6c91179981429b926793ef50f3eaf71023d4a4022851940ff2b3b6dcdb4'
    );
  });
});

describe('sourceHashSoon', () => {
  const texts = ['', 'abc', 'é'.repeat(100) + '\n%%syncfree', 'x = 1\n'.repeat(500)];

  it('hashes synchronously where there is no crypto.subtle', () => {
    const saved = Object.getOwnPropertyDescriptor(globalThis, 'crypto');
    Object.defineProperty(globalThis, 'crypto', { value: undefined, configurable: true });
    try {
      for (const text of texts) {
        expect(sourceHashSoon(text)).toBe(sourceHash(text));
      }
    } finally {
      if (saved) {
        Object.defineProperty(globalThis, 'crypto', saved);
      } else {
        delete (globalThis as { crypto?: unknown }).crypto;
      }
    }
  });

  it('gives the same hash through the native digest', async () => {
    const saved = Object.getOwnPropertyDescriptor(globalThis, 'crypto');
    Object.defineProperty(globalThis, 'crypto', { value: webcrypto, configurable: true });
    try {
      for (const text of texts) {
        const soon = sourceHashSoon(text);
        expect(typeof soon).not.toBe('string');
        expect(await soon).toBe(sourceHash(text));
      }
    } finally {
      if (saved) {
        Object.defineProperty(globalThis, 'crypto', saved);
      } else {
        delete (globalThis as { crypto?: unknown }).crypto;
      }
    }
  });
});

describe('parseReport', () => {
  let warn: jest.SpyInstance;
  beforeEach(() => {
    warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
  });
  afterEach(() => warn.mockRestore());

  it('accepts a valid report, as an object or as JSON text', () => {
    const r = report();
    expect(parseReport(r)).toBe(r);
    expect(parseReport(JSON.stringify(r))).toEqual(r);
    expect(warn).not.toHaveBeenCalled();
  });

  it.each([
    ['not an object', 42],
    ['not JSON', '{oops'],
    ['wrong version', { ...report(), version: 2 }],
    ['missing totals', (({ totals, ...rest }) => rest)(report())],
    ['line as a string', report({ sites: [site({ line: '3' as unknown as number })] })],
    ['negative line', report({ sites: [site({ line: -1 })] })],
    ['unknown property', { ...report(), script: '<script>alert(1)</script>' }],
    ['huge string', report({ sites: [site({ message: 'x'.repeat(100000) })] })],
    ['kind with markup', report({ sites: [site({ kind: '<img src=x onerror=alert(1)>' })] })],
    ['bad source hash', report({ source_hash: 'md5:abc' })],
    ['bad rule code', report({ sites: [site({ rule: 'EVIL' })] })],
    ['too many sites', report({ sites: Array.from({ length: 1001 }, () => site()) })]
  ])('rejects a report with %s, with a console warning', (_name, data) => {
    expect(parseReport(data)).toBeNull();
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0][0])).toMatch(/^syncfree: ignored/);
  });
});

describe('sameReport', () => {
  it('is true for equal reports and false at any difference', () => {
    const a = loopReport();
    expect(sameReport(a, a)).toBe(true);
    expect(sameReport(a, loopReport())).toBe(true);
    expect(sameReport(a, loopReport({ sites: [site({ count: 2 })] }))).toBe(false);
    expect(sameReport(a, null)).toBe(false);
    expect(sameReport(null, null)).toBe(true);
  });
});
