// The statements' entry points into the ORM (src/orm).
export { queryRows, runStatement } from '../orm/index.js';

/** `?, ?, ?` for `count` parameters. */
export function placeholders(count: number): string {
  return Array.from({ length: count }, () => '?').join(', ');
}
