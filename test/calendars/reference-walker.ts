// A slow reference for working-time calendars: it walks real time cell by cell (a minute, a quarter of an hour...)
// and asks of each cell whether it is working time, reading the zone's wall clock with Intl's formatToParts (not the
// offsets the calendar reads). It shares no code with src/calendars.

const DAY_MS = 86_400_000;
const WEEKDAYS = ['sunday', 'monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday'];

export interface ReferenceOptions {
  readonly timeZone: string;
  readonly hours: Readonly<Record<string, 'all-day' | readonly string[]>>;
  readonly holidays?: readonly string[];
  /**
   * The walk's cell, ms. Every interval boundary, every change of the zone's clocks and every offset must fall on
   * multiples of it, so that working time is all or nothing within a cell. Default: a minute.
   */
  readonly cellMs?: number;
}

/**
 * Working time defined from the wall clock alone: an instant `t` is in working time when the latest wall time shown
 * up to `t` (clocks set back show some times twice: the latest shown is the running maximum) lies in a working
 * interval of its local date. That is the calendar's rule: an interval runs from the first instant its start is
 * shown (or passed, in a gap) to the first instant its end is.
 */
export class ReferenceWalker {
  private readonly format: Intl.DateTimeFormat;
  private readonly week: [number, number][][];
  private readonly holidays: Set<string>;
  private readonly cellMs: number;
  /** Probes of the wall clock, for the test's report. */
  probes = 0;

  constructor(options: ReferenceOptions) {
    this.format = new Intl.DateTimeFormat('en-US', {
      timeZone: options.timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    this.week = WEEKDAYS.map((day) => {
      const hours = options.hours[day] ?? [];
      const list = hours === 'all-day' ? ['00:00-24:00'] : hours;
      return list.map((text) => {
        const [start, end] = text.split('-').map((time) => {
          const [h, m] = time.split(':').map(Number);
          return (h! * 60 + m!) * 60_000;
        });
        return [start!, end!] as [number, number];
      });
    });
    this.holidays = new Set(options.holidays ?? []);
    this.cellMs = options.cellMs ?? 60_000;
  }

  /** The wall clock's digits at `at`, as epoch ms of the same digits in UTC. */
  wall(at: number): number {
    this.probes++;
    const parts = Object.fromEntries(this.format.formatToParts(at).map((part) => [part.type, part.value]));
    const date = new Date(0);
    date.setUTCFullYear(Number(parts.year), Number(parts.month) - 1, Number(parts.day));
    date.setUTCHours(Number(parts.hour), Number(parts.minute), Number(parts.second));
    return date.getTime();
  }

  /** Whether the latest wall time shown, `shown`, lies in working time. */
  private working(shown: number): boolean {
    const day = Math.floor(shown / DAY_MS);
    if (this.holidays.has(new Date(day * DAY_MS).toISOString().slice(0, 10))) return false;
    const time = shown - day * DAY_MS;
    return this.week[(((day + 4) % 7) + 7) % 7]!.some(([start, end]) => start <= time && time < end);
  }

  /** The latest wall time shown up to the cell starting at `cell`: its own, or one before clocks were set back. */
  private shownBefore(cell: number): number {
    let shown = Number.NEGATIVE_INFINITY;
    for (let at = cell - 26 * 3_600_000; at <= cell; at += this.cellMs) shown = Math.max(shown, this.wall(at));
    return shown;
  }

  /** Whether `at` lies in working time. */
  isOpen(at: Date): boolean {
    return this.working(this.shownBefore(Math.floor(at.getTime() / this.cellMs) * this.cellMs));
  }

  /** The first instant in working time at which `durationMs` of working time has passed since `from`. */
  addDuration(from: Date, durationMs: number): Date {
    const start = from.getTime();
    let cell = Math.floor(start / this.cellMs) * this.cellMs;
    let shown = this.shownBefore(cell);
    let remaining = durationMs;
    for (;;) {
      if (this.working(shown)) {
        const opened = Math.max(cell, start);
        const length = cell + this.cellMs - opened;
        if (remaining < length) return new Date(opened + remaining);
        remaining -= length;
      }
      cell += this.cellMs;
      shown = Math.max(shown, this.wall(cell));
    }
  }
}
