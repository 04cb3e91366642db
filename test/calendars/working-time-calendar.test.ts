// WorkingTimeCalendar without a database: working hours, lunch breaks, weekends and holidays in the business's own
// time zone, both changes of the clocks in Europe/Berlin and America/New_York, Lord Howe's half-hour changes and the
// day Apia skipped (expected instants worked out by hand, with their offsets), delays of years against a slow
// reference walk, the end of the due-date range, and the configuration it refuses.
import { describe, expect, it } from 'vitest';
import { SagaDefinitionError, WeekdayCalendar, type WeeklyHours, WorkingTimeCalendar } from '../../src/index.js';
import { ReferenceWalker } from './reference-walker.js';

const HOUR = 3_600_000;
const MINUTE = 60_000;
const WEEKDAYS = ['monday', 'tuesday', 'wednesday', 'thursday', 'friday'] as const;

/** Mon-Fri 09:00-12:30 and 13:30-17:30 (7 h), Sat 09:00-13:00, Sun closed. */
const OFFICE: WeeklyHours = {
  ...Object.fromEntries(WEEKDAYS.map((day) => [day, ['09:00-12:30', '13:30-17:30']])),
  saturday: ['09:00-13:00'],
};
const EVERY_DAY: WeeklyHours = Object.fromEntries(
  ['sunday', 'monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday'].map((day) => [day, 'all-day']),
);

/** `actual` as the instant `expected` (an ISO string with its offset) names. */
function expectInstant(actual: Date, expected: string): void {
  expect(actual.toISOString()).toBe(new Date(expected).toISOString());
}

describe('WorkingTimeCalendar: working hours', () => {
  const office = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: OFFICE });

  it('counts a delay within a working interval as wall time', () => {
    expectInstant(office.addDuration(new Date('2026-01-13T10:00:00+01:00'), HOUR), '2026-01-13T11:00:00+01:00');
  });

  it('skips the lunch break', () => {
    // 30 minutes before lunch, 30 after it.
    expectInstant(office.addDuration(new Date('2026-01-13T12:00:00+01:00'), HOUR), '2026-01-13T14:00:00+01:00');
  });

  it('starts a delay begun inside the lunch break when work resumes', () => {
    expectInstant(office.addDuration(new Date('2026-01-13T12:45:00+01:00'), HOUR), '2026-01-13T14:30:00+01:00');
    expectInstant(office.nextOpen(new Date('2026-01-13T12:45:00+01:00')), '2026-01-13T13:30:00+01:00');
  });

  it('from Friday evening: Saturday morning, then Monday', () => {
    // Friday 2026-01-16 19:00 is after hours; Saturday works 09:00-13:00.
    expectInstant(office.addDuration(new Date('2026-01-16T19:00:00+01:00'), 2 * HOUR), '2026-01-17T11:00:00+01:00');
    // 4 hours on Saturday, the fifth on Monday morning.
    expectInstant(office.addDuration(new Date('2026-01-16T19:00:00+01:00'), 5 * HOUR), '2026-01-19T10:00:00+01:00');
  });

  it('from Saturday: the rest of Saturday, Sunday closed, then Monday', () => {
    expectInstant(office.addDuration(new Date('2026-01-17T12:00:00+01:00'), 2 * HOUR), '2026-01-19T10:00:00+01:00');
    // After Saturday's hours.
    expectInstant(office.addDuration(new Date('2026-01-17T14:00:00+01:00'), 30 * MINUTE), '2026-01-19T09:30:00+01:00');
  });

  it('skips holidays, given as local dates', () => {
    const withHoliday = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: OFFICE, holidays: ['2026-01-19'] });
    expectInstant(withHoliday.addDuration(new Date('2026-01-17T12:00:00+01:00'), 2 * HOUR), '2026-01-20T10:00:00+01:00');
    // A holiday is the local date: 2026-01-19T00:30+01:00 is still 2026-01-18 in UTC.
    expectInstant(withHoliday.nextOpen(new Date('2026-01-18T23:30:00Z')), '2026-01-20T09:00:00+01:00');
  });

  it('a delay that ends exactly at closing is due when work resumes', () => {
    expectInstant(office.addDuration(new Date('2026-01-13T16:30:00+01:00'), HOUR), '2026-01-14T09:00:00+01:00');
    expectInstant(office.addDuration(new Date('2026-01-13T12:00:00+01:00'), 30 * MINUTE), '2026-01-13T13:30:00+01:00');
    // Saturday's close is followed by Monday's opening.
    expect(office.isOpen(new Date('2026-01-17T13:00:00+01:00'))).toBe(false);
    expectInstant(office.nextOpen(new Date('2026-01-17T13:00:00+01:00')), '2026-01-19T09:00:00+01:00');
  });

  it('nextOpen keeps an instant in working time, and a zero delay is nextOpen', () => {
    expectInstant(office.nextOpen(new Date('2026-01-13T09:00:00+01:00')), '2026-01-13T09:00:00+01:00');
    expectInstant(office.addDuration(new Date('2026-01-13T10:15:00+01:00'), 0), '2026-01-13T10:15:00+01:00');
    expectInstant(office.addDuration(new Date('2026-01-13T08:15:00+01:00'), 0), '2026-01-13T09:00:00+01:00');
  });

  it('whole days by default: "two working days" from a Friday afternoon is Tuesday afternoon', () => {
    const days = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin' });
    expectInstant(days.addDuration(new Date('2026-01-16T15:00:00+01:00'), 48 * HOUR), '2026-01-20T15:00:00+01:00');
    // Midnight is Berlin's: Friday 23:30 UTC is already Saturday there.
    expectInstant(days.nextOpen(new Date('2026-01-16T23:30:00Z')), '2026-01-19T00:00:00+01:00');
  });

  it('"respond within 4 working hours" from Friday 15:00 is due Saturday 10:30', () => {
    // 2.5 hours on Friday, 1.5 on Saturday morning.
    expectInstant(office.addDuration(new Date('2026-01-16T15:00:00+01:00'), 4 * HOUR), '2026-01-17T10:30:00+01:00');
    // From Friday evening, the fourth hour ends at Saturday's closing: due when Monday opens (docs/calendars.md).
    expectInstant(office.addDuration(new Date('2026-01-16T19:00:00+01:00'), 4 * HOUR), '2026-01-19T09:00:00+01:00');
  });
});

