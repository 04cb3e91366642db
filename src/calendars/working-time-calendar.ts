import type { BusinessCalendar } from './business-calendar.js';
import { parseHolidays, parseWeeklyHours, type WeeklyHours } from './working-hours.js';
import { WorkingTime } from './working-time.js';
import { ZoneOffsets } from './zone-offsets.js';

/** Options of {@link WorkingTimeCalendar}. */
export interface WorkingTimeCalendarOptions {
  /** The IANA time zone of the hours and holidays (`'Europe/Berlin'`). Required. */
  readonly timeZone: string;
  /**
   * Working hours per day of the week, in local wall time: `'HH:MM-HH:MM'` intervals of the 24-hour clock
   * (`'24:00'` ends a day), or `'all-day'`. A day left out, or given `[]`, is closed. Default
   * {@link DEFAULT_WORKING_HOURS}: Monday to Friday, all day.
   */
  readonly hours?: WeeklyHours;
  /** Local dates (`YYYY-MM-DD`, in `timeZone`) without working time. Default: none. */
  readonly holidays?: readonly string[];
}

/** The default of {@link WorkingTimeCalendarOptions.hours}: Monday to Friday, all day. */
export const DEFAULT_WORKING_HOURS: WeeklyHours = Object.freeze({
  monday: 'all-day',
  tuesday: 'all-day',
  wednesday: 'all-day',
  thursday: 'all-day',
  friday: 'all-day',
});

/**
 * Working time in the business's own time zone: working hours per day of the week (several intervals a day, or
 * whole days), less holidays. A delay counts working time only, and its due instant always lies in working time:
 * a delay that ends exactly when an interval closes is due when the next one opens.
 *
 * ```ts
 * new WorkingTimeCalendar({
 *   timeZone: 'Europe/Berlin',
 *   hours: { monday: ['09:00-12:30', '13:30-17:30'], ..., saturday: ['09:00-13:00'] },
 *   holidays: ['2026-12-25', '2026-12-26'],
 * });
 * ```
 *
 * Hours become instants through the platform's `Intl` time-zone data. A local time the clocks skip is the first
 * instant after the gap; one they pass twice is its first occurrence. Working time is the real time between those
 * instants, so an interval over a change of the clocks is shorter or longer by the change. Whole weeks are counted
 * arithmetically: a delay of years costs about as much as one of days (docs/calendars.md).
 */
export class WorkingTimeCalendar implements BusinessCalendar {
  /** The time zone, as `Intl` resolved it (`'Europe/Berlin'`). */
  readonly timeZone: string;
  private readonly time: WorkingTime;

  /**
   * @throws SagaDefinitionError `DEFINITION_INVALID` when the time zone is unknown, an interval is malformed,
   *   inverted or overlaps another, no day has working hours, or a holiday is not a `YYYY-MM-DD` date; the
   *   message names the option to fix.
   */
  constructor(options: WorkingTimeCalendarOptions) {
    const owner = 'WorkingTimeCalendar';
    const zone = new ZoneOffsets(options?.timeZone, owner);
    const week = parseWeeklyHours(owner, options.hours ?? DEFAULT_WORKING_HOURS);
    this.timeZone = zone.timeZone;
    this.time = new WorkingTime(zone, week, parseHolidays(owner, options.holidays, zone.timeZone), owner);
  }

  /**
   * The first instant in working time at which `durationMs` of working time has passed since `from`; for 0,
   * `nextOpen(from)`.
   * @throws SagaValidationError `TIMER_DELAY_INVALID` for a negative or non-finite duration; `TIMER_DUE_INVALID`
   *   for an invalid `from`, or a result after 9999-12-31T23:59:59.999Z.
   */
  addDuration(from: Date, durationMs: number): Date {
    return this.time.addDuration(from, durationMs);
  }

  /** `at` itself when it lies in working time, otherwise the instant the next working interval opens. */
  nextOpen(at: Date): Date {
    return this.time.nextOpen(at);
  }

  /** Whether `at` lies in working time: in an interval (its start included, its end not) of a day that is no holiday. */
  isOpen(at: Date): boolean {
    return this.time.isOpen(at);
  }
}
