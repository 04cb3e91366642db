import { SagaValidationError } from '../errors.js';

/**
 * A length of time: milliseconds as a number, or an object of parts that are added up
 * (`{ minutes: 1, seconds: 30 }` is 90,000 ms). An object needs at least one part; only its own
 * properties count.
 */
export type Duration =
  | number
  | {
      readonly days?: number;
      readonly hours?: number;
      readonly minutes?: number;
      readonly seconds?: number;
      readonly milliseconds?: number;
    };

const UNIT_MS: Readonly<Record<string, number>> = { days: 86_400_000, hours: 3_600_000, minutes: 60_000, seconds: 1_000, milliseconds: 1 };

/**
 * Converts a {@link Duration} to milliseconds.
 * @throws SagaValidationError `TIMER_DELAY_INVALID` when the duration is not a number or an object of known
 *   parts (a BigInt, a string, `{}`, an unknown unit), or its total is negative, NaN or infinite. The message
 *   describes the problem without quoting the value.
 */
export function toMilliseconds(duration: Duration, what = 'duration'): number {
  const { ms, problem } = typeof duration === 'number' ? { ms: duration, problem: undefined } : sumOfParts(duration);
  const issue = problem ?? (Number.isNaN(ms) ? 'is NaN' : !Number.isFinite(ms) ? 'is not finite' : ms < 0 ? 'is negative' : undefined);
  if (issue) {
    throw new SagaValidationError(
      'TIMER_DELAY_INVALID',
      `Invalid ${what}: it ${issue}. Give a finite, non-negative number of milliseconds or an object of days/hours/minutes/seconds/milliseconds with at least one part.`,
    );
  }
  return ms;
}

function sumOfParts(duration: unknown): { ms: number; problem?: string } {
  if (typeof duration === 'bigint') return { ms: Number.NaN, problem: 'is a BigInt (use a number)' };
  if (duration === null || typeof duration !== 'object' || Array.isArray(duration)) {
    return { ms: Number.NaN, problem: `is ${duration === null ? 'null' : Array.isArray(duration) ? 'an array' : `a ${typeof duration}`}` };
  }
  // Own keys only: inherited properties are not part of the duration.
  const parts = Object.entries(duration).filter(([, part]) => part !== undefined);
  if (parts.length === 0) return { ms: Number.NaN, problem: 'has no parts (an empty object is not a zero delay)' };
  let ms = 0;
  for (const [unit, part] of parts) {
    const factor = Object.hasOwn(UNIT_MS, unit) ? UNIT_MS[unit] : undefined;
    if (factor === undefined) return { ms: Number.NaN, problem: 'has a part that is not days/hours/minutes/seconds/milliseconds' };
    if (typeof part !== 'number') return { ms: Number.NaN, problem: `has a part '${unit}' that is not a number` };
    ms += part * factor;
  }
  return { ms };
}