describe('WorkingTimeCalendar: changes of the clocks', () => {
  describe('Europe/Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST', () => {
    it('an office week over the change: Monday opens at 09:00 summer time', () => {
      const office = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: OFFICE });
      // Friday 1.5 h, Saturday 4 h, Monday the last 30 minutes.
      expectInstant(office.addDuration(new Date('2026-03-27T16:00:00+01:00'), 6 * HOUR), '2026-03-30T09:30:00+02:00');
    });

    it('round the clock: six working hours are six real hours over the skipped hour', () => {
      const always = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: EVERY_DAY });
      expectInstant(always.addDuration(new Date('2026-03-28T22:00:00+01:00'), 6 * HOUR), '2026-03-29T05:00:00+02:00');
      // The day of the change has 23 hours: a day of working time from its midnight ends at the next midnight plus an hour.
      expectInstant(always.addDuration(new Date('2026-03-29T00:00:00+01:00'), 24 * HOUR), '2026-03-30T01:00:00+02:00');
    });

    it('a night shift 01:00-04:00 over the gap holds two real hours', () => {
      const night = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: { sunday: ['01:00-04:00'] } });
      expectInstant(night.nextOpen(new Date('2026-03-28T12:00:00+01:00')), '2026-03-29T01:00:00+01:00');
      expectInstant(night.addDuration(new Date('2026-03-29T01:00:00+01:00'), 2 * HOUR - 1), '2026-03-29T03:59:59.999+02:00');
      // Two hours used up that night: the rest is due the next Sunday.
      expectInstant(night.addDuration(new Date('2026-03-29T01:00:00+01:00'), 2.5 * HOUR), '2026-04-05T01:30:00+02:00');
    });

    it('an interval starting in the gap opens at the first instant after it', () => {
      const night = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: { sunday: ['02:30-05:00'] } });
      expectInstant(night.nextOpen(new Date('2026-03-29T00:00:00+01:00')), '2026-03-29T03:00:00+02:00');
      expectInstant(night.addDuration(new Date('2026-03-29T00:00:00+01:00'), HOUR), '2026-03-29T04:00:00+02:00');
      // 03:00 to 05:00 summer time is two hours; the third is the next Sunday's.
      expectInstant(night.addDuration(new Date('2026-03-29T00:00:00+01:00'), 3 * HOUR), '2026-04-05T03:30:00+02:00');
    });
  });

  describe('Europe/Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET', () => {
    it('an office week over the change: Monday opens at 09:00 winter time', () => {
      const office = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: OFFICE });
      expectInstant(office.addDuration(new Date('2026-10-23T16:00:00+02:00'), 6 * HOUR), '2026-10-26T09:30:00+01:00');
    });

    it('round the clock: six working hours are six real hours over the repeated hour', () => {
      const always = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: EVERY_DAY });
      expectInstant(always.addDuration(new Date('2026-10-24T22:00:00+02:00'), 6 * HOUR), '2026-10-25T03:00:00+01:00');
      // The day of the change has 25 hours.
      expectInstant(always.addDuration(new Date('2026-10-25T00:00:00+02:00'), 24 * HOUR), '2026-10-25T23:00:00+01:00');
    });

    it('a night shift 01:00-04:00 over the repeated hour holds four real hours', () => {
      const night = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: { sunday: ['01:00-04:00'] } });
      expectInstant(night.addDuration(new Date('2026-10-25T01:00:00+02:00'), 3.5 * HOUR), '2026-10-25T03:30:00+01:00');
      expectInstant(night.addDuration(new Date('2026-10-25T01:00:00+02:00'), 4 * HOUR), '2026-11-01T01:00:00+01:00');
    });

    it('an interval starting in the repeated hour opens at its first occurrence', () => {
      const night = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: { sunday: ['02:30-05:00'] } });
      expectInstant(night.nextOpen(new Date('2026-10-25T00:00:00+02:00')), '2026-10-25T02:30:00+02:00');
      // 02:30 summer time to 05:00 winter time is three and a half hours.
      expectInstant(night.addDuration(new Date('2026-10-25T00:00:00+02:00'), 3 * HOUR), '2026-10-25T04:30:00+01:00');
      // The second 02:45 (winter time) lies in the interval too.
      expect(night.isOpen(new Date('2026-10-25T02:45:00+01:00'))).toBe(true);
    });
  });

  describe('America/New_York, 2026-03-08: 02:00 EST becomes 03:00 EDT', () => {
    const office = new WorkingTimeCalendar({
      timeZone: 'America/New_York',
      hours: Object.fromEntries(WEEKDAYS.map((d) => [d, ['09:00-17:00']])),
    });

    it('an office week over the change', () => {
      expectInstant(office.addDuration(new Date('2026-03-06T16:00:00-05:00'), 2 * HOUR), '2026-03-09T10:00:00-04:00');
    });

    it('round the clock over the skipped hour', () => {
      const always = new WorkingTimeCalendar({ timeZone: 'America/New_York', hours: EVERY_DAY });
      expectInstant(always.addDuration(new Date('2026-03-07T23:00:00-05:00'), 4 * HOUR), '2026-03-08T04:00:00-04:00');
    });

    it('an interval starting in the gap opens at 03:00 EDT', () => {
      const night = new WorkingTimeCalendar({ timeZone: 'America/New_York', hours: { sunday: ['02:30-06:00'] } });
      expectInstant(night.nextOpen(new Date('2026-03-08T00:00:00-05:00')), '2026-03-08T03:00:00-04:00');
      // 03:00 to 06:00 EDT holds three hours.
      expectInstant(night.addDuration(new Date('2026-03-08T00:00:00-05:00'), 3 * HOUR), '2026-03-15T02:30:00-04:00');
    });
  });

  describe('America/New_York, 2026-11-01: 02:00 EDT becomes 01:00 EST', () => {
    it('an office week over the change', () => {
      const office = new WorkingTimeCalendar({
        timeZone: 'America/New_York',
        hours: Object.fromEntries(WEEKDAYS.map((d) => [d, ['09:00-17:00']])),
      });
      expectInstant(office.addDuration(new Date('2026-10-30T16:00:00-04:00'), 2 * HOUR), '2026-11-02T10:00:00-05:00');
    });

    it('round the clock over the repeated hour', () => {
      const always = new WorkingTimeCalendar({ timeZone: 'America/New_York', hours: EVERY_DAY });
      expectInstant(always.addDuration(new Date('2026-10-31T23:00:00-04:00'), 4 * HOUR), '2026-11-01T02:00:00-05:00');
    });

    it('an interval starting in the repeated hour opens at its first occurrence', () => {
      const night = new WorkingTimeCalendar({ timeZone: 'America/New_York', hours: { sunday: ['01:30-03:00'] } });
      expectInstant(night.nextOpen(new Date('2026-11-01T00:00:00-04:00')), '2026-11-01T01:30:00-04:00');
      // 01:30 EDT to 03:00 EST holds two and a half hours.
      expectInstant(night.addDuration(new Date('2026-11-01T00:00:00-04:00'), 2 * HOUR), '2026-11-01T02:30:00-05:00');
      expectInstant(night.addDuration(new Date('2026-11-01T00:00:00-04:00'), 2.5 * HOUR), '2026-11-08T01:30:00-05:00');
    });
  });
});

