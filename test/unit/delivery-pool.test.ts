// The dispatcher's delivery pool: bounded concurrency, one lane per saga in order, isolated rows alone.
import { describe, expect, it } from 'vitest';
import { DeliveryPool, type DeliveryTask } from '../../src/dispatcher/delivery-pool.js';
import { deferred } from '../support/suite.js';

/** A task that records when it starts and ends and waits for its gate in between. */
function gated(log: string[], name: string, lane: string, isolated = false, group?: string) {
  const gate = deferred();
  const started = deferred();
  const task: DeliveryTask = {
    lane,
    isolated,
    ...(group === undefined ? {} : { group }),
    run: async () => {
      log.push(`start ${name}`);
      started.resolve();
      await gate.promise;
      log.push(`end ${name}`);
    },
    settle: () => undefined,
  };
  return { task, open: () => gate.resolve(), started: started.promise };
}

const flush = async () => {
  for (let i = 0; i < 10; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

describe('DeliveryPool', () => {
  it('runs at most `concurrency` lanes at once, each lane in order, and reports room only when a slot is free and nothing waits', async () => {
    const log: string[] = [];
    const pool = new DeliveryPool(2, (error) => log.push(`error ${String(error)}`));
    const a1 = gated(log, 'a1', 'a');
    const a2 = gated(log, 'a2', 'a');
    const b1 = gated(log, 'b1', 'b');
    const c1 = gated(log, 'c1', 'c');
    const all = pool.submit([a1.task, a2.task, b1.task, c1.task]);
    await Promise.all([a1.started, b1.started]);
    await flush();
    expect(log).toEqual(['start a1', 'start b1']);
    expect(pool.active).toBe(2);
    expect(pool.hasRoom()).toBe(false);
    a1.open();
    await a2.started;
    // a2 runs in lane a's slot after a1; c still waits for a slot.
    expect(log).toEqual(['start a1', 'start b1', 'end a1', 'start a2']);
    b1.open();
    await c1.started;
    a2.open();
    const room = pool.whenRoom(new AbortController().signal);
    await room;
    expect(pool.hasRoom()).toBe(true);
    c1.open();
    await all;
    expect(log.filter((l) => l.startsWith('start'))).toEqual(['start a1', 'start b1', 'start a2', 'start c1']);
  });

  it('an isolated task waits until nothing runs, and nothing starts while it runs', async () => {
    const log: string[] = [];
    const pool = new DeliveryPool(5, () => undefined);
    const busy = gated(log, 'busy', 'x');
    const suspect = gated(log, 'suspect', 'y', true);
    const first = pool.submit([busy.task, suspect.task]);
    await busy.started;
    await flush();
    expect(log).toEqual(['start busy']);
    busy.open();
    await suspect.started;
    const later = gated(log, 'later', 'z');
    const second = pool.submit([later.task]);
    await flush();
    expect(log).toEqual(['start busy', 'end busy', 'start suspect']);
    suspect.open();
    await later.started;
    later.open();
    await Promise.all([first, second]);
    expect(log).toEqual(['start busy', 'end busy', 'start suspect', 'end suspect', 'start later', 'end later']);
  });

  it('an isolated task waiting behind a hung delivery does not stall the pool: later rows start, then it runs before anything newer', async () => {
    const log: string[] = [];
    const pool = new DeliveryPool(5, () => undefined);
    const hung = gated(log, 'hung', 'x');
    const suspect = gated(log, 'suspect', 'y', true);
    const first = pool.submit([hung.task, suspect.task]);
    await hung.started;
    // Room for new claims while the suspect waits for the hung delivery.
    expect(pool.hasRoom()).toBe(true);
    const later = gated(log, 'later', 'z');
    const second = pool.submit([later.task]);
    await later.started;
    later.open();
    await second;
    hung.open();
    await suspect.started;
    // Once the delivery it waited for ended, nothing new starts until the suspect ran.
    const newest = gated(log, 'newest', 'w');
    const third = pool.submit([newest.task]);
    await flush();
    expect(pool.hasRoom()).toBe(false);
    suspect.open();
    await newest.started;
    newest.open();
    await Promise.all([first, third]);
    expect(log).toEqual([
      'start hung',
      'start later',
      'end later',
      'end hung',
      'start suspect',
      'end suspect',
      'start newest',
      'end newest',
    ]);
  });

  it('runs each group up to its own limit: a full group does not hold up the lanes of the other', async () => {
    const log: string[] = [];
    const pool = new DeliveryPool({ timers: 1, publishes: 3 }, () => undefined);
    const t1 = gated(log, 't1', 't1', false, 'timers');
    const t2 = gated(log, 't2', 't2', false, 'timers');
    const published = [1, 2, 3, 4].map((n) => gated(log, `p${n}`, `p${n}`, false, 'publishes'));
    const all = pool.submit([t1.task, t2.task, ...published.map((p) => p.task)]);
    await Promise.all([t1.started, ...published.slice(0, 3).map((p) => p.started)]);
    await flush();
    expect(log.sort()).toEqual(['start p1', 'start p2', 'start p3', 'start t1']);
    expect(pool.active).toBe(4);
    // A claimed row of each group waits for a slot of its own group.
    expect(pool.hasRoom()).toBe(false);
    published[0]!.open();
    await published[3]!.started;
    expect(log).not.toContain('start t2');
    t1.open();
    await t2.started;
    for (const task of [t2, ...published]) task.open();
    await all;
    expect(pool.active).toBe(0);
  });

  it("a reservation holds only its group's slots: the other group's lanes start meanwhile, an isolated task waits for it", async () => {
    const log: string[] = [];
    const pool = new DeliveryPool({ timers: 2, publishes: 2 }, () => undefined);
    const reservation = pool.reserve('publishes')!;
    expect(reservation).toBeDefined();
    const timer = gated(log, 'timer', 't', false, 'timers');
    const queuedPublish = gated(log, 'queued', 'q', false, 'publishes');
    const suspect = gated(log, 'suspect', 's', true, 'timers');
    const others = pool.submit([timer.task, queuedPublish.task, suspect.task]);
    await timer.started;
    expect(log).toEqual(['start timer']);
    timer.open();
    await flush();
    // Nothing runs, but the isolated task does not start while the claim's reservation is held.
    expect(log).toEqual(['start timer', 'end timer']);
    const mine = gated(log, 'mine', 'm', false, 'publishes');
    const claimed = pool.submit([mine.task], reservation);
    // The claim's task first, then what its group queued meanwhile.
    expect(log.slice(-2)).toEqual(['start mine', 'start queued']);
    for (const task of [mine, queuedPublish]) task.open();
    await claimed;
    await suspect.started;
    suspect.open();
    await others;
    expect(log.filter((line) => line.startsWith('start'))).toEqual(['start timer', 'start mine', 'start queued', 'start suspect']);
  });
});
