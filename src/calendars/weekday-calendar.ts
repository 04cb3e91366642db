import { SagaDefinitionError } from '../errors.js';
import type { BusinessCalendar } from './business-calendar.js';

const DAY_MS = 86_400_000;

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
 */
export class WeekdayCalendar implements BusinessCalendar {
  private readonly businessDays: ReadonlySet<number>;
  private readonly holidays: ReadonlySet<string>;

  constructor(options: WeekdayCalendarOptions = {}) {
    this.businessDays = new Set(options.businessDays ?? [1, 2, 3, 4, 5]);
    this.holidays = new Set(options.holidays ?? []);
    if (this.businessDays.size === 0 || [...this.businessDays].some((d) => !Number.isInteger(d) || d < 0 || d > 6)) {
      throw new SagaDefinitionError(
        'DEFINITION_INVALID',
        'WeekdayCalendar needs at least one business day, each an integer from 0 (Sunday) to 6 (Saturday).',
      );
    }
  }

  addDuration(from: Date, durationMs: number): Date {
    let cursor = this.nextOpen(from).getTime();
    let remaining = durationMs;
    for (;;) {
      const endOfDay = Math.floor(cursor / DAY_MS) * DAY_MS + DAY_MS;
      if (cursor + remaining < endOfDay) return new Date(cursor + remaining);
      remaining -= endOfDay - cursor;
      cursor = this.nextOpen(new Date(endOfDay)).getTime();
      if (remaining === 0) return new Date(cursor);
    }
  }

  nextOpen(at: Date): Date {
    let cursor = at.getTime();
    for (let i = 0; !this.isOpen(cursor); i++) {
      if (i > 3660) throw new SagaDefinitionError('DEFINITION_INVALID', 'WeekdayCalendar found no business day within ten years.');
      cursor = Math.floor(cursor / DAY_MS) * DAY_MS + DAY_MS;
    }
    return new Date(cursor);
  }

  private isOpen(ms: number): boolean {
    const day = new Date(ms);
    return this.businessDays.has(day.getUTCDay()) && !this.holidays.has(day.toISOString().slice(0, 10));
  }
}
