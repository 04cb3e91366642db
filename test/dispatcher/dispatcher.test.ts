// The dispatcher on every database: claiming by token, effectively-once firing, retries, dead letters, catch-up and
// the loop. Time only moves when a test advances the fake clock.
import { afterEach, describe, expect, it } from 'vitest';
import { claimDueTimers } from '../../src/dispatcher/claim-due-rows.js';
import {
  type CatchUpPolicy,
  type OutboxEnvelope,
  SagaDispatcher,
  type SagaDispatcherOptions,
  SagaRuntime,
  SagaTimer,
  silentLogger,
} from '../../src/index.js';
import { markDeliveriesStarted } from '../../src/sql/delivery-statements.js';
import { DISPATCH_TABLES } from '../../src/sql/dispatch-tables.js';
import { advanceAndDrain, drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { type Action, type ScriptedMessage, ScriptedSaga, scriptedSaga, scriptedSagaWithTick } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';

/** Claims due timers the way a dispatcher that then dies would. */
const claimTimers = async (runtime: SagaRuntime, now: Date, leaseUntil: Date) =>
  (await claimDueTimers(runtime.context, now, leaseUntil, 10)).rows;

const tick = (label: string, actions?: Action[]): ScriptedMessage => ({ type: 'Tick', label, ...(actions ? { actions } : {}) });

for (const dialect of DIALECTS) {
  describe(`dispatcher (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const dispatchers: SagaDispatcher[] = [];
    const setup = (options: Partial<SagaDispatcherOptions> = {}, sagas = [scriptedSaga]) => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas, clock });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, backoff: { jitter: false }, ...options });
      dispatchers.push(dispatcher);
      return { clock, runtime, dispatcher, rows: rowsOf(db().orm) };
    };
    // A test that leaves a dispatcher loop running fails (and the loop is stopped for the next test).
    afterEach(async () => {
      const running = dispatchers.splice(0).filter((d) => d.running);
      await Promise.all(running.map((d) => d.stop()));
      expect(running, 'a dispatcher was left running').toEqual([]);
    });
    const start = async (runtime: SagaRuntime, actions: Action[] = []) => {
      const key = uniqueKey('d');
      const result = await runtime.handle(scriptedSaga, { type: 'Start', key, actions });
      return { key, sagaId: result.sagaId! };
    };
    /** Clears what earlier tests left due, so a test sees only its own timers. */
    const quiet = async (dispatcher: SagaDispatcher) => {
      await db().orm.em.fork().nativeDelete(SagaTimer, {});
      return dispatcher;
    };

    describe('claim, deliver, stamp fired with the state change', () => {
      it('fires a due timer into its own instance and stamps it fired in the same commit', async () => {
        const { runtime, dispatcher, rows, clock } = setup();
        await quiet(dispatcher);
        const { key, sagaId } = await start(runtime, [
          { op: 'schedule', name: 'soon', after: 1_000 },
          { op: 'schedule', name: 'later', after: 60_000 },
        ]);
        expect(await dispatcher.runOnce()).toMatchObject({ timers: { claimed: 0, fired: 0 } });
        clock.advance(1_000);
        const pass = await dispatcher.runOnce();
        expect(pass.timers).toMatchObject({ claimed: 1, fired: 1, stale: 0, failed: 0 });
        expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:soon;', version: 1 });
        const [fired] = await rows.timers({ sagaId, name: 'soon' });
        expect(fired).toMatchObject({ outcome: 'fired', dispatchedAt: clock.now(), lockedUntil: null });
        expect((await rows.pendingTimers(sagaId)).map((t) => t.name)).toEqual(['later']);
        expect(dispatcher.stats().timersFired).toBe(1);
      });

      it('a pass claims at most batchSize timers: by default 100 on PostgreSQL and 2 x concurrency on SQLite', async () => {
        const byDefault = setup({ concurrency: 4 });
        const given = setup({ concurrency: 4, batchSize: 3 });
        await quiet(byDefault.dispatcher);
        const expected = dialect === 'postgresql' ? 100 : 8;
        expect(byDefault.dispatcher.options.batchSize).toBe(expected);
        expect(given.dispatcher.options.batchSize).toBe(3);
        const schedules: Action[] = Array.from({ length: 6 }, (_, i) => ({ op: 'schedule', name: `t${i}`, after: 1_000 }));
        for (let i = 0; i < 3; i++) await start(byDefault.runtime, schedules);
        byDefault.clock.advance(1_000);
        given.clock.advance(1_000);
        expect((await given.dispatcher.runOnce()).timers).toMatchObject({ claimed: 3, fired: 3 });
        expect((await byDefault.dispatcher.runOnce()).timers).toMatchObject({
          claimed: Math.min(expected, 15),
          fired: Math.min(expected, 15),
        });
      });

      it('a timer step can reschedule its own name: the fired row stays, a new pending row is written', async () => {
        const { runtime, dispatcher, rows, clock } = setup();
        await quiet(dispatcher);
        const { sagaId } = await start(runtime, [
          { op: 'schedule', name: 'again', after: 1_000, message: tick('again', [{ op: 'schedule', name: 'again', after: 5_000 }]) },
        ]);
        await advanceAndDrain(clock, dispatcher, 1_000);
        const all = await rows.timers({ sagaId, name: 'again' });
        expect(all.map((t) => t.outcome)).toEqual(['fired', null]);
        expect(all[1]?.dueAt).toEqual(new Date(clock.now().getTime() + 5_000));
      });

      it('a replaced, cancelled or already fired timer never changes state twice: the firing is stale', async () => {
        const { runtime, rows, clock } = setup();
        await db().orm.em.fork().nativeDelete(SagaTimer, {});
        const { key } = await start(runtime, [{ op: 'schedule', name: 'r', after: 1_000, message: tick('r', [{ op: 'inc' }]) }]);
        clock.advance(1_000);
        const lease = new Date(clock.now().getTime() + 30_000);
        const [claimed] = await claimTimers(runtime, clock.now(), lease);
        // Replaced after the claim: new token, so the old claim cannot fire it.
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'r', after: 9_000 }] });
        expect(await runtime.deliverTimer(claimed!)).toMatchObject({ outcome: 'stale', version: 0 });
        expect(await rows.saga(key)).toMatchObject({ counter: 0, version: 0 });
        // Fired once, then delivered again with the same claim.
        clock.advance(9_000);
        const [again] = await claimTimers(runtime, clock.now(), new Date(clock.now().getTime() + 30_000));
        expect(await runtime.deliverTimer(again!)).toMatchObject({ outcome: 'handled', version: 1 });
        expect(await runtime.deliverTimer(again!)).toMatchObject({ outcome: 'stale' });
        expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:r;', version: 1 });
        // Cancelled after the claim.
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'c', after: 0 }] });
        const [third] = await claimTimers(runtime, clock.now(), new Date(clock.now().getTime() + 30_000));
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'cancel', name: 'c' }] });
        expect(await runtime.deliverTimer(third!)).toMatchObject({ outcome: 'stale' });
        expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:r;', version: 1 });
        expect(runtime.stats().timersStale).toBe(3);
      });

      it('a dispatcher never claims a row leased to another; after a crash the row fires once the lease ends', async () => {
        const { runtime, dispatcher, rows, clock } = setup({ leaseMs: 30_000 });
        await quiet(dispatcher);
        const { key, sagaId } = await start(runtime, [{ op: 'schedule', name: 'x', after: 0 }]);
        // A dispatcher claims the timer, then dies before delivering it.
        const claims = await claimTimers(runtime, clock.now(), new Date(clock.now().getTime() + 30_000));
        expect(claims).toHaveLength(1);
        expect(await dispatcher.runOnce()).toMatchObject({ timers: { claimed: 0 } });
        expect(await rows.pendingTimers(sagaId)).toHaveLength(1);
        clock.advance(29_999);
        expect(await dispatcher.runOnce()).toMatchObject({ timers: { claimed: 0 } });
        clock.advance(1);
        expect(await dispatcher.runOnce()).toMatchObject({ timers: { claimed: 1, fired: 1 } });
        expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:x;' });
        // The dead dispatcher's claim is worthless now.
        expect(await runtime.deliverTimer(claims[0]!)).toMatchObject({ outcome: 'stale' });
      });

      it('restores the scheduling correlation id around the delivery and on the messages the timer step sends', async () => {
        const { runtime, dispatcher, rows, clock } = setup();
        await quiet(dispatcher);
        const key = uniqueKey('corr');
        const started = await runtime.handle(
          scriptedSaga,
          {
            type: 'Start',
            key,
            actions: [{ op: 'schedule', name: 'c', after: 10, message: tick('c', [{ op: 'send', message: { type: 'FromTimer' } }]) }],
          },
          { correlationId: 'req-42' },
        );
        await advanceAndDrain(clock, dispatcher, 10);
        const [sent] = await rows.outbox(started.sagaId!);
        expect(sent).toMatchObject({ messageType: 'FromTimer', correlationId: 'req-42' });
        expect(sent?.headers['correlation-id']).toBe('req-42');
      });
    });

    describe('failures, backoff, dead letters', () => {
      it('a failed delivery leaves the timer pending, counts the attempt, keeps the error and backs off', async () => {
        const { runtime, dispatcher, rows, clock } = setup({ maxAttempts: 3, backoff: { baseMs: 1_000, maxMs: 10_000, jitter: false } });
        await quiet(dispatcher);
        const { key, sagaId } = await start(runtime, [
          { op: 'schedule', name: 'bad', after: 0, message: tick('bad', [{ op: 'inc' }, { op: 'throw', message: 'carrier API down' }]) },
        ]);
        expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, failed: 1 });
        let [row] = await rows.pendingTimers(sagaId);
        expect(row).toMatchObject({ attempts: 1, lastError: 'Error: carrier API down', lockedUntil: null });
        expect(row?.availableAt).toEqual(new Date(clock.now().getTime() + 1_000));
        expect(row?.dueAt).toEqual(new Date('2026-01-05T09:00:00.000Z'));
        expect(await rows.saga(key)).toMatchObject({ counter: 0, version: 0 });
        // Not due again until the backoff has passed.
        expect((await dispatcher.runOnce()).timers.claimed).toBe(0);
        clock.advance(1_000);
        expect((await dispatcher.runOnce()).timers).toMatchObject({ failed: 1 });
        [row] = await rows.pendingTimers(sagaId);
        expect(row).toMatchObject({ attempts: 2 });
        expect(row?.availableAt).toEqual(new Date(clock.now().getTime() + 2_000));
        // The third failure is the last allowed one.
        clock.advance(2_000);
        expect((await dispatcher.runOnce()).timers).toMatchObject({ deadLettered: 1 });
        expect(await rows.pendingTimers(sagaId)).toEqual([]);
        const [dead] = await rows.timers({ sagaId, name: 'bad' });
        expect(dead).toMatchObject({ attempts: 3, outcome: 'dead_lettered', deadLetteredAt: clock.now(), dispatchedAt: clock.now() });
        expect(dead?.deadLetterReason).toMatch(/failed 3 time\(s\), the last with: Error: carrier API down/);
        // The name is free again.
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'bad', after: 5 }] });
        expect((await rows.pendingTimers(sagaId)).map((t) => t.name)).toEqual(['bad']);
        expect(dispatcher.stats()).toMatchObject({ timersFailed: 2, timersDeadLettered: 1 });
      });

      it('poison rows never starve healthy ones: 2 x batchSize failing timers due first, 50 healthy ones after', async () => {
        const batchSize = 20;
        const { runtime, dispatcher, rows, clock } = setup({
          batchSize,
          maxAttempts: 4,
          backoff: { baseMs: 1_000, maxMs: 4_000, jitter: true },
        });
        await quiet(dispatcher);
        const poison = await start(runtime, [
          ...Array.from(
            { length: 2 * batchSize },
            (_, i): Action => ({
              op: 'schedule',
              name: `poison-${i}`,
              after: i,
              message: tick(`poison-${i}`, [{ op: 'throw', message: 'renamed event type' }]),
            }),
          ),
        ]);
        const healthy = await start(runtime, [
          ...Array.from(
            { length: 50 },
            (_, i): Action => ({ op: 'schedule', name: `ok-${i}`, after: 1_000 + i, message: tick(`ok-${i}`, [{ op: 'inc' }]) }),
          ),
        ]);
        const first = await advanceAndDrain(clock, dispatcher, 2_000);
        expect(first.timers).toMatchObject({ fired: 50, failed: 2 * batchSize });
        expect(await rows.saga(healthy.key)).toMatchObject({ counter: 50 });
        // Keep advancing past the backoff until every poison row is retired.
        for (let i = 0; i < 3; i++) await advanceAndDrain(clock, dispatcher, 4_000);
        expect(await rows.pendingTimers(poison.sagaId)).toEqual([]);
        const retired = await rows.timers({ sagaId: poison.sagaId });
        expect(retired).toHaveLength(2 * batchSize);
        expect(retired.every((t) => t.outcome === 'dead_lettered' && t.attempts === 4)).toBe(true);
        await runtime.handle(scriptedSaga, { type: 'Do', key: poison.key, actions: [{ op: 'schedule', name: 'poison-0' }] });
        expect((await rows.pendingTimers(poison.sagaId)).map((t) => t.name)).toEqual(['poison-0']);
      });

      it('a timer whose started deliveries keep dying with their dispatcher is dead-lettered, not retried forever', async () => {
        // deliveryTimeoutMs = leaseMs: a started delivery is taken over once both its lease and its time are up.
        const { runtime, dispatcher, rows, clock } = setup({ maxAttempts: 3, leaseMs: 30_000, deliveryTimeoutMs: 30_000 });
        await quiet(dispatcher);
        const { key, sagaId } = await start(runtime, [
          { op: 'schedule', name: 'killer', after: 0, message: tick('killer', [{ op: 'inc' }]) },
        ]);
        // Three dispatchers claim it in turn, start its delivery and die before finishing (lease left behind).
        for (let crash = 0; crash < 3; crash++) {
          const lease = new Date(clock.now().getTime() + 30_000);
          const [claim] = await claimTimers(runtime, clock.now(), lease);
          expect((await markDeliveriesStarted(runtime.context, DISPATCH_TABLES.timer, [claim!], clock.now())).written).toEqual([claim!.id]);
          clock.advance(30_000);
        }
        const [taken] = await rows.pendingTimers(sagaId);
        expect(taken).toMatchObject({ attempts: 2, lastError: expect.stringMatching(/^LeaseExpired/) });
        // The next claim counts the third lost delivery and retires the timer without delivering it again.
        expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 0, deadLettered: 1 });
        const [dead] = await rows.timers({ sagaId, name: 'killer' });
        expect(dead).toMatchObject({ outcome: 'dead_lettered', attempts: 3, lockedUntil: null });
        expect(dead?.deadLetterReason).toMatch(/failed 3 time\(s\), the last with: LeaseExpired/);
        expect(await rows.saga(key)).toMatchObject({ counter: 0, version: 0 });
      });

      it('a started delivery whose lease ran out is neither taken over nor charged until deliveryTimeoutMs after its start', async () => {
        // Its dispatcher may have lost the database for longer than the lease while the step still runs.
        const { runtime, dispatcher, rows, clock } = setup({ maxAttempts: 3, leaseMs: 30_000, deliveryTimeoutMs: 120_000 });
        await quiet(dispatcher);
        const { key, sagaId } = await start(runtime, [{ op: 'schedule', name: 'slow', after: 0, message: tick('slow', [{ op: 'inc' }]) }]);
        const [claim] = await claimTimers(runtime, clock.now(), new Date(clock.now().getTime() + 30_000));
        expect((await markDeliveriesStarted(runtime.context, DISPATCH_TABLES.timer, [claim!], clock.now())).written).toEqual([claim!.id]);

        clock.advance(31_000);
        expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 0 });
        expect(await rows.pendingTimers(sagaId)).toMatchObject([{ attempts: 0, lastError: null }]);
        clock.advance(89_000);
        // 120 s after its start the delivery cannot be running any more (it would have timed out): charged.
        expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 1 });
        expect((await rows.timers({ sagaId }))[0]).toMatchObject({
          outcome: 'fired',
          attempts: 1,
          lastError: expect.stringMatching(/^LeaseExpired/),
        });
        expect(await rows.saga(key)).toMatchObject({ counter: 1 });
      });

      it('a dispatcher never re-claims a row it is still delivering, even when its lease ran out during an outage', async () => {
        const { runtime, rows, clock } = setup();
        const gate = deferred();
        const entered = deferred();
        const slow = scriptedSagaWithTick(async (saga, message) => {
          entered.resolve();
          await gate.promise;
          saga.log += `tick:${message.label};`;
        });
        const own = new SagaDispatcher({
          runtime: new SagaRuntime({ em: db().orm.em, sagas: [slow], clock }),
          clock,
          logger: silentLogger,
          maxAttempts: 2,
          leaseMs: 30_000,
          deliveryTimeoutMs: 60_000,
        });
        dispatchers.push(own);
        await quiet(own);
        const { key, sagaId } = await start(runtime, [{ op: 'schedule', name: 'held', after: 0 }]);
        const passing = own.runOnce();
        await entered.promise;
        // As if renewals could not reach the database for longer than the lease, and longer than the delivery
        // timeout ago by the database's marks: every criterion but "held here" says the row may be taken.
        const past = new Date(clock.now().getTime() - 61_000);
        await db().orm.em.fork().nativeUpdate(SagaTimer, { sagaId }, { lockedUntil: past, deliveryStartedAt: past });

        expect((await own.runOnce()).timers).toMatchObject({ claimed: 0 });
        gate.resolve();
        expect((await passing).timers).toMatchObject({ claimed: 1, fired: 1, failed: 0 });
        expect((await rows.timers({ sagaId }))[0]).toMatchObject({ outcome: 'fired', attempts: 0, lastError: null });
        expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:held;' });
      });

      it('a claim whose dispatcher died before the delivery started is taken over without charging an attempt', async () => {
        const { runtime, dispatcher, rows, clock } = setup({ maxAttempts: 2, leaseMs: 30_000 });
        await quiet(dispatcher);
        const { key, sagaId } = await start(runtime, [
          { op: 'schedule', name: 'waiting', after: 0, message: tick('waiting', [{ op: 'inc' }]) },
        ]);
        // Claimed in a batch five times by dispatchers that died before reaching this row.
        for (let crash = 0; crash < 5; crash++) {
          expect(await claimTimers(runtime, clock.now(), new Date(clock.now().getTime() + 30_000))).toHaveLength(1);
          clock.advance(30_000);
        }
        expect(await rows.pendingTimers(sagaId)).toMatchObject([{ attempts: 0, lastError: null }]);
        expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 1, deadLettered: 0 });
        expect(await rows.saga(key)).toMatchObject({ counter: 1, log: 'started;tick:waiting;' });
        expect((await rows.timers({ sagaId }))[0]).toMatchObject({ outcome: 'fired', attempts: 0 });
      });

      it('maxAttempts below 2 is refused: a row delivered beside a process-killing one would be dead-lettered undelivered', () => {
        const { runtime } = setup();
        expect(() => new SagaDispatcher({ runtime, maxAttempts: 1 })).toThrow(
          expect.objectContaining({ code: 'OPTION_INVALID', message: expect.stringMatching(/maxAttempts must be at least 2/) }),
        );
      });

      it('a timer whose saga type is no longer registered fails and is dead-lettered with the reason', async () => {
        const { runtime, dispatcher, rows, clock } = setup({ maxAttempts: 2 });
        await quiet(dispatcher);
        const { sagaId } = await start(runtime, [{ op: 'schedule', name: 't', after: 0 }]);
        await db().orm.em.fork().nativeUpdate(SagaTimer, { sagaId }, { sagaType: 'renamed' });
        expect((await dispatcher.runOnce()).timers).toMatchObject({ failed: 1 });
        clock.advance(3_600_000);
        expect((await dispatcher.runOnce()).timers).toMatchObject({ deadLettered: 1 });
        const [row] = await rows.timers({ sagaId });
        expect(row?.deadLetterReason).toMatch(/Saga 'renamed' is not registered/);
      });
    });

    describe('catch-up policies', () => {
      // Three timers per saga came due while no dispatcher ran: 3 days, 2 hours and 2 minutes ago.
      const backlog = async (policy: CatchUpPolicy) => {
        const ctx = setup({ catchUp: { policy, maxAgeMs: 24 * 3_600_000, backlogAfterMs: 60_000 } });
        await quiet(ctx.dispatcher);
        const { key, sagaId } = await start(ctx.runtime, [
          { op: 'schedule', name: 'days', after: 0 },
          { op: 'schedule', name: 'hours', after: 3 * 86_400_000 - 2 * 3_600_000 },
          { op: 'schedule', name: 'minutes', after: 3 * 86_400_000 - 120_000 },
        ]);
        ctx.clock.advance({ days: 3 });
        const report = await drainDueTimers(ctx.dispatcher);
        const timers = await ctx.rows.timers({ sagaId });
        const outcome = (name: string) => timers.find((t) => t.name === name)?.outcome;
        return { ...ctx, key, report, outcome, saga: await ctx.rows.saga(key) };
      };

      it('fire-all replays the whole backlog, oldest first', async () => {
        const { report, outcome, saga } = await backlog('fire-all');
        expect(report.timers).toMatchObject({ fired: 3, missed: 0 });
        expect(saga?.log).toBe('started;tick:days;tick:hours;tick:minutes;');
        expect([outcome('days'), outcome('hours'), outcome('minutes')]).toEqual(['fired', 'fired', 'fired']);
      });

      it('fire-latest-per-saga fires only the newest overdue timer and stamps the older backlog missed', async () => {
        const { report, outcome, saga, dispatcher } = await backlog('fire-latest-per-saga');
        expect(report.timers).toMatchObject({ fired: 1, missed: 2 });
        expect(saga?.log).toBe('started;tick:minutes;');
        expect([outcome('days'), outcome('hours'), outcome('minutes')]).toEqual(['missed', 'missed', 'fired']);
        expect(dispatcher.stats().timersMissed).toBe(2);
      });

      it('skip-beyond-max-age stamps missed what is overdue by more than the max age and fires the rest', async () => {
        const { report, outcome, saga } = await backlog('skip-beyond-max-age');
        expect(report.timers).toMatchObject({ fired: 2, missed: 1 });
        expect(saga?.log).toBe('started;tick:hours;tick:minutes;');
        expect([outcome('days'), outcome('hours'), outcome('minutes')]).toEqual(['missed', 'fired', 'fired']);
      });

      it('a timer that is retrying after a failure is not backlog', async () => {
        const { runtime, dispatcher, rows, clock } = setup({
          catchUp: { policy: 'skip-beyond-max-age', maxAgeMs: 60_000 },
          backoff: { baseMs: 120_000, maxMs: 120_000, jitter: false },
        });
        await quiet(dispatcher);
        const { sagaId } = await start(runtime, [
          { op: 'schedule', name: 'flaky', after: 0, message: tick('flaky', [{ op: 'throw', message: 'once' }]) },
        ]);
        expect((await dispatcher.runOnce()).timers.failed).toBe(1);
        // Two minutes later it is overdue by more than maxAge, but it failed once: it is retried, not missed.
        clock.advance(120_000);
        const pass = await dispatcher.runOnce();
        expect(pass.timers).toMatchObject({ missed: 0 });
        expect((await rows.timers({ sagaId, name: 'flaky' }))[0]).toMatchObject({ attempts: 2 });
      });
    });

    describe('the loop', () => {
      it('start() fires what is due, stop() resolves when idle; await using stops it too', async () => {
        const { runtime, dispatcher, rows, clock } = setup({ pollIntervalMs: 5_000 });
        await quiet(dispatcher);
        const { key } = await start(runtime, [{ op: 'schedule', name: 'a', after: 0 }]);
        const idle = () =>
          new Promise<void>((resolve) => {
            const off = dispatcher.on('idle', () => {
              off();
              resolve();
            });
          });
        let firstIdle = idle();
        dispatcher.start();
        expect(dispatcher.running).toBe(true);
        expect(() => dispatcher.start()).toThrow(/already running/);
        await firstIdle;
        expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:a;' });
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'b', after: 5_000 }] });
        firstIdle = idle();
        clock.advance(5_000);
        await firstIdle;
        expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:a;tick:b;' });
        await dispatcher.stop();
        expect(dispatcher.running).toBe(false);
        {
          await using scoped = new SagaDispatcher({ runtime, logger: silentLogger });
          scoped.start();
          expect(scoped.running).toBe(true);
        }
      });

      it('a step that aborts or times out is a delivery failure; the loop keeps running', async () => {
        const release = deferred();
        const entered = deferred();
        const slow = scriptedSagaWithTick(async (saga, message) => {
          if (message.label === 'abort') throw new DOMException('The operation was aborted', 'AbortError');
          entered.resolve();
          await release.promise;
          saga.counter += 1;
        });
        const { runtime, dispatcher, rows, clock } = setup(
          { deliveryTimeoutMs: 10_000, pollIntervalMs: 1_000, backoff: { baseMs: 60_000, jitter: false } },
          [slow],
        );
        await quiet(dispatcher);
        const key = uniqueKey('loop');
        const started = await runtime.handle(slow, {
          type: 'Start',
          key,
          actions: [],
        });
        await db().orm.em.fork().nativeDelete(SagaTimer, {});
        await new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock }).handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [
            { op: 'schedule', name: 'abort', after: 0, message: tick('abort') },
            { op: 'schedule', name: 'hang', after: 1, message: tick('hang') },
          ],
        });
        const failures: number[] = [];
        // A pass waiting on the hanging step is overtaken by the next (which may idle first): wait for the
        // pass that reports the timeout, whichever reports it.
        const failedTwice = new Promise<void>((resolve) =>
          dispatcher.on('pass', (pass) => {
            failures.push(pass.timers.failed);
            if (failures.reduce((a, b) => a + b, 0) >= 2) resolve();
          }),
        );
        dispatcher.start();
        clock.advance(1);
        await entered.promise;
        // The hanging step runs past deliveryTimeoutMs: a failure, and its late result is discarded.
        clock.advance(10_000);
        await failedTwice;
        expect(dispatcher.running).toBe(true);
        expect(failures.reduce((a, b) => a + b, 0)).toBe(2);
        release.resolve();
        await dispatcher.stop();
        const timers = await rows.timers({ sagaId: started.sagaId });
        expect(timers.find((t) => t.name === 'abort')).toMatchObject({ attempts: 1, lastError: 'AbortError: The operation was aborted' });
        expect(timers.find((t) => t.name === 'hang')).toMatchObject({ attempts: 1, lastError: expect.stringMatching(/DeliveryTimeout/) });
        expect(await rows.saga(key)).toMatchObject({ counter: 0, version: 0 });
      });

      it('stop() releases claimed rows it has not started, so another dispatcher takes them at once', async () => {
        const { runtime, dispatcher, rows, clock } = setup({ concurrency: 1, batchSize: 10 });
        await quiet(dispatcher);
        const gate = deferred();
        const entered = deferred();
        const blocking = scriptedSagaWithTick(async (saga, message) => {
          if (message.label === 't0') {
            entered.resolve();
            await gate.promise;
          }
          saga.log += `tick:${message.label};`;
        });
        const blockingRuntime = new SagaRuntime({ em: db().orm.em, sagas: [blocking], clock });
        const stopping = new SagaDispatcher({ runtime: blockingRuntime, logger: silentLogger, concurrency: 1 });
        dispatchers.push(stopping);
        const { key, sagaId } = await start(
          runtime,
          [0, 1, 2].map((i): Action => ({ op: 'schedule', name: `t${i}`, after: i })),
        );
        clock.advance(10);
        stopping.start();
        await entered.promise;
        const stopped = stopping.stop();
        gate.resolve();
        await stopped;
        expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:t0;' });
        const pending = await rows.pendingTimers(sagaId);
        expect(pending.map((t) => [t.name, t.lockedUntil])).toEqual([
          ['t1', null],
          ['t2', null],
        ]);
        // Another dispatcher picks them up without waiting for the lease.
        expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 2, fired: 2 });
      });

      it('a failed pass is reported and retried; only stop() ends the loop', async () => {
        const { dispatcher, clock } = setup({ pollIntervalMs: 1_000, dbRetryMaxMs: 4_000 });
        await quiet(dispatcher);
        const em = db().orm.em;
        const failures: number[] = [];
        const failed = new Promise<void>((resolve) =>
          dispatcher.on('passFailed', (_e, n) => {
            failures.push(n);
            if (n === 2) resolve();
          }),
        );
        // Make every pass fail: the timer table is gone.
        await em.getConnection().execute('alter table "saga_timer" rename to "saga_timer_away"');
        try {
          dispatcher.start();
          await new Promise<void>((resolve) => dispatcher.on('passFailed', () => resolve()));
          clock.advance(1_000);
          await failed;
          expect(dispatcher.running).toBe(true);
        } finally {
          await em.getConnection().execute('alter table "saga_timer_away" rename to "saga_timer"');
        }
        const recovered = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
        clock.advance(4_000);
        await recovered;
        await dispatcher.stop();
        expect(failures.slice(0, 2)).toEqual([1, 2]);
      });
    });

    describe('outbox relay', () => {
      it('hands each outbox row to the publisher with id, type, payload and headers, then stamps it published', async () => {
        const published: OutboxEnvelope[] = [];
        const { runtime, dispatcher, rows } = setup({ publish: async (envelope) => void published.push(envelope) });
        await quiet(dispatcher);
        const { sagaId } = await start(runtime, [
          { op: 'send', message: { type: 'ReserveStock', qty: 2 }, headers: { tenant: 'acme' } },
          { op: 'send', message: { type: 'Notify' } },
        ]);
        const report = await drainDueTimers(dispatcher);
        const mine = published.filter((e) => e.sagaId === sagaId);
        expect(mine.map((e) => e.type)).toEqual(['ReserveStock', 'Notify']);
        expect(mine[0]).toMatchObject({
          type: 'ReserveStock',
          payload: { type: 'ReserveStock', qty: 2 },
          sagaType: 'scripted',
          attempts: 0,
        });
        expect(mine[0]?.headers).toMatchObject({ tenant: 'acme', 'saga-id': sagaId, 'saga-type': 'scripted' });
        expect(report.outbox.published).toBeGreaterThanOrEqual(2);
        expect((await rows.outbox(sagaId)).every((o) => o.outcome === 'published' && o.dispatchedAt !== null)).toBe(true);
      });

      it('a failing publisher backs off and dead-letters; a redelivery carries the same envelope id', async () => {
        const seen: OutboxEnvelope[] = [];
        const { runtime, dispatcher, rows, clock } = setup({
          maxAttempts: 2,
          publish: async (envelope) => {
            seen.push(envelope);
            throw new Error('broker unavailable');
          },
        });
        await quiet(dispatcher);
        await db().orm.em.fork().nativeDelete('SagaOutbox', {});
        const { sagaId } = await start(runtime, [{ op: 'send', message: { type: 'Flaky' } }]);
        expect((await dispatcher.runOnce()).outbox).toMatchObject({ claimed: 1, failed: 1 });
        let [row] = await rows.outbox(sagaId);
        expect(row).toMatchObject({ attempts: 1, lastError: 'Error: broker unavailable', dispatchedAt: null });
        clock.advance(1_000);
        expect((await dispatcher.runOnce()).outbox).toMatchObject({ deadLettered: 1 });
        [row] = await rows.outbox(sagaId);
        expect(row).toMatchObject({ outcome: 'dead_lettered', attempts: 2 });
        expect(seen.map((e) => e.id)).toEqual([row?.id, row?.id]);
        expect(seen.map((e) => e.attempts)).toEqual([0, 1]);
      });
    });
  });
}
