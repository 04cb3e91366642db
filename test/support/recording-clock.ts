import type { FakeClock } from '../../src/testing/index.js';
import type { Clock } from '../../src/time/clock.js';

/** `fake`, seen through a clock that records every sleep asked of it (a FakeClock does not tell). */
export function recordingClock(fake: FakeClock): { clock: Clock; sleeps: number[] } {
  const sleeps: number[] = [];
  const clock: Clock = {
    now: () => fake.now(),
    sleep: (ms, signal) => {
      sleeps.push(ms);
      return fake.sleep(ms, signal);
    },
  };
  return { clock, sleeps };
}
