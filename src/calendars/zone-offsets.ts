import { SagaDefinitionError } from '../errors.js';

const SECOND_MS = 1_000;
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;
/**
 * Offsets are read every 3 days and bisected where they differ. The closest two offset changes of the time-zone
 * database since 1970 are 7 days apart (Brazil's 2000 rules; Asia/Gaza's Ramadan rules until 2086), so no change
 * lies unseen between two probes.
 */
const PROBE_STEP_MS = 3 * DAY_MS;
/** The Gregorian calendar repeats every 400 years: 146,097 days, a whole number of weeks. */
const CYCLE_YEARS = 400;
const CYCLE_MS = 146_097 * DAY_MS;
/**
 * From this year on, offsets are those of the year 400 years earlier. The time-zone database lists offset changes
 * up to 2087 (Africa/Casablanca) and continues every zone with a fixed yearly rule, which repeats with the
 * calendar; starting the repetition centuries later leaves a wide margin. It bounds the years read from Intl to
 * about 530, whatever the delay.
 */
const CYCLE_FROM_YEAR = 2500;
/** Local wall time is never further than this from UTC (-12:00 to +14:00), with a margin. */
const MAX_OFFSET_MS = 15 * HOUR_MS;

/** One offset change: from `at` (epoch ms) on, local wall time is `at + offset`. */
export interface OffsetChange {
  readonly at: number;
  readonly offset: number;
}

/** The offset changes of one UTC year: the offset at its first instant, then the changes in (start, end]. */
interface YearOffsets {
  readonly start: number;
  readonly startOffset: number;
  readonly changes: readonly OffsetChange[];
}

/**
 * The UTC offsets of one IANA time zone, read from the platform's `Intl` data (no offsets of its own), and the
 * conversions a working-time calendar needs: the local wall time of an instant, and the instant of a local wall
 * time. Offset changes are found once per UTC year and kept.
 */
export class ZoneOffsets {
  /** The zone's canonical name, as `Intl` resolved it. */
  readonly timeZone: string;
  private readonly format: Intl.DateTimeFormat;
  /** Set for a zone that never changes its offset (`UTC`, `Etc/...`): no year is probed. */
  private readonly fixedOffset: number | undefined;
  private readonly years = new Map<number, YearOffsets>();

  /** @throws SagaDefinitionError `DEFINITION_INVALID` when `timeZone` is not an IANA zone `Intl` knows. */
  constructor(timeZone: unknown, owner: string) {
    if (typeof timeZone !== 'string') {
      throw new SagaDefinitionError(
        'DEFINITION_INVALID',
        `${owner}: 'timeZone' is ${timeZone === undefined ? 'missing' : `a ${typeof timeZone}`}: give an IANA time zone name such as 'Europe/Berlin'.`,
      );
    }
    let format: Intl.DateTimeFormat;
    try {
      format = new Intl.DateTimeFormat('en-US', { timeZone, timeZoneName: 'longOffset' });
    } catch {
      throw new SagaDefinitionError(
        'DEFINITION_INVALID',
        `${owner}: the time zone '${timeZone.slice(0, 100)}' is not an IANA time zone this runtime knows: give a name such as 'Europe/Berlin' (Intl.supportedValuesOf('timeZone') lists them).`,
      );
    }
    this.format = format;
    this.timeZone = format.resolvedOptions().timeZone;
    // The Etc zones (UTC among them) have one offset for all time.
    this.fixedOffset = this.timeZone === 'UTC' || this.timeZone.startsWith('Etc/') ? this.probe(0) : undefined;
  }

  /** Local wall time minus UTC at `at` (epoch ms), in ms: 3,600,000 for UTC+01:00. */
  offsetAt(at: number): number {
    if (this.fixedOffset !== undefined) return this.fixedOffset;
    const year = this.yearOf(at);
    let offset = year.startOffset;
    for (const change of year.changes) {
      if (change.at > at) break;
      offset = change.offset;
    }
    return offset;
  }

  /** The local wall time of `at`, as epoch ms of the same digits in UTC. */
  wallTime(at: number): number {
    return at + this.offsetAt(at);
  }

