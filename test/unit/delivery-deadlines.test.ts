// One timeout mechanism for every delivery in flight: each fails after deliveryTimeoutMs of the clock, counted
// from its own start; one that settles in time is untouched.
import { describe, expect, it } from 'vitest';
import { DeliveryDeadlines, DeliveryTimeout } from '../../src/dispatcher/delivery-deadlines.js';
import { FakeClock } from '../../src/testing/index.js';
import { deferred } from '../support/suite.js';

const outcome = (promise: Promise<unknown>) =>
  promise.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
const ticks = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

describe('DeliveryDeadlines', () => {
  it('fails each delivery once it ran timeoutMs, counted from its own start, and leaves the others running', async () => {
    const clock = new FakeClock();
    const deadlines = new DeliveryDeadlines(clock, 1_000);
    const first = outcome(deadlines.race(new Promise(() => {})));
    clock.advance(400);
    const second = deferred();
    const secondOutcome = outcome(deadlines.race(second.promise.then(() => 'done')));
    const settled: string[] = [];
    void first.then(() => settled.push('first'));
    void secondOutcome.then(() => settled.push('second'));
    clock.advance(599);
    await ticks();
    expect(settled).toEqual([]);
    clock.advance(1);
    await ticks();
    expect(settled).toEqual(['first']);
    const { error } = (await first) as { error: unknown };
    expect(error).toBeInstanceOf(DeliveryTimeout);
    expect((error as Error).message).toBe('still running after 1000 ms (deliveryTimeoutMs)');
    clock.advance(399);
    await ticks();
    expect(settled).toEqual(['first']);
    second.resolve();
    expect(await secondOutcome).toEqual({ value: 'done' });
  });

  it('passes through what a delivery settles with in time, and a later delivery still times out', async () => {
    const clock = new FakeClock();
    const deadlines = new DeliveryDeadlines(clock, 1_000);
    expect(await deadlines.race(Promise.resolve(7))).toBe(7);
    expect(await outcome(deadlines.race(Promise.reject(new Error('step threw'))))).toEqual({ error: new Error('step threw') });
    clock.advance(5_000);
    const hung = outcome(deadlines.race(new Promise(() => {})));
    clock.advance(1_000);
    expect(((await hung) as { error: unknown }).error).toBeInstanceOf(DeliveryTimeout);
  });
});
