// Property-based tests (fast-check) of WorkingTimeCalendar, no database: in zones with changes of the clocks at
// night, at midnight, by half an hour and by two hours, for any weekly hours, holidays, start and delay, the due
// instant is never earlier than the delay in wall time, lies in working time, and is the instant a slow walk of
// every quarter hour finds (test/calendars/reference-walker.ts).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type WeeklyHours, WorkingTimeCalendar } from '../../src/index.js';
import { ReferenceWalker } from './reference-walker.js';

// Runs per property; raise it (FC_RUNS=1000) to search harder locally.
const RUNS = Number(process.env.FC_RUNS ?? 150);
const TIMEOUT_MS = Math.max(60_000, RUNS * 500);
const QUARTER = 15 * 60_000;
const DAY = 86_400_000;
const WEEKDAYS = ['sunday', 'monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday'] as const;

/**
 * Zones whose offsets and changes fall on quarter hours: Berlin and New York (at 02:00/03:00), Havana (at
 * midnight), São Paulo (at midnight until 2019), Santiago (at midnight, southern summer), Lord Howe (by half an
 * hour), Troll (by two hours), Chatham (+12:45/+13:45), Kolkata and UTC (none).
 */
const zone = fc.constantFrom(
  'Europe/Berlin',
  'America/New_York',
  'America/Havana',
  'America/Sao_Paulo',
  'America/Santiago',
  'Australia/Lord_Howe',
  'Antarctica/Troll',
  'Pacific/Chatham',
  'Asia/Kolkata',
  'UTC',
);

const hhmm = (quarters: number) => `${String(Math.floor(quarters / 4)).padStart(2, '0')}:${String((quarters % 4) * 15).padStart(2, '0')}`;

/** A day's hours: closed, all day, or up to three intervals on quarter hours (ending at 24:00 at the latest). */
const dayHours = fc.oneof(
  { weight: 1, arbitrary: fc.constant<readonly string[]>([]) },
  { weight: 1, arbitrary: fc.constant('all-day' as const) },
  {
    weight: 4,
    arbitrary: fc.uniqueArray(fc.integer({ min: 0, max: 96 }), { minLength: 2, maxLength: 6 }).map((bounds) => {
      const sorted = [...bounds].sort((a, b) => a - b);
      const intervals: string[] = [];
      for (let i = 0; i + 1 < sorted.length; i += 2) intervals.push(`${hhmm(sorted[i]!)}-${hhmm(sorted[i + 1]!)}`);
      return intervals;
    }),
  },
);

const weeklyHours = fc.tuple(...WEEKDAYS.map(() => dayHours)).map((days) => {
  const hours = Object.fromEntries(WEEKDAYS.map((day, i) => [day, days[i]!]));
  // At least one day with working hours.
  if (days.every((day) => day.length === 0)) hours.wednesday = ['09:00-17:00'];
  return hours as WeeklyHours;
});

/** Working time of a week by its hours, ms (changes of the clocks aside). */
function weekMs(hours: WeeklyHours): number {
  return Object.values(hours)
    .flatMap((day) => (day === 'all-day' ? ['00:00-24:00'] : (day ?? [])))
    .reduce((sum, interval) => {
      const [start, end] = interval.split('-').map((time) => Number(time.slice(0, 2)) * 60 + Number(time.slice(3)));
      return sum + (end! - start!) * 60_000;
    }, 0);
}

/** The instants (to the hour) at which the zone's clocks changed in the UTC year of `at`, read hour by hour. */
const changesNear = (() => {
  const known = new Map<string, number[]>();
  return (timeZone: string, at: number): number[] => {
    const year = new Date(at).getUTCFullYear();
    const key = `${timeZone} ${year}`;
    if (!known.has(key)) {
      const wall = new ReferenceWalker({ timeZone, hours: {} });
      const changes: number[] = [];
      for (let hour = Date.UTC(year, 0, 1); hour < Date.UTC(year + 1, 0, 1); hour += 3_600_000) {
        if (wall.wall(hour) - hour !== wall.wall(hour - 3_600_000) - (hour - 3_600_000)) changes.push(hour);
      }
      known.set(key, changes);
    }
    return known.get(key)!;
  };
})();

const scenario = fc.record({
  timeZone: zone,
  hours: weeklyHours,
  // Any millisecond from 2015 to 2030, or (more often) one within days of a change of the clocks in its year.
  from: fc.integer({ min: Date.UTC(2015, 0, 1), max: Date.UTC(2031, 0, 1) }),
  nearChange: fc.option(fc.record({ index: fc.nat(), shift: fc.integer({ min: -4 * DAY, max: 2 * DAY }) }), { freq: 3 }),
  holidayOffsets: fc.uniqueArray(fc.integer({ min: -2, max: 40 }), { maxLength: 8 }),
  // A share of up to three weeks of working time, or a whole number of quarter hours (to end at a closing).
  delay: fc.oneof(
    fc.double({ min: 0, max: 3, noNaN: true }),
    fc.integer({ min: 0, max: 200 }).map((quarters) => -quarters),
  ),
});

type Scenario = typeof scenario extends fc.Arbitrary<infer T> ? T : never;

function build({ timeZone, hours, from: any, nearChange, holidayOffsets, delay }: Scenario) {
  const changes = nearChange ? changesNear(timeZone, any) : [];
  const from = nearChange && changes.length > 0 ? changes[nearChange.index % changes.length]! + nearChange.shift : any;
  const holidays = holidayOffsets.map((days) => new Date(from + days * DAY).toISOString().slice(0, 10));
  const calendar = new WorkingTimeCalendar({ timeZone, hours, holidays });
  const reference = new ReferenceWalker({ timeZone, hours, holidays, cellMs: QUARTER });
  const durationMs = delay < 0 ? -delay * QUARTER : Math.floor(delay * weekMs(hours));
  return { calendar, reference, start: new Date(from), durationMs };
}

describe('WorkingTimeCalendar (property-based)', () => {
  it(
    'the due instant is never earlier than the delay in wall time, lies in working time, and is the reference walk’s',
    () => {
      fc.assert(
        fc.property(scenario, (input) => {
          const { calendar, reference, start, durationMs } = build(input);
          const due = calendar.addDuration(start, durationMs);
          expect(due.getTime()).toBeGreaterThanOrEqual(start.getTime() + durationMs);
          expect(reference.isOpen(due)).toBe(true);
          expect(calendar.isOpen(due)).toBe(true);
          expect(due.toISOString()).toBe(reference.addDuration(start, durationMs).toISOString());
        }),
        { numRuns: RUNS },
      );
    },
    TIMEOUT_MS,
  );

  it(
    'nextOpen and isOpen agree with the reference walk',
    () => {
      fc.assert(
        fc.property(scenario, (input) => {
          const { calendar, reference, start } = build(input);
          expect(calendar.isOpen(start)).toBe(reference.isOpen(start));
          expect(calendar.nextOpen(start).toISOString()).toBe(reference.addDuration(start, 0).toISOString());
        }),
        { numRuns: RUNS },
      );
    },
    TIMEOUT_MS,
  );
});
