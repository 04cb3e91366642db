// ZoneOffsets without a database: the offsets it keeps are Intl's, to the second, in years it reads and in the
// years after 2500 it takes from 400 years earlier (the Gregorian cycle).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ZoneOffsets } from '../../src/calendars/zone-offsets.js';
import { ReferenceWalker } from './reference-walker.js';

const ZONES = [
  'Europe/Berlin',
  'America/New_York',
  'Asia/Gaza',
  'Africa/Casablanca',
  'Australia/Lord_Howe',
  'America/Santiago',
  'Asia/Kolkata',
];

describe('ZoneOffsets', () => {
  it.each(ZONES)('%s: the offset at any instant from 1970 to 9999 is the one Intl shows', (timeZone) => {
    const zone = new ZoneOffsets(timeZone, 'test');
    const wallClock = new ReferenceWalker({ timeZone, hours: {} });
    fc.assert(
      fc.property(fc.integer({ min: 0, max: Date.UTC(9999, 11, 31) }), (at) => {
        const second = Math.floor(at / 1_000) * 1_000;
        expect(zone.wallTime(second)).toBe(wallClock.wall(second));
      }),
      { numRuns: 400 },
    );
  });

  it.each(['Africa/Casablanca', 'Asia/Gaza'])(
    '%s: finds each change of 2026, Ramadan pauses weeks apart included, as an hourly scan does',
    (timeZone) => {
      const zone = new ZoneOffsets(timeZone, 'test');
      const wallClock = new ReferenceWalker({ timeZone, hours: {} });
      const scanned: number[] = [];
      for (let hour = Date.UTC(2026, 0, 1, 1); hour <= Date.UTC(2027, 0, 1); hour += 3_600_000) {
        if (wallClock.wall(hour) - hour !== wallClock.wall(hour - 3_600_000) - (hour - 3_600_000)) scanned.push(hour);
      }
      const changes = zone.changesBetween(Date.UTC(2026, 0, 1), Date.UTC(2027, 0, 1));
      expect(scanned.length).toBeGreaterThanOrEqual(2);
      expect(changes.map((change) => change.at)).toEqual(scanned);
      for (const change of changes) expect(wallClock.wall(change.at) - change.at).toBe(change.offset);
    },
  );

  it('Europe/Berlin: two changes a year, across the turn of a year and 400-year cycles', () => {
    const berlin = new ZoneOffsets('Europe/Berlin', 'test');
    expect(berlin.changesBetween(Date.UTC(2026, 0, 1), Date.UTC(2027, 0, 1))).toEqual([
      { at: Date.parse('2026-03-29T01:00:00Z'), offset: 7_200_000 },
      { at: Date.parse('2026-10-25T01:00:00Z'), offset: 3_600_000 },
    ]);
    // Over the turn of a year and across 400-year cycles, each change once.
    expect(berlin.changesBetween(Date.UTC(2999, 0, 1), Date.UTC(3001, 0, 1))).toHaveLength(4);
  });

  it('turns local times the clocks skip or repeat into instants by the documented rule', () => {
    const berlin = new ZoneOffsets('Europe/Berlin', 'test');
    const wall = (local: string) => Date.parse(`${local}Z`);
    // Skipped: the first instant after the gap.
    expect(berlin.instantOf(wall('2026-03-29T02:30:00'))).toBe(Date.parse('2026-03-29T03:00:00+02:00'));
    // Repeated: the first occurrence.
    expect(berlin.instantOf(wall('2026-10-25T02:30:00'))).toBe(Date.parse('2026-10-25T02:30:00+02:00'));
    expect(berlin.instantOf(wall('2026-10-25T03:00:00'))).toBe(Date.parse('2026-10-25T03:00:00+01:00'));
  });

  it('reads no year for a zone of one offset', () => {
    const utc = new ZoneOffsets('Etc/GMT-3', 'test');
    expect(utc.changesBetween(0, Date.UTC(9999, 0, 1))).toEqual([]);
    expect(utc.offsetAt(Date.UTC(5000, 0, 1))).toBe(3 * 3_600_000);
  });
});
