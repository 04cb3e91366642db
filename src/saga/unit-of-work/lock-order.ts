import { compareCodePoints } from '../../text/code-point-order.js';

/** The positions of `units` sorted by their lock keys (stable for equal keys). */
export function lockOrder(units: readonly { readonly lockKey: readonly string[] }[]): number[] {
  return units.map((_, index) => index).sort((a, b) => compareKeys(units[a]!.lockKey, units[b]!.lockKey) || a - b);
}

/**
 * Compares lock keys part by part in the database's lock order: by code point, as PostgreSQL's `collate "C"` sorts
 * the dispatcher's statements' rows (`lockedInSagaOrder`). By UTF-16 code unit, a saga type with a character above
 * U+FFFF was locked in one order here and in the other there: a deadlock (break15).
 */
function compareKeys(a: readonly string[], b: readonly string[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const order = compareCodePoints(a[i]!, b[i]!);
    if (order !== 0) return order;
  }
  return a.length - b.length;
}
