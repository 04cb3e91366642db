/**
 * Turns "in two days" into a due date. Register calendars on the runtime under a key
 * (`calendars: { berlin: new WeekdayCalendar() }`) and name the key when scheduling a timer;
 * the key is stored on the timer. Without a calendar, delays are wall-clock time.
 */
export interface BusinessCalendar {
  /** The instant `durationMs` of business time after `from`. */
  addDuration(from: Date, durationMs: number): Date;
  /** `at` itself when it falls in business time, otherwise the next instant that does. */
  nextOpen(at: Date): Date;
}
