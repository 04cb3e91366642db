import { SagaDefinitionError } from '../errors.js';

const MINUTE_MS = 60_000;
export const DAY_MS = 86_400_000;

/** The days of the week, in the order of `Date.getDay()` (0 = Sunday). */
export const WEEKDAYS = ['sunday', 'monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday'] as const;
/** A day of the week, by name. */
export type Weekday = (typeof WEEKDAYS)[number];

/**
 * One day's working hours in local wall time: a list of `'HH:MM-HH:MM'` intervals of the 24-hour clock
 * (`['09:00-12:30', '13:30-17:30']`; `'24:00'` ends the day), or `'all-day'` (the same as `['00:00-24:00']`).
 * An empty list is a closed day.
 */
export type DayHours = 'all-day' | readonly string[];

/** Working hours per day of the week. A day left out is closed. */
export type WeeklyHours = Readonly<Partial<Record<Weekday, DayHours>>>;

/** A working interval of a day, in ms after local midnight: `start` included, `end` excluded. */
export interface DayInterval {
  readonly start: number;
  readonly end: number;
}

const INTERVAL = /^(\d{2}):(\d{2})-(\d{2}):(\d{2})$/;

function fail(owner: string, message: string): never {
  throw new SagaDefinitionError('DEFINITION_INVALID', `${owner}: ${message}`);
}

/** A value from the configuration, shown in an error: short strings as they are, anything else by kind. */
function shown(value: unknown): string {
  if (typeof value === 'string' && value.length <= 40) return `'${value}'`;
  if (value === null) return 'null';
  const kind = Array.isArray(value) ? 'list' : value instanceof Date ? 'Date' : typeof value;
  return `(${/^[aeiou]/.test(kind) ? 'an' : 'a'} ${kind})`;
}

/** Minutes after midnight of `HH:MM`, or undefined when it is not a time of the 24-hour clock (`24:00` allowed). */
function minutesOf(hours: string, minutes: string): number | undefined {
  const h = Number(hours);
  const m = Number(minutes);
  if (m > 59 || h > 24 || (h === 24 && m !== 0)) return undefined;
  return h * 60 + m;
}

/** One day's intervals, checked, sorted and with touching ones joined. */
function parseDay(owner: string, day: Weekday, hours: unknown): DayInterval[] {
  if (hours === 'all-day') return [{ start: 0, end: DAY_MS }];
  if (!Array.isArray(hours)) {
    fail(owner, `hours.${day} is ${shown(hours)}: give 'all-day' or a list of 'HH:MM-HH:MM' intervals ([] or left out: closed).`);
  }
  const intervals: { start: number; end: number; text: string }[] = [];
  hours.forEach((text: unknown, index) => {
    const match = typeof text === 'string' ? INTERVAL.exec(text) : null;
    const start = match ? minutesOf(match[1]!, match[2]!) : undefined;
    const end = match ? minutesOf(match[3]!, match[4]!) : undefined;
    if (start === undefined || end === undefined || start === 24 * 60) {
      fail(
        owner,
        `hours.${day}[${index}] is ${shown(text)}, not an interval 'HH:MM-HH:MM' of the 24-hour clock: write it like '09:00-12:30' ('24:00' ends the day).`,
      );
    }
    if (end <= start) {
      fail(
        owner,
        `hours.${day}[${index}] (${shown(text)}) does not end after it starts: give an end later on the same day, and split hours over midnight into two days ('22:00-24:00' and '00:00-06:00').`,
      );
    }
    intervals.push({ start: start * MINUTE_MS, end: end * MINUTE_MS, text: text as string });
  });
  intervals.sort((a, b) => a.start - b.start);
  const joined: DayInterval[] = [];
  for (let i = 0; i < intervals.length; i++) {
    const interval = intervals[i]!;
    const previous = intervals[i - 1];
    if (previous && interval.start < previous.end) {
      fail(
        owner,
        `hours.${day} has '${previous.text}' and '${interval.text}', which overlap: join them into one interval, or end one before the other starts.`,
      );
    }
    const last = joined.at(-1);
    if (last && last.end === interval.start) joined[joined.length - 1] = { start: last.start, end: interval.end };
    else joined.push({ start: interval.start, end: interval.end });
  }
  return joined;
}

/**
 * The intervals of each day of the week, Sunday first.
 * @throws SagaDefinitionError `DEFINITION_INVALID` naming the day and interval to fix.
 */
export function parseWeeklyHours(owner: string, hours: unknown): DayInterval[][] {
  if (hours === null || typeof hours !== 'object' || Array.isArray(hours)) {
    fail(owner, `'hours' is ${shown(hours)}: give an object of weekdays to working hours, such as { monday: ['09:00-17:00'] }.`);
  }
  for (const key of Object.keys(hours)) {
    if (!(WEEKDAYS as readonly string[]).includes(key)) {
      fail(owner, `'hours' has ${shown(key)}, which is not a day of the week: use ${WEEKDAYS.join(', ')}.`);
    }
  }
  const week = WEEKDAYS.map((day) => {
    const value = (hours as Record<string, unknown>)[day];
    return value === undefined ? [] : parseDay(owner, day, value);
  });
  if (week.every((day) => day.length === 0)) fail(owner, 'it needs working hours on at least one day of the week.');
  return week;
}

/**
 * The day numbers (days since 1970-01-01) of the dates, ascending and without repeats.
 * @throws SagaDefinitionError `DEFINITION_INVALID` when one is not a valid `YYYY-MM-DD` date.
 */
export function parseHolidays(owner: string, holidays: unknown, zone: string): number[] {
  if (holidays === undefined) return [];
  if (!Array.isArray(holidays)) fail(owner, `'holidays' is ${shown(holidays)}: give a list of dates written YYYY-MM-DD.`);
  const days = new Set<number>();
  holidays.forEach((holiday: unknown, index) => {
    const ms = typeof holiday === 'string' && /^\d{4}-\d{2}-\d{2}$/.test(holiday) ? Date.parse(`${holiday}T00:00:00Z`) : Number.NaN;
    if (Number.isNaN(ms) || new Date(ms).toISOString().slice(0, 10) !== holiday) {
      fail(owner, `holidays are dates written YYYY-MM-DD (local dates in ${zone}); holidays[${index}] is ${shown(holiday)}, which is not.`);
    }
    days.add(ms / DAY_MS);
  });
  return [...days].sort((a, b) => a - b);
}

/** The day of the week of a day number, 0 = Sunday (1970-01-01 was a Thursday). */
export function weekdayOf(day: number): number {
  return (((day + 4) % 7) + 7) % 7;
}
