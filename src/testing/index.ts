// Test utilities of mikro-orm-saga (`mikro-orm-saga/testing`).

export type { DrainOptions, DrainReport } from './drain.js';
export { advanceAndDrain, drainDueTimers } from './drain.js';
export { FakeClock } from './fake-clock.js';