  /**
   * The first instant whose local wall time is `wall` or later. A wall time that exists once is that instant; one
   * that exists twice (clocks set back) is its first occurrence; one that does not exist (clocks set forward) is
   * the instant the clocks jumped, the first after the gap.
   */
  instantOf(wall: number): number {
    let from = wall - MAX_OFFSET_MS;
    let offset = this.offsetAt(from);
    for (const change of this.changesBetween(from, wall + MAX_OFFSET_MS)) {
      const at = Math.max(from, wall - offset);
      if (at < change.at) return at;
      from = change.at;
      offset = change.offset;
    }
    return Math.max(from, wall - offset);
  }

  /** The offset changes at instants in (`from`, `to`], in order. */
  changesBetween(from: number, to: number): OffsetChange[] {
    if (this.fixedOffset !== undefined || !(to > from)) return [];
    const changes: OffsetChange[] = [];
    // A change at a year's first instant is listed by the year before (its changes are those in (start, end]).
    const last = new Date(to).getUTCFullYear();
    for (let year = new Date(from).getUTCFullYear() - 1; year <= last; year++) {
      for (const change of this.year(year).changes) if (change.at > from && change.at <= to) changes.push(change);
    }
    return changes;
  }

  private yearOf(at: number): YearOffsets {
    return this.year(new Date(at).getUTCFullYear());
  }

  /** The offsets of a UTC year: read from Intl before {@link CYCLE_FROM_YEAR}, from 400 years earlier after. */
  private year(year: number): YearOffsets {
    const known = this.years.get(year);
    if (known) return known;
    let offsets: YearOffsets;
    if (year >= CYCLE_FROM_YEAR) {
      const cycles = Math.floor((year - CYCLE_FROM_YEAR) / CYCLE_YEARS) + 1;
      const earlier = this.year(year - cycles * CYCLE_YEARS);
      const shift = cycles * CYCLE_MS;
      offsets = {
        start: earlier.start + shift,
        startOffset: earlier.startOffset,
        changes: earlier.changes.map((change) => ({ at: change.at + shift, offset: change.offset })),
      };
    } else {
      offsets = this.readYear(year);
    }
    this.years.set(year, offsets);
    return offsets;
  }

  /** Probes the year every {@link PROBE_STEP_MS} and bisects, to the second, where two probes differ. */
  private readYear(year: number): YearOffsets {
    const start = utcYearStart(year);
    const end = utcYearStart(year + 1);
    const startOffset = this.probe(start);
    const changes: OffsetChange[] = [];
    let before = start;
    let offset = startOffset;
    for (let probe = start + PROBE_STEP_MS; before < end; probe += PROBE_STEP_MS) {
      const at = Math.min(probe, end);
      // Bisection finds the first change after `before`; a second one before `at` is found by going round again.
      while (this.probe(at) !== offset) {
        const change = this.firstChange(before, at, offset);
        changes.push(change);
        before = change.at;
        offset = change.offset;
      }
      before = at;
    }
    return { start, startOffset, changes };
  }

  /** The first whole second in (`before`, `after`] whose offset is not `offset` (the offset at `before`). */
  private firstChange(before: number, after: number, offset: number): OffsetChange {
    let low = Math.floor(before / SECOND_MS);
    let high = Math.ceil(after / SECOND_MS);
    while (high - low > 1) {
      const middle = Math.floor((low + high) / 2);
      if (this.probe(middle * SECOND_MS) === offset) low = middle;
      else high = middle;
    }
    const at = high * SECOND_MS;
    return { at, offset: this.probe(at) };
  }

  /** The offset at `at`, read from Intl ("GMT+05:45", "GMT-00:44:30", "GMT"). */
  private probe(at: number): number {
    const text = this.format.format(at);
    const match = /GMT(?:([+-])(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?)?$/.exec(text);
    if (!match) throw new Error(`Intl gave no readable UTC offset for ${this.timeZone} ('${text}')`);
    if (!match[1]) return 0;
    const ms = Number(match[2]) * HOUR_MS + Number(match[3] ?? 0) * 60_000 + Number(match[4] ?? 0) * SECOND_MS;
    return match[1] === '-' ? -ms : ms;
  }
}

/** Epoch ms of January 1 of a UTC year (any year, two-digit ones included). */
function utcYearStart(year: number): number {
  const date = new Date(0);
  date.setUTCFullYear(year, 0, 1);
  return date.getTime();
}
