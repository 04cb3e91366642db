// The delivery pool's reservation: an idle pool holds every slot for one claim in flight, so the rows that
// claim marks started really start as soon as they are submitted, ahead of whatever was queued meanwhile.
import { describe, expect, it } from 'vitest';
import { DeliveryPool, type DeliveryTask } from '../../src/dispatcher/delivery-pool.js';
import { deferred } from '../support/suite.js';

/** A task that records when it starts and waits for its gate. */
function gated(log: string[], name: string, lane: string, isolated = false) {
  const gate = deferred();
  const task: DeliveryTask = {
    lane,
    isolated,
    run: async () => {
      log.push(`start ${name}`);
      await gate.promise;
      log.push(`end ${name}`);
    },
    settle: () => undefined,
  };
  return { task, open: () => gate.resolve() };
}

describe('DeliveryPool reservation', () => {
  it('is given only by an idle pool, once at a time', () => {
    const log: string[] = [];
    const pool = new DeliveryPool(2, () => undefined);
    const reservation = pool.reserve();
    expect(reservation).toBeDefined();
    expect(pool.reserve()).toBeUndefined();
    expect(pool.hasRoom()).toBe(false);
    pool.release(reservation!);
    const busy = gated(log, 'busy', 'x');
    void pool.submit([busy.task]);
    expect(pool.reserve()).toBeUndefined();
    busy.open();
  });

  it('starts nothing while held; its tasks then start at once, ahead of lanes and isolated tasks queued meanwhile', async () => {
    const log: string[] = [];
    const pool = new DeliveryPool(2, () => undefined);
    const reservation = pool.reserve()!;
    const other = gated(log, 'other', 'o');
    const otherSameSaga = gated(log, 'other-a', 'a');
    const otherIsolated = gated(log, 'other-isolated', 'i', true);
    const others = pool.submit([other.task, otherSameSaga.task, otherIsolated.task]);
    expect(log).toEqual([]);
    expect(pool.active).toBe(0);

    const a1 = gated(log, 'a1', 'a');
    const b1 = gated(log, 'b1', 'b');
    const a2 = gated(log, 'a2', 'a');
    const mine = pool.submit([a1.task, b1.task, a2.task], reservation);
    // Synchronously, before submit's caller awaits anything: the claim's lane heads run.
    expect(log).toEqual(['start a1', 'start b1']);
    a1.open();
    await new Promise<void>((resolve) => setImmediate(resolve));
    // a's lane runs the claim's own a2 before the a-task queued meanwhile.
    expect(log).toEqual(['start a1', 'start b1', 'end a1', 'start a2']);
    for (const task of [b1, a2, other, otherSameSaga]) task.open();
    await mine;
    otherIsolated.open();
    await others;
    const starts = log.filter((line) => line.startsWith('start'));
    expect(starts.slice(0, 3)).toEqual(['start a1', 'start b1', 'start a2']);
    expect(starts.at(-1)).toBe('start other-isolated');
    expect(starts.indexOf('start other-a')).toBeGreaterThan(starts.indexOf('start a2'));
  });

  it('released without tasks, lets what was queued meanwhile start', async () => {
    const log: string[] = [];
    const pool = new DeliveryPool(2, () => undefined);
    const reservation = pool.reserve()!;
    const queued = gated(log, 'queued', 'q');
    const done = pool.submit([queued.task]);
    expect(log).toEqual([]);
    pool.release(reservation);
    expect(log).toEqual(['start queued']);
    queued.open();
    await done;
  });
});