describe('WorkingTimeCalendar: changes by half an hour, and a day that never was', () => {
  describe('Australia/Lord_Howe: +10:30 and +11:00, the clocks changing at 02:00 by half an hour', () => {
    // Sundays 01:30-03:00 (given as two touching intervals): 90 minutes on the clock face.
    const night = new WorkingTimeCalendar({ timeZone: 'Australia/Lord_Howe', hours: { sunday: ['02:00-03:00', '01:30-02:00'] } });

    it('2026-10-04, 02:00 becomes 02:30: the interval holds an hour', () => {
      expectInstant(night.nextOpen(new Date('2026-10-03T12:00:00Z')), '2026-10-04T01:30:00+10:30');
      expectInstant(night.addDuration(new Date('2026-10-03T12:00:00Z'), 30 * MINUTE), '2026-10-04T02:30:00+11:00');
      expectInstant(night.addDuration(new Date('2026-10-03T12:00:00Z'), HOUR - 1), '2026-10-04T02:59:59.999+11:00');
      // The hour is used up: the rest is due the next Sunday.
      expectInstant(night.addDuration(new Date('2026-10-03T12:00:00Z'), 90 * MINUTE), '2026-10-11T02:00:00+11:00');
    });

    it('2026-04-05, 02:00 becomes 01:30: the interval holds two hours', () => {
      expectInstant(night.nextOpen(new Date('2026-04-04T12:00:00Z')), '2026-04-05T01:30:00+11:00');
      // The second 01:45 (+10:30) lies in the interval too.
      expect(night.isOpen(new Date('2026-04-05T01:45:00+10:30'))).toBe(true);
      expectInstant(night.addDuration(new Date('2026-04-04T12:00:00Z'), 90 * MINUTE), '2026-04-05T02:30:00+10:30');
      expectInstant(night.addDuration(new Date('2026-04-04T12:00:00Z'), 2 * HOUR), '2026-04-12T01:30:00+10:30');
    });
  });

  describe('Pacific/Apia: Thursday 2011-12-29 was followed by Saturday 2011-12-31', () => {
    const weekdays = { monday: 'all-day', tuesday: 'all-day', wednesday: 'all-day', thursday: 'all-day', friday: 'all-day' } as const;

    it('the Friday that never was holds no working time', () => {
      const days = new WorkingTimeCalendar({ timeZone: 'Pacific/Apia', hours: weekdays });
      // Two hours on Thursday (-10:00), then Monday (+14:00).
      expectInstant(days.addDuration(new Date('2011-12-29T22:00:00-10:00'), 3 * HOUR), '2012-01-02T01:00:00+14:00');
      const fridays = new WorkingTimeCalendar({ timeZone: 'Pacific/Apia', hours: { friday: ['09:00-17:00'] } });
      expectInstant(fridays.nextOpen(new Date('2011-12-29T12:00:00-10:00')), '2012-01-06T09:00:00+14:00');
    });

    it('a holiday on that date is accepted and changes nothing', () => {
      const days = new WorkingTimeCalendar({ timeZone: 'Pacific/Apia', hours: weekdays, holidays: ['2011-12-30'] });
      expectInstant(days.addDuration(new Date('2011-12-29T22:00:00-10:00'), 3 * HOUR), '2012-01-02T01:00:00+14:00');
    });
  });
});

