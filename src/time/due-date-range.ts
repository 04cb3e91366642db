/**
 * The range of due dates a timer may have: 1970-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z (UTC).
 *
 * Both databases store every instant in it alike: PostgreSQL `timestamptz` takes four-digit years (node-postgres
 * writes a Date as text in the process's time zone, so a five-digit year is not an option), SQLite stores
 * MikroORM's epoch milliseconds, and a JavaScript Date round-trips all of it. The lower bound is the epoch: a
 * due date before it is as good as "now" for a timer, and excluding it keeps old, odd local-time offsets
 * (seconds-precision LMT) out of the text node-postgres writes.
 */
export const EARLIEST_DUE_AT_MS = 0;
/** Latest due date a timer may have, epoch ms: 9999-12-31T23:59:59.999Z. See {@link EARLIEST_DUE_AT_MS}. */
export const LATEST_DUE_AT_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** Why `ms` (epoch milliseconds) is not a storable due date, or undefined when it is. */
export function dueAtProblem(ms: number): string | undefined {
  if (Number.isNaN(ms)) return 'is not a valid date';
  if (ms < EARLIEST_DUE_AT_MS) return 'is before 1970-01-01T00:00:00.000Z';
  if (ms > LATEST_DUE_AT_MS) return 'is after 9999-12-31T23:59:59.999Z';
  return undefined;
}
