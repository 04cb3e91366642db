import { type Clock, ENDED } from '../time/clock.js';

/**
 * Wakes the dispatcher's loop when a unit of work of this process committed rows due at once: an idle loop then
 * claims at once instead of at its next poll, and a pass waiting on slow deliveries is overtaken as soon as a slot
 * is free. A ring that comes while the loop is busy is kept until the loop next waits.
 */
export class LoopWakeup {
  private rung = false;
  private waiters: (() => void)[] = [];

  /** Rows are due: wakes the loop's wait now, or its next one. */
  ring(): void {
    this.rung = true;
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  /** Whether a ring came since the last {@link take} (and forgets it). */
  take(): boolean {
    const rung = this.rung;
    this.rung = false;
    return rung;
  }

  /** Resolves at the next ring (at once if one came since the last {@link take}), or when `signal` aborts. */
  next(signal: AbortSignal): Promise<void> {
    if (this.rung || signal.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = () => {
        signal.removeEventListener('abort', done);
        this.waiters = this.waiters.filter((waiter) => waiter !== done);
        resolve();
      };
      signal.addEventListener('abort', done, { once: true });
      this.waiters.push(done);
    });
  }

  /**
   * Waits `ms` of `clock`, or until a ring, or until `signal` aborts, whichever comes first. The wait starts now, so a
   * listener told of it afterwards may move a fake clock past it; its own listeners are removed when it ends.
   */
  wait(clock: Clock, ms: number, signal: AbortSignal): Promise<void> {
    const ended = new AbortController();
    const end = () => ended.abort(ENDED);
    if (signal.aborted) end();
    else signal.addEventListener('abort', end, { once: true });
    return Promise.race([clock.sleep(ms, ended.signal), this.next(ended.signal)]).finally(() => {
      end();
      signal.removeEventListener('abort', end);
    });
  }
}
