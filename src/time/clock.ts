/**
 * The one source of "now" for the runtime and the dispatcher. Tests inject a `FakeClock`
 * (`mikro-orm-saga/testing`) and advance it instead of waiting on the wall clock.
 */
export interface Clock {
  /** The current instant. */
  now(): Date;
  /**
   * Resolves after `ms` milliseconds of this clock's time, or as soon as `signal` aborts.
   * A fake clock resolves when it is advanced past the deadline.
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/**
 * The reason the library's own AbortControllers abort with (they end sleeps and waits), made once: `abort()`
 * without a reason makes a new DOMException each time, its stack trace included (4% of the relay's CPU, with a
 * controller ended per pass).
 */
export const ENDED = new DOMException('This operation was aborted', 'AbortError');

/** The real clock: `Date.now()` and `setTimeout`. */
export const systemClock: Clock = {
  now: () => new Date(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const onAbort = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    }),
};
