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
