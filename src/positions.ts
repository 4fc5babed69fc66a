/** A marked line of a notebook: 0-based cell index and 1-based line. */
export interface ISyncPosition {
  cell: number;
  line: number;
  /** The 0-based column of the call on that line, where known. */
  column?: number | null;
}

/**
 * The next (direction 1) or previous (-1) marked line after `from`, in reading order
 * across cells, wrapping around at the end. `marks` must be in reading order.
 */
export function stepToSync(
  marks: readonly ISyncPosition[],
  from: ISyncPosition,
  direction: 1 | -1
): ISyncPosition | null {
  if (marks.length === 0) {
    return null;
  }
  const after = (a: ISyncPosition, b: ISyncPosition) => a.cell > b.cell || (a.cell === b.cell && a.line > b.line);
  if (direction === 1) {
    return marks.find(m => after(m, from)) ?? marks[0];
  }
  for (let i = marks.length - 1; i >= 0; i--) {
    if (after(from, marks[i])) {
      return marks[i];
    }
  }
  return marks[marks.length - 1];
}

/**
 * The column to put the cursor at on a line: `column` (0-based) where it is given and
 * inside the line, else the first character that is not blank (where the code starts).
 */
export function landingColumn(text: string, column: number | null | undefined): number {
  if (column !== null && column !== undefined && column >= 0 && column <= text.length) {
    return column;
  }
  const blank = /^\s*/.exec(text)![0].length;
  return blank < text.length ? blank : 0;
}
