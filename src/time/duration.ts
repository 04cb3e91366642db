import { SagaValidationError } from '../errors.js';

/**
 * A length of time: milliseconds as a number, or an object of parts that are added up
 * (`{ minutes: 1, seconds: 30 }` is 90,000 ms).
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

const UNIT_MS = { days: 86_400_000, hours: 3_600_000, minutes: 60_000, seconds: 1_000, milliseconds: 1 } as const;

/**
 * Converts a {@link Duration} to milliseconds.
 * @throws SagaValidationError `TIMER_DELAY_INVALID` when the result is negative, NaN or infinite.
 */
export function toMilliseconds(duration: Duration, what = 'duration'): number {
  let ms: number;
  if (typeof duration === 'number') {
    ms = duration;
  } else if (duration !== null && typeof duration === 'object') {
    ms = 0;
    for (const [unit, factor] of Object.entries(UNIT_MS)) {
      const part = (duration as Record<string, unknown>)[unit];
      if (part === undefined) continue;
      ms += typeof part === 'number' ? part * factor : Number.NaN;
    }
    const unknown = Object.keys(duration).filter((key) => !(key in UNIT_MS));
    if (unknown.length > 0) ms = Number.NaN;
  } else {
    ms = Number.NaN;
  }
  if (!Number.isFinite(ms) || ms < 0) {
    throw new SagaValidationError(
      'TIMER_DELAY_INVALID',
      `Invalid ${what} ${JSON.stringify(duration) ?? String(duration)}: give a finite, non-negative number of milliseconds or an object of days/hours/minutes/seconds/milliseconds.`,
    );
  }
  return ms;
}