describe('WorkingTimeCalendar: delays of years', () => {
  // Boundaries, changes of the clocks and offsets on whole half hours: the reference walks half hours.
  const cases = [
    { name: 'an office in Berlin with holidays', timeZone: 'Europe/Berlin', hours: OFFICE, perWeek: 39 * HOUR },
    // Night work on Sundays meets every change of the clocks: the weeks skipped carry the corrections.
    {
      name: 'a night shift in New York',
      timeZone: 'America/New_York',
      hours: { sunday: ['00:00-06:00'], wednesday: ['22:00-24:00'] },
      perWeek: 8 * HOUR,
    },
    { name: 'round the clock in Berlin', timeZone: 'Europe/Berlin', hours: EVERY_DAY, perWeek: 168 * HOUR },
  ];
  const holidays = ['2026-12-24', '2026-12-25', '2027-01-01', '2027-04-02', '2028-03-26', '2028-10-29', '2028-12-25', '2029-11-04'];

  it.each(cases)('$name: three years of working weeks agree with a walk of every half hour', ({ timeZone, hours, perWeek }) => {
    const calendar = new WorkingTimeCalendar({ timeZone, hours, holidays });
    const reference = new ReferenceWalker({ timeZone, hours, holidays, cellMs: 30 * MINUTE });
    // Spans of weeks with both changes of the clocks of a year, and with one only (20 weeks from January or June).
    for (const from of [new Date('2026-01-09T16:10:00+01:00'), new Date('2026-06-12T08:40:00+02:00')]) {
      for (const durationMs of [perWeek * 150 + 17 * MINUTE, perWeek * 20 + 5 * MINUTE]) {
        const started = performance.now();
        const due = calendar.addDuration(from, durationMs);
        const took = performance.now() - started;
        expect(due.toISOString()).toBe(reference.addDuration(from, durationMs).toISOString());
        expect(took).toBeLessThan(200);
      }
    }
  });

  it('a delay of centuries is fast, in working time, and splits into parts that add up', () => {
    const calendar = new WorkingTimeCalendar({
      timeZone: 'America/New_York',
      hours: { sunday: ['00:00-06:00'], monday: ['09:00-17:00'] },
      holidays,
    });
    const from = new Date('2026-01-09T16:10:00-05:00');
    const centuries = 300 * 52 * 14 * HOUR;
    const started = performance.now();
    const due = calendar.addDuration(from, centuries);
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(due.getUTCFullYear()).toBeGreaterThan(2300);
    expect(calendar.isOpen(due)).toBe(true);
    // Counted in three parts (each with its own weeks skipped and days walked), it is the same instant.
    const third = Math.floor(centuries / 3);
    const inParts = calendar.addDuration(calendar.addDuration(calendar.addDuration(from, third), third), centuries - 2 * third);
    expect(inParts.toISOString()).toBe(due.toISOString());
    // A second call reads the offsets it already found: arithmetic only.
    const again = performance.now();
    calendar.addDuration(from, centuries);
    expect(performance.now() - again).toBeLessThan(100);
  });

  it('a delay past 9999-12-31 is refused at once, however large', () => {
    const calendar = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: OFFICE });
    for (const durationMs of [1e20, 7_900 * 365 * 24 * HOUR]) {
      const started = performance.now();
      expect(() => calendar.addDuration(new Date('2026-01-09T16:00:00Z'), durationMs)).toThrow(
        expect.objectContaining({ code: 'TIMER_DUE_INVALID', message: expect.stringMatching(/after 9999-12-31/) }),
      );
      expect(performance.now() - started).toBeLessThan(1_000);
    }
  });
});

