// A row lock held outside the runtime (an application's own transaction, an operator's session) must not stall
// the units of work of other sagas. Group commit writes the units that arrive together in one transaction, and at
// most `maxGroups` such transactions at once: a unit waiting for a held row would hold its whole group, and two of
// them every write of the runtime. A group therefore waits at most `groupCommit.lockTimeoutMs` for a row lock; the
// unit that met it is run again in a transaction of its own, which waits as long as the row stays held.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import {
  defineSaga,
  SagaConcurrencyError,
  SagaDispatcher,
  SagaRuntime,
  type SagaRuntimeOptions,
  silentLogger,
} from '../../../src/index.js';
import { pgConnectionOptions } from '../../../src/orm/connection-info.js';
import { lockTimeoutSql } from '../../../src/sql/lock-timeout-statement.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { drainContinuations, FlushHold } from '../../support/flush-hold.js';
import { recordingClock } from '../../support/recording-clock.js';
import { lockWaiters, rowLocker, untilLockWaiters } from '../../support/row-locks.js';
import { rowsOf } from '../../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

type Msg =
  | { readonly type: 'Start'; readonly key: string }
  | { readonly type: 'Do'; readonly key: string; readonly inc: number; readonly gated?: boolean };

/** Steps of gated messages wait here until the test lets them all go, so their units reach the write phase together. */
let gate: { entered: number; expected: number; all: ReturnType<typeof deferred<void>>; go: ReturnType<typeof deferred<void>> } | undefined;

/** How many times the step of each key's Do ran: a unit that leaves its group or takes a turn runs it again. */
const runs = new Map<string, number>();

const saga = defineSaga<ScriptedSaga, Msg>({
  name: 'scripted',
  state: ScriptedSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Do: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start: () => undefined,
    Do: async (state, message) => {
      if (message.type !== 'Do') return;
      for (const key of [message.key, `${message.key}#${message.inc}`]) runs.set(key, (runs.get(key) ?? 0) + 1);
      if (message.gated && gate) {
        if (++gate.entered === gate.expected) gate.all.resolve();
        await gate.go.promise;
      }
      state.counter += message.inc;
    },
  },
});

