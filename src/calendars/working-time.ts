import { SagaValidationError } from '../errors.js';
import { LATEST_DUE_AT_MS } from '../time/due-date-range.js';
import { DAY_MS, type DayInterval, weekdayOf } from './working-hours.js';
import type { ZoneOffsets } from './zone-offsets.js';

/** The day number of the day after the last a due date can fall on (in UTC; local dates run up to 14 hours ahead). */
const LAST_DAY = Math.floor(LATEST_DUE_AT_MS / DAY_MS) + 1;

/** A working interval as instants: `start` included, `end` excluded. */
interface Span {
  readonly start: number;
  readonly end: number;
}

/**
 * The arithmetic of working time, behind {@link WorkingTimeCalendar} and {@link WeekdayCalendar}: weekly hours of
 * local wall time in a zone, less holidays, walked as real time. Its inputs are checked by the calendar that makes it.
 *
 * The due instant of a delay is the first instant in working time at which that much working time has passed: a
 * delay ending exactly when an interval closes is due when the next one opens, so a due instant always lies in
 * working time. A local time is the first instant whose wall time is that time or later ({@link ZoneOffsets.instantOf}).
 */
export class WorkingTime {
  /** Nominal working time of each day of the week and of the whole week, ms of local wall time. */
  private readonly dayMs: readonly number[];
  private readonly weekMs: number;
  private readonly holidays: ReadonlySet<number>;
  /** Holidays on days with working hours, ascending, and the running sum of their nominal working time. */
  private readonly closedDays: readonly number[];
  private readonly closedMsBefore: readonly number[];

  /**
   * @param week the intervals of each day of the week, Sunday first; at least one day has some.
   * @param holidays day numbers (days since 1970-01-01) of local dates without working time.
   * @param owner the calendar's name, for error messages.
   */
  constructor(
    private readonly zone: ZoneOffsets,
    private readonly week: readonly (readonly DayInterval[])[],
    holidays: readonly number[],
    private readonly owner: string,
  ) {
    this.dayMs = week.map((intervals) => intervals.reduce((sum, { start, end }) => sum + end - start, 0));
    this.weekMs = this.dayMs.reduce((sum, ms) => sum + ms, 0);
    this.holidays = new Set(holidays);
    this.closedDays = [...this.holidays].filter((day) => this.dayMs[weekdayOf(day)]! > 0).sort((a, b) => a - b);
    const closedMsBefore = [0];
    for (const day of this.closedDays) closedMsBefore.push(closedMsBefore.at(-1)! + this.dayMs[weekdayOf(day)]!);
    this.closedMsBefore = closedMsBefore;
  }

  /** See {@link BusinessCalendar.addDuration}. */
  addDuration(from: Date, durationMs: number): Date {
    const start = this.instant(from);
    if (typeof durationMs !== 'number' || !Number.isFinite(durationMs) || durationMs < 0) {
      throw new SagaValidationError(
        'TIMER_DELAY_INVALID',
        `${this.owner}: a duration is a finite, non-negative number of milliseconds; this one is not.`,
      );
    }
    // Working time never passes faster than wall time: past the range already, so refused before counting.
    if (start + durationMs > LATEST_DUE_AT_MS) this.beyondRange();
    return new Date(this.advance(start, durationMs));
  }

  /** See {@link BusinessCalendar.nextOpen}. */
  nextOpen(at: Date): Date {
    return new Date(this.advance(this.instant(at), 0));
  }

  /**
   * Whether `at` lies in working time: in a span of its local date, the day before or the day after (clocks set back
   * over midnight show the next date's first hour before some of this one's). Only those days are read, so an
   * instant whose next opening lies past the due-date range is answered, not refused.
   */
  isOpen(at: Date): boolean {
    const ms = this.instant(at);
    const day = Math.floor(this.zone.wallTime(ms) / DAY_MS);
    for (let near = day - 1; near <= day + 1; near++) {
      if (this.spans(near).some(({ start, end }) => start <= ms && ms < end)) return true;
    }
    return false;
  }