describe('WorkingTimeCalendar: the end of the due-date range', () => {
  // Mondays only: 9999-12-27 is the last Monday of the range; the next opens in the year 10000.
  const mondays = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: { monday: ['09:00-17:00'] } });

  it('isOpen answers for an instant whose next opening lies after 9999-12-31', () => {
    expect(mondays.isOpen(new Date('9999-12-28T10:00:00+01:00'))).toBe(false);
    expect(mondays.isOpen(new Date('9999-12-31T23:59:59.999Z'))).toBe(false);
    expect(mondays.isOpen(new Date('9999-12-27T10:00:00+01:00'))).toBe(true);
  });

  it('a result in the year 10000 is refused, also when the start and the delay are in range', () => {
    // 9999-12-31 is a Friday, 10000-01-01 a Saturday: an hour of work on each, in UTC.
    const lastDays = new WorkingTimeCalendar({ timeZone: 'UTC', hours: { friday: ['00:00-01:00'], saturday: ['00:00-01:00'] } });
    expectInstant(lastDays.addDuration(new Date('9999-12-31T00:30:00Z'), 30 * MINUTE - 1), '9999-12-31T00:59:59.999Z');
    for (const due of [
      () => lastDays.addDuration(new Date('9999-12-31T00:30:00Z'), HOUR),
      () => lastDays.addDuration(new Date('9999-12-31T02:00:00Z'), 1),
      () => lastDays.nextOpen(new Date('9999-12-31T02:00:00Z')),
    ]) {
      expect(due).toThrow(expect.objectContaining({ code: 'TIMER_DUE_INVALID', message: expect.stringMatching(/after 9999-12-31/) }));
    }
    expect(lastDays.isOpen(new Date('9999-12-31T02:00:00Z'))).toBe(false);
  });

  it('nextOpen and addDuration refuse a result after 9999-12-31 with TIMER_DUE_INVALID', () => {
    expectInstant(mondays.nextOpen(new Date('9999-12-26T10:00:00+01:00')), '9999-12-27T09:00:00+01:00');
    expect(() => mondays.nextOpen(new Date('9999-12-28T10:00:00+01:00'))).toThrow(expect.objectContaining({ code: 'TIMER_DUE_INVALID' }));
    expect(() => mondays.addDuration(new Date('9999-12-27T16:00:00+01:00'), 2 * HOUR)).toThrow(
      expect.objectContaining({ code: 'TIMER_DUE_INVALID' }),
    );
  });
});

