import { hasSyncfreeMagic, magicLine, magicPrefix, watchLine } from '../commands/magic';
import { stepToSync } from '../positions';

describe('the %%syncfree line the commands add', () => {
  it('passes only the options that differ from the magic defaults', () => {
    expect(magicLine({ mode: 'warn', measureBlocked: true })).toBe('%%syncfree');
    expect(magicLine({ mode: 'error', measureBlocked: true })).toBe('%%syncfree --mode error');
    expect(magicLine({ mode: 'warn', measureBlocked: false })).toBe('%%syncfree --no-blocked');
  });

  it('gives watch mode the same options', () => {
    expect(watchLine(true, { mode: 'error', measureBlocked: false })).toBe('%syncfree on --mode error --no-blocked');
    expect(watchLine(true, { mode: 'warn', measureBlocked: true })).toBe('%syncfree on');
    expect(watchLine(false, { mode: 'error', measureBlocked: true })).toBe('%syncfree off');
  });

  it('is added once, above the code', () => {
    const options = { mode: 'warn' as const, measureBlocked: true };
    expect(magicPrefix('x = t.item()', options)).toBe('%%syncfree\n');
    expect(magicPrefix('%%syncfree --mode error\nx = t.item()', options)).toBeNull();
    expect(magicPrefix('\n  \n%%syncfree\nx', options)).toBeNull();
    expect(magicPrefix('%%syncfreedom\nx', options)).toBe('%%syncfree\n');
    expect(magicPrefix('%%time\nx', options)).toBe('%%syncfree\n');
  });

  it('recognises the magic only on the first non-blank line', () => {
    expect(hasSyncfreeMagic('x = 1\n%%syncfree')).toBe(false);
    expect(hasSyncfreeMagic('%%syncfree')).toBe(true);
  });
});

describe('stepToSync', () => {
  const marks = [
    { cell: 0, line: 3 },
    { cell: 2, line: 1 },
    { cell: 2, line: 4 }
  ];

  it('moves forward across cells and wraps around', () => {
    expect(stepToSync(marks, { cell: 0, line: 0 }, 1)).toEqual({ cell: 0, line: 3 });
    expect(stepToSync(marks, { cell: 0, line: 3 }, 1)).toEqual({ cell: 2, line: 1 });
    expect(stepToSync(marks, { cell: 1, line: 9 }, 1)).toEqual({ cell: 2, line: 1 });
    expect(stepToSync(marks, { cell: 2, line: 4 }, 1)).toEqual({ cell: 0, line: 3 });
  });

  it('moves backward and wraps around', () => {
    expect(stepToSync(marks, { cell: 2, line: 4 }, -1)).toEqual({ cell: 2, line: 1 });
    expect(stepToSync(marks, { cell: 2, line: 0 }, -1)).toEqual({ cell: 0, line: 3 });
    expect(stepToSync(marks, { cell: 0, line: 1 }, -1)).toEqual({ cell: 2, line: 4 });
  });

  it('finds nothing in a notebook without marks', () => {
    expect(stepToSync([], { cell: 0, line: 0 }, 1)).toBeNull();
  });
});