  /**
   * Walks from `from` over working intervals until `durationMs` of them passed: a day at a time, but whole weeks at
   * once while at least two weeks of working time remain.
   */
  private advance(from: number, durationMs: number): number {
    let remaining = durationMs;
    let cursor = from;
    // From the day before: clocks set back over midnight give an instant's local date twice.
    let day = Math.floor(this.zone.wallTime(from) / DAY_MS) - 1;
    for (;;) {
      if (day > LAST_DAY) this.beyondRange();
      if (remaining >= 2 * this.weekMs && cursor <= this.dayStart(day)) {
        const [after, left] = this.skipWeeks(day, remaining);
        if (after > day) {
          day = after;
          remaining = left;
          continue;
        }
      }
      for (const { start, end } of this.spans(day)) {
        if (end <= cursor) continue;
        const opened = Math.max(start, cursor);
        if (remaining < end - opened) {
          // The last local day walked may begin before 9999-12-31 ends in UTC and reach past it.
          if (opened + remaining > LATEST_DUE_AT_MS) this.beyondRange();
          return opened + remaining;
        }
        remaining -= end - opened;
        cursor = end;
      }
      day++;
    }
  }

  /**
   * From the start of `day`, skips whole weeks while leaving at least a week of working time to the day walk. Weeks
   * hold their nominal working time, less their holidays, corrected on the days the clocks change.
   * @returns the day after the skipped weeks and the working time left; `day` itself when no week could be skipped.
   */
  private skipWeeks(day: number, remaining: number): [number, number] {
    let weeks = Math.min(Math.floor(remaining / this.weekMs) - 1, Math.ceil((LAST_DAY + 1 - day) / 7));
    while (weeks > 0) {
      const end = day + 7 * weeks;
      const worked = this.workedDays(day, end);
      if (worked <= remaining) {
        // The due instant lies in a day after the skipped ones.
        if (this.dayStart(end) > LATEST_DUE_AT_MS) this.beyondRange();
        return [end, remaining - worked];
      }
      // Changes of the clocks added more working time than the week of margin: fewer weeks.
      weeks = Math.floor(weeks / 2);
    }
    return [day, remaining];
  }

  /** The working time of the days `from` (included) to `to` (excluded), a whole number of weeks apart. */
  private workedDays(from: number, to: number): number {
    const holidays = this.closedMsBefore[lowerBound(this.closedDays, to)]! - this.closedMsBefore[lowerBound(this.closedDays, from)]!;
    // Only the days around a change of the clocks can hold more or less working time than their hours say.
    const changed = new Set<number>();
    for (const change of this.zone.changesBetween(this.dayStart(from) - DAY_MS, this.dayStart(to) + DAY_MS)) {
      const before = Math.floor(this.zone.wallTime(change.at - 1) / DAY_MS);
      const after = Math.floor((change.at + change.offset) / DAY_MS);
      for (let day = Math.min(before, after) - 1; day <= Math.max(before, after) + 1; day++) {
        if (day >= from && day < to && !this.holidays.has(day)) changed.add(day);
      }
    }
    let correction = 0;
    for (const day of changed) {
      correction += this.spans(day).reduce((sum, { start, end }) => sum + end - start, 0) - this.dayMs[weekdayOf(day)]!;
    }
    return ((to - from) / 7) * this.weekMs - holidays + correction;
  }

  /** The working intervals of a local day as instants, without the empty ones (inside a gap of the clocks). */
  private spans(day: number): Span[] {
    if (this.holidays.has(day)) return [];
    const midnight = day * DAY_MS;
    const spans: Span[] = [];
    for (const interval of this.week[weekdayOf(day)]!) {
      const start = this.zone.instantOf(midnight + interval.start);
      const end = this.zone.instantOf(midnight + interval.end);
      if (end > start) spans.push({ start, end });
    }
    return spans;
  }

  /** The first instant of a local day. */
  private dayStart(day: number): number {
    return this.zone.instantOf(day * DAY_MS);
  }

  private instant(date: Date): number {
    const ms = date instanceof Date ? date.getTime() : Number.NaN;
    if (Number.isNaN(ms)) {
      throw new SagaValidationError('TIMER_DUE_INVALID', `${this.owner}: the instant to count from is not a valid Date.`);
    }
    return ms;
  }

  private beyondRange(): never {
    throw new SagaValidationError(
      'TIMER_DUE_INVALID',
      `${this.owner}: the delay ends after 9999-12-31T23:59:59.999Z, the latest due date: shorten the delay.`,
    );
  }
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
