import type { Clock } from '../time/clock.js';
import { type Duration, toMilliseconds } from '../time/duration.js';

interface Sleeper {
  readonly until: number;
  readonly resolve: () => void;
}

/**
 * A clock that only moves when told to. Pass it as `clock` to the runtime and the dispatcher, then
 * `advance()` it instead of waiting: sleepers whose deadline is passed wake up.
 */
export class FakeClock implements Clock {
  private current: number;
  private sleepers: Sleeper[] = [];

  /** @param start the initial time. Default: 2026-01-05T09:00:00Z (a Monday). */
  constructor(start: Date | string = '2026-01-05T09:00:00.000Z') {
    this.current = new Date(start).getTime();
  }

  now(): Date {
    return new Date(this.current);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    if (ms <= 0 || signal?.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const sleeper = { until: this.current + ms, resolve };
      this.sleepers.push(sleeper);
      signal?.addEventListener(
        'abort',
        () => {
          this.sleepers = this.sleepers.filter((s) => s !== sleeper);
          resolve();
        },
        { once: true },
      );
    });
  }

  /** Moves time forward by `duration` and wakes the sleepers it passes. */
  advance(duration: Duration): Date {
    return this.set(new Date(this.current + toMilliseconds(duration, 'advance')));
  }

  /** Sets the time (never backwards) and wakes the sleepers it passes. */
  set(at: Date | string): Date {
    this.current = Math.max(this.current, new Date(at).getTime());
    const due = this.sleepers.filter((s) => s.until <= this.current);
    this.sleepers = this.sleepers.filter((s) => s.until > this.current);
    for (const sleeper of due) sleeper.resolve();
    return this.now();
  }
}
