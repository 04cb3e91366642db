import { SagaDefinitionError, SagaValidationError } from '../errors.js';
import { LATEST_DUE_AT_MS } from '../time/due-date-range.js';
import type { BusinessCalendar } from './business-calendar.js';

const DAY_MS = 86_400_000;
const WEEK_MS = 7 * DAY_MS;
// Closed days in a row before nextOpen gives up: ten years of holidays means a misconfigured calendar.
const MAX_CLOSED_DAYS = 3660;

/** Options of {@link WeekdayCalendar}. */
export interface WeekdayCalendarOptions {
  /** Days of the week that are business days, 0 = Sunday. Default: Monday to Friday, `[1, 2, 3, 4, 5]`. */
  readonly businessDays?: readonly number[];
  /** Dates (`YYYY-MM-DD`, in UTC) that are not business days. Default: none. */
  readonly holidays?: readonly string[];
}

/**
 * A calendar in which whole UTC days are either business days or not: a delay only elapses on
 * business days, and a due date on a closed day moves to the start of the next business day.
 *
 * Adding a duration takes time proportional to the number of holidays, not to the length of the delay:
 * whole weeks are counted arithmetically. A result after 9999-12-31 is refused at once.
 */
export class WeekdayCalendar implements BusinessCalendar {
  private readonly businessDays: ReadonlySet<number>;
  private readonly holidays: ReadonlySet<string>;
  /** Day numbers (days since the epoch) of the holidays that fall on business days, ascending. */
  private readonly closedBusinessDays: readonly number[];
  private readonly openMsPerWeek: number;

  constructor(options: WeekdayCalendarOptions = {}) {
    this.businessDays = new Set(options.businessDays ?? [1, 2, 3, 4, 5]);
    this.holidays = new Set(options.holidays ?? []);
    if (this.businessDays.size === 0 || [...this.businessDays].some((d) => !Number.isInteger(d) || d < 0 || d > 6)) {
      throw new SagaDefinitionError(
        'DEFINITION_INVALID',
        'WeekdayCalendar needs at least one business day, each an integer from 0 (Sunday) to 6 (Saturday).',
      );
    }
    const days: number[] = [];
    for (const holiday of this.holidays) {
      const ms = typeof holiday === 'string' && /^\d{4}-\d{2}-\d{2}$/.test(holiday) ? Date.parse(`${holiday}T00:00:00Z`) : Number.NaN;
      if (Number.isNaN(ms) || new Date(ms).toISOString().slice(0, 10) !== holiday) {
        throw new SagaDefinitionError('DEFINITION_INVALID', 'WeekdayCalendar holidays are dates written YYYY-MM-DD; one is not.');
      }
      if (this.businessDays.has(new Date(ms).getUTCDay())) days.push(ms / DAY_MS);
    }
    this.closedBusinessDays = days.sort((a, b) => a - b);
    this.openMsPerWeek = this.businessDays.size * DAY_MS;
  }

  addDuration(from: Date, durationMs: number): Date {
    let cursor = this.nextOpen(from).getTime();
    let remaining = durationMs;
    for (;;) {
      const endOfDay = startOfDay(cursor) + DAY_MS;
      if (cursor + remaining < endOfDay) return new Date(cursor + remaining);
      remaining -= endOfDay - cursor;
      cursor = this.nextOpen(new Date(endOfDay)).getTime();
      if (remaining === 0) return new Date(cursor);
      [cursor, remaining] = this.skipWeeks(cursor, remaining);
      cursor = this.nextOpen(new Date(cursor)).getTime();
    }
  }

  nextOpen(at: Date): Date {
    let cursor = at.getTime();
    for (let i = 0; !this.isOpen(cursor); i++) {
      if (i > MAX_CLOSED_DAYS)
        throw new SagaDefinitionError('DEFINITION_INVALID', 'WeekdayCalendar found no business day within ten years.');
      cursor = startOfDay(cursor) + DAY_MS;
    }
    return new Date(cursor);
  }

  /**
   * From `cursor` (the start of a day), skips whole weeks while more than two weeks of business time remain:
   * a week holds `openMsPerWeek`, less a day per holiday on a business day within it. Leaves at least one week
   * to the day-by-day walk, which keeps its exact handling of day boundaries.
   */
  private skipWeeks(cursor: number, remaining: number): [number, number] {
    while (remaining >= 2 * this.openMsPerWeek) {
      const weeks = Math.floor(remaining / this.openMsPerWeek) - 1;
      const end = cursor + weeks * WEEK_MS;
      // Business time never runs faster than wall time: past the range already, so refuse before counting.
      if (end > LATEST_DUE_AT_MS) {
        throw new SagaValidationError(
          'TIMER_DUE_INVALID',
          'WeekdayCalendar: the delay ends after 9999-12-31T23:59:59.999Z, the latest due date.',
        );
      }
      const holidays = this.holidaysBetween(cursor / DAY_MS, end / DAY_MS);
      remaining -= weeks * this.openMsPerWeek - holidays * DAY_MS;
      cursor = end;
    }
    return [cursor, remaining];
  }

  /** How many holidays on business days fall on days `from` (inclusive) to `to` (exclusive). */
  private holidaysBetween(from: number, to: number): number {
    return lowerBound(this.closedBusinessDays, to) - lowerBound(this.closedBusinessDays, from);
  }

  private isOpen(ms: number): boolean {
    const day = new Date(ms);
    return this.businessDays.has(day.getUTCDay()) && !this.holidays.has(day.toISOString().slice(0, 10));
  }
}

function startOfDay(ms: number): number {
  return Math.floor(ms / DAY_MS) * DAY_MS;
}

/** Index of the first item of the ascending `items` that is >= `value`. */
function lowerBound(items: readonly number[], value: number): number {
  let low = 0;
  let high = items.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (items[middle]! < value) low = middle + 1;
    else high = middle;
  }
  return low;
}