describe('group commit and a row held by another transaction (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  const locks: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const release of locks.splice(0)) await release().catch(() => undefined);
    for (const orm of opened.splice(0)) await orm.close();
  });

  /** Another ORM (own pool) on the test database, closed after the test. */
  async function another(overrides: Parameters<ReturnType<typeof db>['openAnother']>[0] = {}): Promise<MikroORM> {
    const orm = await db().openAnother(overrides);
    opened.push(orm);
    return orm;
  }

  /** A runtime of `saga` on `orm` that retries conflicts at once. */
  function runtimeOn(orm: MikroORM, options: Partial<SagaRuntimeOptions> = {}): SagaRuntime {
    return new SagaRuntime({ em: orm.em, sagas: [saga], ...options, concurrency: { baseDelayMs: 0, ...options.concurrency } });
  }

  /**
   * A transaction of another connection (an application's own, an operator's session): `lock` locks saga rows
   * (`column` is "key" or "id"), `release` rolls it back (once; the test's end does it too).
   */
  async function locker() {
    const { lock, release } = await rowLocker(await another(), 'scripted_saga');
    locks.push(release);
    return { lock: (column: 'key' | 'id', value: string) => lock(column, value), release };
  }

  /** Starts sagas, then holds the first one's row locked in a transaction of another connection until released. */
  async function heldRow(keys: string[]) {
    const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
    for (const key of keys) await plain.handle(saga, { type: 'Start', key });
    const { lock, release } = await locker();
    await lock('key', keys[0]!);
    return { release };
  }

  it('units of other sagas commit while two units wait for a held row; those two commit once it is released', async () => {
    const [held, ...others] = ['held', 'a', 'b', 'c', 'd'].map((name) => uniqueKey(`held-${name}`)) as [string, ...string[]];
    const { release } = await heldRow([held, ...others]);
    const runtime = runtimeOn(await another(), { groupCommit: { maxGroups: 2, lockTimeoutMs: 50 } });
    const rows = rowsOf(db().orm);

    // Two units of the held saga: each takes a group of its own (both groups the runtime writes at once) and waits.
    const waiting = [runtime.handle(saga, { type: 'Do', key: held, inc: 1 }), runtime.handle(saga, { type: 'Do', key: held, inc: 10 })];
    // Units of four other sagas, arriving while those two wait: without the group lock timeout they queue behind
    // both groups until the row is released, and this await never returns (the test times out).
    const done = await Promise.all(others.map((key) => runtime.handle(saga, { type: 'Do', key, inc: 1 })));
    expect(done.map((result) => result.outcome)).toEqual(['handled', 'handled', 'handled', 'handled']);
    for (const key of others) expect(await rows.saga(key)).toMatchObject({ counter: 1, version: 1 });

    // The held saga's units left their groups and wait in transactions of their own; nothing of them is written.
    expect(await rows.saga(held)).toMatchObject({ counter: 0, version: 0 });
    expect(await lockWaiters(db().orm)).toBeGreaterThanOrEqual(1);
    await release();
    const results = await Promise.all(waiting);
    expect(results.map((result) => result.outcome)).toEqual(['handled', 'handled']);
    expect(await rows.saga(held)).toMatchObject({ counter: 11, version: 2 });
  });

  it('six units of a held saga wait with at most maxGroups + 1 connections: a pool of five still serves four other sagas', async () => {
    const [held, ...others] = ['held', 'a', 'b', 'c', 'd'].map((name) => uniqueKey(`held-pool-${name}`)) as [string, ...string[]];
    const { release } = await heldRow([held, ...others]);
    const log: string[] = [];
    const orm = await another({ pool: { min: 0, max: 5 }, debug: ['query'], logger: (line: string) => log.push(line) });
    const runtime = runtimeOn(orm, { groupCommit: { maxGroups: 2, lockTimeoutMs: 20 } });
    const rows = rowsOf(db().orm);

    // Six units, told apart by their increments (1 to 6).
    const waiting = Array.from({ length: 6 }, (_, n) => runtime.handle(saga, { type: 'Do', key: held, inc: n + 1 }));
    // All six left their groups: each ran its step a second time, which it does only after leaving (from then on
    // it writes alone or takes turns, never in a group again). Six transactions waiting alone would hold all five
    // connections and queue the sixth: no other unit could even read its saga.
    while ([1, 2, 3, 4, 5, 6].some((inc) => (runs.get(`${held}#${inc}`) ?? 0) < 2)) await drainContinuations();
    const done = await Promise.all(others.map((key) => runtime.handle(saga, { type: 'Do', key, inc: 1 })));
    expect(done.map((result) => result.outcome)).toEqual(['handled', 'handled', 'handled', 'handled']);
    // maxGroups transactions waiting alone, and at most one unit trying its turn with the lock timeout.
    expect(await lockWaiters(db().orm)).toBeLessThanOrEqual(3);

    await release();
    expect((await Promise.all(waiting)).map((result) => result.outcome)).toEqual(Array(6).fill('handled'));
    expect(await rows.saga(held)).toMatchObject({ counter: 21, version: 6 });
  });

  it('in a group of several units, the one waiting for a held row is rolled back to its savepoint; the others commit', async () => {
    const [held, first, ...others] = ['held', 'first', 'a', 'b', 'c'].map((name) => uniqueKey(`held-${name}`)) as [
      string,
      string,
      ...string[],
    ];
    const { release } = await heldRow([held, first, ...others]);
    const log: string[] = [];
    const orm = await another({ debug: ['query'], logger: (line: string) => log.push(line) });
    const hold = new FlushHold();
    orm.em.getEventManager().registerSubscriber(hold);
    const runtime = runtimeOn(orm, { groupCommit: { maxGroups: 1, lockTimeoutMs: 50 } });
    const rows = rowsOf(db().orm);

    // The only group slot is taken by `first`, held at its flush: the next units queue into one group.
    const blocker = hold.arm(first);
    const firstUnit = runtime.handle(saga, { type: 'Do', key: first, inc: 1 });
    await blocker.reached.promise;
    gate = { entered: 0, expected: 4, all: deferred(), go: deferred() };
    const waiting = runtime.handle(saga, { type: 'Do', key: held, inc: 7, gated: true });
    const done = others.map((key) => runtime.handle(saga, { type: 'Do', key, inc: 1, gated: true }));
    await gate.all.promise; // all four read their saga and ran their step up to the gate
    gate.go.resolve();
    await drainContinuations(); // ...and queued their write behind the held group
    blocker.release.resolve();
    await firstUnit;

    expect((await Promise.all(done)).map((result) => result.outcome)).toEqual(['handled', 'handled', 'handled']);
    const grouped = log.filter((line) => /savepoint saga_unit_/i.test(line));
    expect(grouped.filter((line) => /rollback to savepoint/i.test(line))).toHaveLength(1);
    // The bound goes with the group's first SAVEPOINT (logged with it on 7, just before it on 6, which folds both
    // into the round trip of the first unit's first statement).
    const firstSavepoint = log.findIndex((line) => /savepoint saga_unit_0\b/i.test(line));
    expect(`${log[firstSavepoint - 1]} ${log[firstSavepoint]}`).toMatch(/set_config\('lock_timeout'/i);
    expect(grouped.filter((line) => /set_config\('lock_timeout'/i.test(line)).length).toBeLessThanOrEqual(1);
    expect(await rows.saga(held)).toMatchObject({ counter: 0, version: 0 });

    await release();
    expect(await waiting).toMatchObject({ outcome: 'handled', version: 1, attempts: 1, conflicts: 0 });
    expect(await rows.saga(held)).toMatchObject({ counter: 7, version: 1 });
  });

  it('a unit that met the group lock timeout is not charged a concurrency attempt: with maxAttempts 1 it still commits', async () => {
    const held = uniqueKey('held-one');
    const { release } = await heldRow([held]);
    const runtime = new SagaRuntime({
      em: db().orm.em,
      sagas: [saga],
      groupCommit: { lockTimeoutMs: 20 },
      concurrency: { maxAttempts: 1 },
    });
    const rows = rowsOf(db().orm);

    const unit = runtime.handle(saga, { type: 'Do', key: held, inc: 5 });
    // Left its group (20 ms), then waits alone: a lock waiter until the row is released.
    await untilLockWaiters(db().orm);
    await release();
    expect(await unit).toMatchObject({ outcome: 'handled', version: 1, attempts: 1, conflicts: 0 });
    expect(await rows.saga(held)).toMatchObject({ counter: 5, version: 1 });
  });

  it('a unit of another saga that left its group for a briefly held row commits once that row is free, while the solo slots wait for a long-held one', async () => {
    const [long, brief] = ['long', 'brief'].map((name) => uniqueKey(`held-hol-${name}`)) as [string, string];
    // `long` stays held by an idle application transaction; `brief` is held only for a moment.
    const { release: releaseLong } = await heldRow([long, brief]);
    const { lock: lockBrief, release: releaseBrief } = await locker();
    const log: string[] = [];
    const orm = await another({ debug: ['query'], logger: (line: string) => log.push(line) });
    const runtime = runtimeOn(orm, { groupCommit: { maxGroups: 1, lockTimeoutMs: 20 }, concurrency: { maxAttempts: 1 } });
    const rows = rowsOf(db().orm);
    const rollbacks = () => log.filter((line) => /rollback/i.test(line)).length;

    // The unit of `long` leaves its group and waits alone, in the only solo slot (maxGroups 1).
    const waitingLong = runtime.handle(saga, { type: 'Do', key: long, inc: 1 });
    while (rollbacks() < 1 || (await lockWaiters(db().orm)) < 1) await drainContinuations();
    // `brief` is held for a moment: its unit leaves its group too.
    await lockBrief('key', brief);
    const briefUnit = runtime.handle(saga, { type: 'Do', key: brief, inc: 1 });
    while (rollbacks() < 2) await drainContinuations();
    await releaseBrief();
    // Its row is free now: it must not wait for `long`'s row, held by an unrelated transaction for as long as that
    // lasts (here: forever; the test times out).
    // Its turns with the lock timeout while `brief` was still held are not attempts.
    expect(await briefUnit).toMatchObject({ outcome: 'handled', version: 1, attempts: 1, conflicts: 0 });
    expect(await rows.saga(brief)).toMatchObject({ counter: 1, version: 1 });

    await releaseLong();
    expect(await waitingLong).toMatchObject({ outcome: 'handled', version: 1 });
  }, 10_000);

  it("a unit taking turns for a held row pauses on the runtime's clock before each turn; it commits at the turn after the release", async () => {
    const [long, held] = ['long', 'turns'].map((name) => uniqueKey(`held-pace-${name}`)) as [string, string];
    const { release: releaseLong } = await heldRow([long, held]);
    const { lock, release } = await locker();
    await lock('key', held);
    const log: string[] = [];
    const orm = await another({ debug: ['query'], logger: (line: string) => log.push(line) });
    // The runtime's clock, and every pause it asked of it.
    const fake = new FakeClock();
    const { clock, sleeps: pauses } = recordingClock(fake);
    const runtime = new SagaRuntime({
      em: orm.em,
      sagas: [saga],
      clock,
      groupCommit: { maxGroups: 1, lockTimeoutMs: 1 },
      // Pauses of 30-60 s: the real-time bound of a pause (a FakeClock that is never advanced must not hang a
      // unit) never ends one during this test, only the clock's advance() does.
      concurrency: { baseDelayMs: 60_000, maxDelayMs: 60_000 },
    });
    const rows = rowsOf(db().orm);

    // The unit of `long` waits alone in the only solo slot: the unit of `held` must take turns.
    const waitingLong = runtime.handle(saga, { type: 'Do', key: long, inc: 1 });
    while (!log.some((line) => /rollback/i.test(line)) || (await lockWaiters(db().orm)) < 1) await drainContinuations();
    const unit = runtime.handle(saga, { type: 'Do', key: held, inc: 5 });
    // It ran its step in its group, then once more for its first turn; that turn met the lock timeout (1 ms).
    // Unpaced, it would read and run its step again at once, over and over (ten runs end this loop).
    while (pauses.length === 0 && (runs.get(held) ?? 0) < 10) await drainContinuations();
    expect(runs.get(held)).toBe(2);
    expect(pauses).toHaveLength(1);
    expect(pauses[0]).toBeGreaterThanOrEqual(30_000);
    expect(pauses[0]).toBeLessThanOrEqual(60_000);

    // Its next turn comes when the clock passes the pause; the row is still held, so it pauses again.
    fake.advance(60_000);
    while (pauses.length === 1 && (runs.get(held) ?? 0) < 10) await drainContinuations();
    expect(runs.get(held)).toBe(3);
    expect(pauses).toHaveLength(2);

    await release();
    fake.advance(60_000);
    // Turns are neither attempts nor conflicts.
    expect(await unit).toMatchObject({ outcome: 'handled', version: 1, attempts: 1, conflicts: 0 });
    expect(runs.get(held)).toBe(4);
    expect(await rows.saga(held)).toMatchObject({ counter: 5, version: 1 });
    await releaseLong();
    expect(await waitingLong).toMatchObject({ outcome: 'handled', version: 1 });
  });

  // A pause between turns waits on the runtime's clock, and never longer than its length in real time: with a
  // FakeClock that the test does not advance, the unit still commits once its row is free.
  it('a unit that took turns commits once its row is released, without the test advancing the FakeClock', async () => {
    const [long, held] = ['long', 'turns'].map((name) => uniqueKey(`fake-turns-${name}`)) as [string, string];
    const { release: releaseLong } = await heldRow([long, held]);
    const { lock, release } = await locker();
    await lock('key', held);

    const log: string[] = [];
    const orm = await another({ debug: ['query'], logger: (line: string) => log.push(line) });
    // A FakeClock that is never advanced, seen through a wrapper only to know when the unit paused.
    const { clock, sleeps: pauses } = recordingClock(new FakeClock());
    // The documented defaults for concurrency (baseDelayMs 5, maxDelayMs 250).
    const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], clock, groupCommit: { maxGroups: 1, lockTimeoutMs: 1 } });

    // The unit of `long` waits alone in the only solo slot: the unit of `held` must take turns.
    const waitingLong = runtime.handle(saga, { type: 'Do', key: long, inc: 1 });
    while (!log.some((line) => /rollback/i.test(line)) || (await lockWaiters(db().orm)) < 1) await drainContinuations();
    const unit = runtime.handle(saga, { type: 'Do', key: held, inc: 5 });
    while (pauses.length === 0) await drainContinuations();

    // The row is free now. A real clock would end the pause within maxDelayMs; the FakeClock never moves here.
    await release();
    expect(await unit).toMatchObject({ outcome: 'handled', version: 1, attempts: 1, conflicts: 0 });
    expect(await rowsOf(db().orm).saga(held)).toMatchObject({ counter: 5, version: 1 });
    await releaseLong();
    expect(await waitingLong).toMatchObject({ outcome: 'handled', version: 1 });
  }, 5_000);

  it("a unit taking turns whose wait the connection's own lock_timeout ends gets lock-wait conflicts, up to CONCURRENCY_CONFLICT", async () => {
    const [busy, held] = ['busy', 'own'].map((name) => uniqueKey(`held-ownturn-${name}`)) as [string, string];
    const { release: releaseBusy } = await heldRow([busy, held]);
    const { lock, release } = await locker();
    await lock('key', held);
    // The application's own limit (30 ms) is shorter than the group's (250 ms): it is the one in force.
    const orm = await another({ driverOptions: pgConnectionOptions({ serverOptions: '-c lock_timeout=30' }) });
    const hold = new FlushHold();
    orm.em.getEventManager().registerSubscriber(hold);
    const runtime = runtimeOn(orm, { groupCommit: { maxGroups: 1, lockTimeoutMs: 250 }, concurrency: { maxAttempts: 2 } });

    // The unit of `busy` leaves its group for its held row, then holds the only solo slot at its flush (the
    // second flush of its saga): it has the slot, and keeps it until the test lets it go.
    const blocker = hold.arm(busy, 1);
    const busyUnit = runtime.handle(saga, { type: 'Do', key: busy, inc: 1 });
    await blocker.reached.promise;
    await releaseBusy(); // its UPDATE, once the flush goes on, finds the row free

    // The unit of `held` leaves its group and takes turns: each wait is ended by the connection's own limit,
    // which is a lock-wait conflict like anywhere else in the application. Counted as turns instead, it would
    // take turns for as long as the row stays held (the test times out).
    const error = await runtime.handle(saga, { type: 'Do', key: held, inc: 1 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SagaConcurrencyError);
    expect(error).toMatchObject({ code: 'CONCURRENCY_CONFLICT', details: { attempts: 2 } });
    expect((error as Error).message).toContain('a row stayed locked by another transaction past the lock timeout');
    await release();
    expect(await rowsOf(db().orm).saga(held)).toMatchObject({ counter: 0, version: 0 });

    blocker.release.resolve();
    expect(await busyUnit).toMatchObject({ outcome: 'handled', version: 1 });
  });

  it("a row still held past the connection's own lock_timeout ends in CONCURRENCY_CONFLICT naming the lock wait", async () => {
    const held = uniqueKey('held-timeout');
    const { release } = await heldRow([held]);
    // The application's own setting on every connection of its pool.
    const orm = await another({ driverOptions: pgConnectionOptions({ serverOptions: '-c lock_timeout=30' }) });
    const runtime = runtimeOn(orm, { concurrency: { maxAttempts: 2 } });
    try {
      const error = await runtime.handle(saga, { type: 'Do', key: held, inc: 1 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SagaConcurrencyError);
      expect(error).toMatchObject({ code: 'CONCURRENCY_CONFLICT' });
      expect((error as Error).message).toContain('a row stayed locked by another transaction past the lock timeout');
      expect((error as Error).message).not.toContain(held);
    } finally {
      await release();
    }
    expect(await rowsOf(db().orm).saga(held)).toMatchObject({ counter: 0, version: 0 });
  });

  it("a timer whose saga row stays held past the connection's lock_timeout is given back uncharged; it fires once the row is free", async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const key = uniqueKey('held-timer');
    const { sagaId } = await seeding.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'schedule', name: 'due', after: 0 }] });
    const { lock, release } = await locker();
    await lock('id', sagaId!);
    const orm = await another({ driverOptions: pgConnectionOptions({ serverOptions: '-c lock_timeout=30' }) });
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock, concurrency: { maxAttempts: 2, baseDelayMs: 0 } });
    const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
    const rows = rowsOf(db().orm);

    expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 0, failed: 0, interrupted: 1 });
    expect(await rows.pendingTimers(sagaId!)).toMatchObject([{ name: 'due', attempts: 0, lastError: null }]);
    await release();
    expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 1, failed: 0 });
    expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:due;' });
  });

  it("a group's lock timeout keeps the connection's own when that is not longer, says which is in force, and lasts only for the group's transaction", async () => {
    const setting = async (serverOptions: string | undefined, timeoutMs: number) => {
      const connection = (await another(serverOptions ? { driverOptions: pgConnectionOptions({ serverOptions }) } : {})).em.getConnection();
      const trx = await connection.begin();
      const [{ own }] = await connection.execute<[{ own: boolean }]>(lockTimeoutSql(timeoutMs), [], 'all', trx);
      const [inside] = await connection.execute<{ t: string }[]>("select current_setting('lock_timeout') as t", [], 'all', trx);
      await connection.rollback(trx);
      const [after] = await connection.execute<{ t: string }[]>("select current_setting('lock_timeout') as t");
      return [inside!.t, after!.t, own ? 'own' : 'ours'];
    };
    expect(await setting(undefined, 250)).toEqual(['250ms', '0', 'ours']);
    expect(await setting('-c lock_timeout=40', 250)).toEqual(['40ms', '40ms', 'own']);
    expect(await setting('-c lock_timeout=250', 250)).toEqual(['250ms', '250ms', 'own']);
    expect(await setting('-c lock_timeout=2min', 250)).toEqual(['250ms', '2min', 'ours']);
    expect(await setting('-c lock_timeout=1s', 999)).toEqual(['999ms', '1s', 'ours']);
  });
});