describe('WorkingTimeCalendar: input', () => {
  const office = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: OFFICE });

  it('refuses a negative, NaN or infinite duration and an invalid date', () => {
    for (const durationMs of [-1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => office.addDuration(new Date('2026-01-13T10:00:00Z'), durationMs)).toThrow(
        expect.objectContaining({ code: 'TIMER_DELAY_INVALID' }),
      );
    }
    expect(() => office.addDuration(new Date(Number.NaN), HOUR)).toThrow(expect.objectContaining({ code: 'TIMER_DUE_INVALID' }));
    expect(() => office.nextOpen(new Date(Number.NaN))).toThrow(expect.objectContaining({ code: 'TIMER_DUE_INVALID' }));
  });

  it('resolves the zone name as Intl does', () => {
    expect(new WorkingTimeCalendar({ timeZone: 'europe/berlin' }).timeZone).toBe('Europe/Berlin');
  });

  it.each([
    ['an unknown time zone', { timeZone: 'Mars/Olympus' }, /time zone 'Mars\/Olympus' is not an IANA time zone .*'Europe\/Berlin'/],
    ['no time zone', { timeZone: undefined }, /'timeZone' is missing: give an IANA time zone name such as 'Europe\/Berlin'/],
    ['a day that is no day of the week', { hours: { mon: ['09:00-17:00'] } }, /'mon', which is not a day of the week: use sunday, monday/],
    ['a day given a string', { hours: { monday: '09:00-17:00' } }, /hours\.monday is '09:00-17:00': give 'all-day' or a list/],
    ['an hour of 25', { hours: { monday: ['09:00-25:00'] } }, /hours\.monday\[0\] is '09:00-25:00', not an interval 'HH:MM-HH:MM'/],
    ['a minute of 60', { hours: { monday: ['09:60-17:00'] } }, /hours\.monday\[0\]/],
    ['24:30', { hours: { monday: ['09:00-24:30'] } }, /'24:00' ends the day/],
    ['an interval starting at 24:00', { hours: { monday: ['24:00-24:00'] } }, /hours\.monday\[0\] is '24:00-24:00'/],
    ['a time without its leading zero', { hours: { monday: ['9:00-17:00'] } }, /like '09:00-12:30'/],
    [
      'an inverted interval',
      { hours: { tuesday: ['09:00-12:00', '17:00-13:00'] } },
      /hours\.tuesday\[1\] \('17:00-13:00'\) does not end after it starts.*two days/,
    ],
    ['an empty interval', { hours: { tuesday: ['09:00-09:00'] } }, /does not end after it starts/],
    [
      'overlapping intervals',
      { hours: { friday: ['13:00-17:00', '09:00-13:30'] } },
      /hours\.friday has '09:00-13:30' and '13:00-17:00', which overlap: join them/,
    ],
    ['no working hours at all', { hours: { sunday: [] } }, /needs working hours on at least one day of the week/],
    ['hours that are no object', { hours: ['09:00-17:00'] }, /'hours' is \(a list\): give an object of weekdays/],
    [
      'a holiday that is no date',
      { holidays: ['2026-02-30'] },
      /holidays are dates written YYYY-MM-DD \(local dates in Europe\/Berlin\); holidays\[0\] is '2026-02-30'/,
    ],
    ['a holiday without leading zeros', { holidays: ['2026-1-1'] }, /holidays\[0\] is '2026-1-1'/],
    ['a holiday given as a Date', { holidays: ['2026-12-25', new Date('2026-12-26')] }, /holidays\[1\] is \(a Date\), which is not/],
    ['a holiday given as null', { holidays: [null] }, /holidays\[0\] is null, which is not/],
    ['holidays that are no list', { holidays: '2026-12-25' }, /'holidays' is '2026-12-25': give a list/],
  ])('refuses %s with DEFINITION_INVALID naming the fix', (_what, options, message) => {
    const build = () => new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', ...options } as never);
    expect(build).toThrow(SagaDefinitionError);
    expect(build).toThrow(expect.objectContaining({ code: 'DEFINITION_INVALID', message: expect.stringMatching(message) }));
  });

  it('WeekdayCalendar takes null options as none, and refuses business days that are not a list of weekdays', () => {
    const weekdays = new WeekdayCalendar(null as never);
    expectInstant(weekdays.addDuration(new Date('2026-01-16T12:00:00Z'), 24 * HOUR), '2026-01-19T12:00:00Z');
    for (const businessDays of [[], [7], [1.5], ['1'], 5, '12345']) {
      expect(() => new WeekdayCalendar({ businessDays } as never)).toThrow(expect.objectContaining({ code: 'DEFINITION_INVALID' }));
    }
  });

  it('joins touching intervals and takes them in any order', () => {
    const split = new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: { monday: ['12:00-17:00', '09:00-12:00'] } });
    expectInstant(split.addDuration(new Date('2026-01-12T11:00:00+01:00'), 2 * HOUR), '2026-01-12T13:00:00+01:00');
  });
});
