// Test utilities of mikro-orm-saga (`mikro-orm-saga/testing`).
export { FakeClock } from './fake-clock.js';
