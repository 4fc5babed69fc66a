/** A marked line of a notebook: 0-based cell index and 1-based line. */
export interface ISyncPosition {
  cell: number;
  line: number;
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
