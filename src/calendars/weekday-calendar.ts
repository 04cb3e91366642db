import { SagaDefinitionError } from '../errors.js';
import type { BusinessCalendar } from './business-calendar.js';
import { DAY_MS, parseHolidays } from './working-hours.js';
import { WorkingTime } from './working-time.js';
import { ZoneOffsets } from './zone-offsets.js';

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
 * It is a {@link WorkingTimeCalendar} in UTC with whole days; for another zone or working hours, use that.
 *
 * Adding a duration takes time proportional to the number of holidays, not to the length of the delay:
 * whole weeks are counted arithmetically. A result after 9999-12-31 is refused at once.
 */
export class WeekdayCalendar implements BusinessCalendar {
  private readonly time: WorkingTime;

  /** @throws SagaDefinitionError `DEFINITION_INVALID` for no business day, a day outside 0 to 6, or a holiday that is no `YYYY-MM-DD` date. */
  constructor(options: WeekdayCalendarOptions = {}) {
    const owner = 'WeekdayCalendar';
    // null (from JavaScript) is no options, as undefined is.
    const { businessDays: days, holidays } = options ?? {};
    const businessDays = new Set(Array.isArray(days) ? days : days === undefined ? [1, 2, 3, 4, 5] : []);
    if (businessDays.size === 0 || [...businessDays].some((d) => !Number.isInteger(d) || d < 0 || d > 6)) {
      throw new SagaDefinitionError(
        'DEFINITION_INVALID',
        'WeekdayCalendar needs at least one business day, each an integer from 0 (Sunday) to 6 (Saturday).',
      );
    }
    const zone = new ZoneOffsets('UTC', owner);
    const week = [0, 1, 2, 3, 4, 5, 6].map((day) => (businessDays.has(day) ? [{ start: 0, end: DAY_MS }] : []));
    this.time = new WorkingTime(zone, week, parseHolidays(owner, holidays ?? [], 'UTC'), owner);
  }

  /** The instant `durationMs` of business time after `from`. */
  addDuration(from: Date, durationMs: number): Date {
    return this.time.addDuration(from, durationMs);
  }

  /** `at` itself when it falls on a business day, otherwise the start of the next one. */
  nextOpen(at: Date): Date {
    return this.time.nextOpen(at);
  }
}
