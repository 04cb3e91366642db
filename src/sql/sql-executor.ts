// The statements' entry points into the ORM; the work is done by the compatibility seam (src/orm/compat.ts).
export { queryRows, queryRowsUnder, runStatement } from '../orm/compat.js';

/** `?, ?, ?` for `count` parameters. */
export function placeholders(count: number): string {
  return Array.from({ length: count }, () => '?').join(', ');
}
