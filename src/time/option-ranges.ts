/**
 * Longest wait a duration option may ask for, ms: 2,147,483,647 (about 24.8 days), the longest timer Node.js
 * keeps (`setTimeout` fires a longer one at once). Bounds `pollIntervalMs`, `leaseMs`, `deliveryTimeoutMs`,
 * `dbRetryMaxMs`, `stopTimeoutMs` and the runtime's retry delays.
 */
export const MAX_WAIT_MS = 2_147_483_647;

/**
 * Longest span of time an option adds to or takes from "now", ms: 100 years (36,525 days). The instant it gives
 * stays one both databases store (a span of 1e300 ms gave an invalid date the database refused). Bounds
 * `backoff.baseMs`, `backoff.maxMs`, `catchUp.maxAgeMs`, `catchUp.backlogAfterMs` and `messageIds.retentionMs`.
 */
export const MAX_SPAN_MS = 36_525 * 86_400_000;

/** Whether `value` is a number from `min` to `max` (NaN, strings and BigInts are not). */
export function isNumberIn(value: unknown, min: number, max: number): value is number {
  return typeof value === 'number' && value >= min && value <= max;
}

/** Whether `value` is an integer from `min` to `max`. */
export function isIntegerIn(value: unknown, min: number, max: number): value is number {
  return isNumberIn(value, min, max) && Number.isInteger(value);
}

/** An option's value for a message: a number as written, anything else by its kind (never quoted text). */
export function shownOption(value: unknown): string {
  if (typeof value === 'number') return String(value);
  if (value === null) return 'null';
  return Array.isArray(value) ? 'an array' : `a ${typeof value}`;
}
