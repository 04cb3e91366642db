// A claimed timer row another transaction holds locked (an operator's open transaction). No dispatcher statement
// waits for it while holding other rows: the timer table's lease renewal skips it (busy) and renews the others, the
// outbox's renewals run on their own, other timers fire and their messages are published, nothing else is charged.
// The locked timer's start mark waits for it alone; when the lock ends it fires. PostgreSQL only (row locks).
// No wall-clock sleeps: FakeClock, deferred promises, lock waiters read from pg_stat_activity.
import { describe, expect, it } from 'vitest';
import { defineSaga, type LeaseRenewal, SagaDispatcher, SagaRuntime } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { rowLocker, untilLockWaiters } from '../../support/row-locks.js';
import { rowsOf } from '../../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

type LockMessage =
  | { readonly type: 'Start'; readonly key: string; readonly timers: readonly { name: string; after: number; hold?: 'first' | 'second' }[] }
  | { readonly type: 'Tick'; readonly hold?: 'first' | 'second' };

/** A saga whose Start schedules the timers it is given; each Tick sends a message, after waiting at its gate if it has one. */
function lockSaga(gates: Record<'first' | 'second', { entered: () => void; open: Promise<void> }>) {
  return defineSaga<ScriptedSaga, LockMessage>({
    name: 'scripted',
    state: ScriptedSaga,
    correlation: { property: 'key', from: { Start: (m) => m.key } },
    startedBy: ['Start'],
    steps: {
      Start(_saga, message, ctx) {
        for (const timer of message.timers) ctx.schedule(timer.name, timer.after, { type: 'Tick', hold: timer.hold });
      },
      async Tick(saga, message, ctx) {
        if (message.hold) {
          gates[message.hold].entered();
          await gates[message.hold].open;
        }
        saga.counter += 1;
        ctx.send({ type: 'Ticked', name: ctx.timer?.name });
      },
    },
  });
}

describe('a claimed timer row another transaction holds locked (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);

  it('the other timers fire, outbox rows are claimed and published, nothing else is charged; the locked timer fires once the lock ends', {
    timeout: 30_000,
  }, async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const held = { first: deferred(), second: deferred() };
    let entered = 0;
    const allEntered = deferred();
    const gates = {
      first: { entered: () => void (++entered === 4 && allEntered.resolve()), open: held.first.promise },
      second: { entered: () => void (++entered === 4 && allEntered.resolve()), open: held.second.promise },
    };
    const saga = lockSaga(gates);
    const others = 20;
    let handled = 0;
    const othersFired = deferred();
    const runtime = new SagaRuntime({
      em: db().orm.em,
      sagas: [saga],
      clock,
      onHandled: ({ timer }) => void (timer && ++handled === others + 3 && othersFired.resolve()),
    });
    // Saga G: 'g' waits at the first gate, 't' (the row to be locked) waits behind it in G's lane.
    await runtime.handle(saga, {
      type: 'Start',
      key: uniqueKey('g'),
      timers: [
        { name: 'g', after: 1_000, hold: 'first' },
        { name: 't', after: 2_000 },
      ],
    });
    // Three sagas whose timer waits at the second gate: held rows on either side of 't' in saga order.
    for (let i = 0; i < 3; i++) {
      await runtime.handle(saga, { type: 'Start', key: uniqueKey('h'), timers: [{ name: 'h', after: 1_500, hold: 'second' }] });
    }
    for (let i = 0; i < others; i++)
      await runtime.handle(saga, { type: 'Start', key: uniqueKey('o'), timers: [{ name: 'o', after: 3_000 }] });
    const rows = rowsOf(db().orm);
    const t = (await rows.pendingTimers()).find((timer) => timer.name === 't')!;
    clock.advance(10_000);

    const lines: string[] = [];
    const published: string[] = [];
    const dispatcher = new SagaDispatcher({
      runtime,
      clock,
      concurrency: 5,
      maxAttempts: 2,
      logger: { debug: () => undefined, info: () => undefined, warn: (l) => void lines.push(l), error: (l) => void lines.push(l) },
      publish: async (envelope) => void published.push(envelope.id),
    });
    const renewals: LeaseRenewal[] = [];
    dispatcher.on('renewed', (renewal) => void renewals.push(renewal));
    const locker = await rowLocker(await db().openAnother(), 'saga_timer');
    try {
      const first = dispatcher.runOnce();
      await allEntered.promise; // 'g' and the three 'h' deliveries run; 't' waits in G's lane
      await locker.lock('id', t.id);

      const renewed = new Promise<LeaseRenewal>((resolve) => dispatcher.on('renewed', resolve));
      clock.advance(10_000); // leaseMs / 3
      const renewal = await renewed;
      expect(renewal).toMatchObject({ table: 'saga_timer', busy: [t.id], lost: [] });
      expect(renewal.renewed.length).toBeGreaterThanOrEqual(4); // 'g' and the three 'h' rows at least
      expect(renewal.renewed).not.toContain(t.id);

      held.second.resolve(); // the 'h' deliveries stamp their rows fired
      await othersFired.promise;
      const second = await dispatcher.runOnce();
      expect(second.outbox).toMatchObject({ claimed: others + 3, published: others + 3, failed: 0 });

      held.first.resolve(); // 'g' fires; 't' is next in its lane, its start mark waits for the lock
      await untilLockWaiters(db().orm);
      expect(await rows.timers({ id: t.id })).toMatchObject([{ dispatchedAt: null, attempts: 0 }]);
      await locker.release();
      expect((await first).timers).toMatchObject({ claimed: others + 5, fired: others + 5, failed: 0, lost: 0, interrupted: 0 });
    } finally {
      held.first.resolve();
      held.second.resolve();
      await locker.release();
      await dispatcher.stop();
    }
    const timers = await rows.timers();
    expect(timers.filter((timer) => timer.outcome !== 'fired')).toEqual([]);
    expect(timers.filter((timer) => timer.attempts > 0 || timer.lastError !== null)).toEqual([]);
    expect((await dispatcher.runOnce()).outbox).toMatchObject({ published: 2 }); // 'g' and 't' sent theirs
    expect(lines.filter((line) => !line.includes('another transaction holds them locked'))).toEqual([]);
  });
});
