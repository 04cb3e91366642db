// Group commit: the write phases of concurrent units of work share one transaction, a savepoint each. A unit that
// fails is rolled back to its savepoint alone and fails as it would alone; the others commit; nobody sees a unit's
// effects, or learns its result, before the group's COMMIT; groups lock in one order. On PostgreSQL a group whose
// COMMIT answer is lost reports an unknown outcome, and one whose connection is killed before COMMIT reports failures.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type HandleResult, SagaPersistenceError, SagaRuntime, type TimerDelivery } from '../../../src/index.js';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { drainContinuations, FlushHold } from '../../support/flush-hold.js';
import { type GatedSaga, gatedSaga } from '../../support/gated-saga.js';
import { untilLockWaiters } from '../../support/row-locks.js';
import { rowsOf } from '../../support/rows.js';
import { StepGate } from '../../support/step-gate.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';
import { CommitDroppingProxy } from '../../support/tcp-proxy.js';

/** The savepoint statements MikroORM logged, in order. */
function savepointLog(lines: string[]) {
  return lines.map((line) => /(rollback to savepoint|savepoint) saga_unit_\d+/i.exec(line)?.[1]?.toLowerCase()).filter(Boolean);
}

for (const dialect of DIALECTS) {
  describe(`group commit (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close();
    });

    /** A runtime on its own ORM (own pool), writing one group at a time, with a flush hold and a query log. */
    async function groupedRuntime(saga: GatedSaga) {
      const log: string[] = [];
      const orm = await db().openAnother({ debug: ['query'], logger: (line: string) => log.push(line) });
      opened.push(orm);
      const hold = new FlushHold();
      orm.em.getEventManager().registerSubscriber(hold);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], groupCommit: { maxGroups: 1 }, concurrency: { baseDelayMs: 0 } });
      return { runtime, hold, log, orm };
    }

    it('units of one group that fail (version conflict, unique violation, stale timer) roll back to their savepoints alone; the others commit', async () => {
      const gate = new StepGate(5);
      const saga = gatedSaga(gate);
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const rows = rowsOf(db().orm);
      const [a, b, c, d, e, taken, fresh] = ['a', 'b', 'c', 'd', 'e', 'taken', 'fresh'].map((n) => uniqueKey(`group-${n}`)) as [
        string,
        string,
        string,
        string,
        string,
        string,
        string,
      ];
      for (const key of [a, b, c, d, e, taken]) await plain.handle(saga, { type: 'Start', key });
      const dScheduled = await plain.handle(saga, { type: 'Do', key: d, schedule: 'ping' });
      const [timer] = await rows.pendingTimers(dScheduled.sagaId!);
      const { runtime, hold, log } = await groupedRuntime(saga);

      const staleDelivery: TimerDelivery = {
        id: timer!.id,
        token: randomUUID(), // another dispatcher took the timer over: our claim no longer holds
        sagaType: 'scripted',
        sagaId: dScheduled.sagaId!,
        name: 'ping',
        messageType: 'Tick',
        payload: { type: 'Tick', inc: 1, gated: true },
        dueAt: timer!.dueAt,
        attempts: 0,
        correlationId: null,
      };
      const units = {
        b: runtime.handle(saga, { type: 'Do', key: b, inc: 1, gated: true }),
        c: runtime.handle(saga, { type: 'Do', key: c, inc: 1, gated: true }),
        d: runtime.deliverTimer(staleDelivery),
        e: runtime.handle(saga, { type: 'Do', key: e, inc: 1, rekeyTo: taken, gated: true }).catch((error: unknown) => error),
        fresh: runtime.handle(saga, { type: 'Start', key: fresh, inc: 5, gated: true }),
      };
      await gate.all.promise;
      await plain.handle(saga, { type: 'Do', key: c, inc: 10 }); // c's unit read version 0: its write conflicts
      const blocker = hold.arm(a);
      const first = runtime.handle(saga, { type: 'Do', key: a, inc: 1 });
      await blocker.reached.promise; // the group of `a` is being written: the five wait for the next group
      gate.go.resolve();
      await drainContinuations();
      blocker.release.resolve();

      expect(await first).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await units.b).toMatchObject({ outcome: 'handled', version: 1, attempts: 1, conflicts: 0 });
      expect(await units.fresh).toMatchObject({ outcome: 'started', version: 0 });
      expect(await units.c).toMatchObject({ outcome: 'handled', version: 2, attempts: 2, conflicts: 1 });
      expect(await units.d).toMatchObject({ outcome: 'stale', sagaId: dScheduled.sagaId });
      const unique = await units.e;
      expect(unique).toBeInstanceOf(SagaPersistenceError);
      expect(unique).toMatchObject({ code: 'UNIQUE_VIOLATION', details: { operation: 'update', table: 'scripted_saga' } });
      // The five were one group: five savepoints; the three failures rolled back to theirs; c's retry ran alone.
      expect(savepointLog(log).filter((s) => s === 'savepoint')).toHaveLength(5);
      expect(savepointLog(log).filter((s) => s === 'rollback to savepoint')).toHaveLength(3);
      expect(await rows.saga(b)).toMatchObject({ counter: 1, version: 1 });
      expect(await rows.saga(fresh)).toMatchObject({ counter: 5, version: 0 });
      expect(await rows.saga(c)).toMatchObject({ counter: 11, version: 2 });
      expect(await rows.saga(d)).toMatchObject({ counter: 0, version: 0 }); // the stale delivery's change rolled back
      expect(await rows.pendingTimers(dScheduled.sagaId!)).toHaveLength(1);
      expect(await rows.saga(e)).toMatchObject({ counter: 0, version: 0 });
      expect(await rows.saga(taken)).toMatchObject({ counter: 0, version: 0 });
      expect(runtime.stats()).toMatchObject({ handled: 3, started: 1, timersStale: 1, concurrencyConflicts: 1 });
    });

    it("a unit's effects are visible, and its result known, only once its group commits", async () => {
      const gate = new StepGate(2);
      const saga = gatedSaga(gate);
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const rows = rowsOf(db().orm);
      const [a, b, z] = ['a', 'b', 'z'].map((n) => uniqueKey(`visible-${n}`)) as [string, string, string];
      // Created in this order: b's row sorts before z's, so b is written first in their group.
      for (const key of [a, b, z]) await plain.handle(saga, { type: 'Start', key });
      const { runtime, hold } = await groupedRuntime(saga);
      let bSettled = false;
      const bResult = runtime.handle(saga, { type: 'Do', key: b, inc: 1, gated: true }).finally(() => {
        bSettled = true;
      });
      const zResult = runtime.handle(saga, { type: 'Do', key: z, inc: 1, gated: true });
      await gate.all.promise;
      const blocker = hold.arm(a);
      const zHold = hold.arm(z);
      const first = runtime.handle(saga, { type: 'Do', key: a, inc: 1 });
      await blocker.reached.promise;
      gate.go.resolve();
      await drainContinuations();
      blocker.release.resolve();
      await first;
      await zHold.reached.promise; // b is written in the group transaction; z is being written

      expect(await rows.saga(b)).toMatchObject({ counter: 0, version: 0 });
      expect(bSettled).toBe(false);
      zHold.release.resolve();
      expect(await bResult).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await zResult).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await rows.saga(b)).toMatchObject({ counter: 1, version: 1 });
      expect(await rows.saga(z)).toMatchObject({ counter: 1, version: 1 });
    });

    it('by default writes two groups at once on PostgreSQL, one on SQLite (one writer at a time): there a unit that finds the group slot taken joins the next group', async () => {
      const [early, late] = [new StepGate(1), new StepGate(1)];
      const saga = gatedSaga(early, { second: late });
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const [a, b, c] = ['a', 'b', 'c'].map((n) => uniqueKey(`slots-${n}`)) as [string, string, string];
      for (const key of [a, b, c]) await plain.handle(saga, { type: 'Start', key });
      const log: string[] = [];
      const orm = await db().openAnother({ debug: ['query'], logger: (line: string) => log.push(line) });
      opened.push(orm);
      const hold = new FlushHold();
      orm.em.getEventManager().registerSubscriber(hold);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [saga] });
      const groupsAtOnce = dialect === 'postgresql' ? 2 : 1;
      expect(runtime.options.groupCommit).toMatchObject({ maxGroups: groupsAtOnce });

      // b and c read their rows first (SQLite's one connection is then held by a's transaction).
      const units = {
        b: runtime.handle(saga, { type: 'Do', key: b, inc: 1, gated: true }),
        c: runtime.handle(saga, { type: 'Do', key: c, inc: 1, late: true }),
      };
      await Promise.all([early.all.promise, late.all.promise]);
      const blocker = hold.arm(a);
      const first = runtime.handle(saga, { type: 'Do', key: a, inc: 1 });
      await blocker.reached.promise; // a's group takes a slot, and holds it
      const mark = log.length;
      early.go.resolve();
      await drainContinuations(); // b reaches its write phase
      if (groupsAtOnce === 2) {
        // The second slot is free: b is written in a group of its own while a's is still being written.
        expect(await units.b).toMatchObject({ outcome: 'handled', version: 1 });
      }
      late.go.resolve();
      await drainContinuations(); // c reaches its write phase
      blocker.release.resolve();

      expect(await first).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await units.b).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await units.c).toMatchObject({ outcome: 'handled', version: 1 });
      // One slot: b waited for a's group to end, and c joined it in the next group, a savepoint each. Two: each
      // went alone (a group of one has no savepoint).
      expect(savepointLog(log.slice(mark))).toEqual(groupsAtOnce === 1 ? ['savepoint', 'savepoint'] : []);
    });
  });
}

describe('group commit (postgresql only)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  let proxy: CommitDroppingProxy;
  let proxyUrl: string;
  beforeAll(async () => {
    const target = new URL(db().config.clientUrl!);
    proxy = new CommitDroppingProxy(target.hostname, Number(target.port || 5432));
    target.host = `127.0.0.1:${await proxy.listen()}`;
    proxyUrl = target.toString();
  });
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });
  afterAll(async () => {
    await proxy.close();
  });

  async function runtimeOn(saga: GatedSaga, overrides: Parameters<ReturnType<typeof db>['openAnother']>[0] = {}) {
    const orm = await db().openAnother(overrides);
    opened.push(orm);
    const hold = new FlushHold();
    orm.em.getEventManager().registerSubscriber(hold);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], groupCommit: { maxGroups: 1 }, concurrency: { baseDelayMs: 0 } });
    return { runtime, hold, orm };
  }

  it('a group COMMIT whose answer is lost: each released unit gets COMMIT_OUTCOME_UNKNOWN, a unit that failed alone its own error', async () => {
    const gate = new StepGate(3);
    const saga = gatedSaga(gate);
    const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
    const [b, c, e, taken] = ['b', 'c', 'e', 'taken'].map((n) => uniqueKey(`commit-${n}`)) as [string, string, string, string];
    for (const key of [b, c, e, taken]) await plain.handle(saga, { type: 'Start', key });
    const log: string[] = [];
    const { runtime } = await runtimeOn(saga, {
      clientUrl: proxyUrl,
      pool: { min: 0, max: 1 },
      debug: ['query'],
      logger: (line: string) => log.push(line),
    });
    const settled = [
      runtime.handle(saga, { type: 'Do', key: b, inc: 1, gated: true }),
      runtime.handle(saga, { type: 'Do', key: c, inc: 1, gated: true }),
      runtime.handle(saga, { type: 'Do', key: e, rekeyTo: taken, gated: true }),
    ].map((p) => p.catch((error: unknown) => error));
    await gate.all.promise;
    proxy.arm('drop-after-commit');
    gate.go.resolve(); // the three reach their write phase in one tick: one group
    const [bError, cError, eError] = await Promise.all(settled);
    await proxy.faulted;
    for (const error of [bError, cError]) {
      expect(error).toBeInstanceOf(SagaPersistenceError);
      expect(error).toMatchObject({ code: 'COMMIT_OUTCOME_UNKNOWN', details: { operation: 'commit' } });
      expect((error as Error).message).toContain('may or may not have been written');
    }
    expect(eError).toMatchObject({ code: 'UNIQUE_VIOLATION' });
    // The COMMIT was in fact applied: both released units of the one group (three savepoints) are written.
    const rows = rowsOf(db().orm);
    expect(await rows.saga(b)).toMatchObject({ counter: 1, version: 1 });
    expect(await rows.saga(c)).toMatchObject({ counter: 1, version: 1 });
    expect(savepointLog(log).filter((s) => s === 'savepoint')).toHaveLength(3);
    expect(await rows.saga(e)).toMatchObject({ version: 0 });
  });

  it('two groups touching the same sagas in opposite arrival orders lock them in one order: no deadlock, the later group retries', async () => {
    const [x, y] = ['x', 'y'].map((n) => uniqueKey(`order-${n}`)) as [string, string];
    const gate1 = new StepGate(2);
    const gate2 = new StepGate(2);
    const plain = new SagaRuntime({ em: db().orm.em, sagas: [gatedSaga(gate1)] });
    for (const key of [x, y]) await plain.handle(plain.definition('scripted')!, { type: 'Start', key });
    const saga1 = gatedSaga(gate1);
    const saga2 = gatedSaga(gate2);
    const one = await runtimeOn(saga1, { pool: { min: 0, max: 4 } });
    const two = await runtimeOn(saga2, { pool: { min: 0, max: 4 } });
    // Group 1 arrives x then y; group 2 arrives y then x.
    const group1 = [
      one.runtime.handle(saga1, { type: 'Do', key: x, inc: 1, gated: true }),
      one.runtime.handle(saga1, { type: 'Do', key: y, inc: 1, gated: true }),
    ];
    const group2 = [
      two.runtime.handle(saga2, { type: 'Do', key: y, inc: 1, gated: true }),
      two.runtime.handle(saga2, { type: 'Do', key: x, inc: 1, gated: true }),
    ];
    await Promise.all([gate1.all.promise, gate2.all.promise]);
    const xFirst = (await rowsOf(db().orm).saga(x))!.id < (await rowsOf(db().orm).saga(y))!.id;
    const [early, late] = xFirst ? [x, y] : [y, x];
    // Group 1 writes the row that sorts first, then is held at the other one.
    const held = one.hold.arm(late);
    gate1.go.resolve();
    await held.reached.promise;
    gate2.go.resolve();
    await untilLockWaiters(db().orm);
    held.release.resolve();
    const [r1x, r1y] = (await Promise.all(group1)) as HandleResult[];
    const [r2y, r2x] = (await Promise.all(group2)) as HandleResult[];
    // Group 2 waited for group 1's lock on the first row instead of taking the second: group 1 committed both
    // unhindered, and group 2's units each met one version conflict (not a deadlock) and were retried.
    expect([r1x!.conflicts, r1y!.conflicts]).toEqual([0, 0]);
    expect([r2x!.conflicts, r2y!.conflicts]).toEqual([1, 1]);
    expect(await rowsOf(db().orm).saga(early)).toMatchObject({ counter: 2, version: 2 });
    expect(await rowsOf(db().orm).saga(late)).toMatchObject({ counter: 2, version: 2 });
  });

  it('the group backend terminated between two units: no unit claims success, none says outcome unknown, and the pool recovers', async () => {
    const gate = new StepGate(2);
    const saga = gatedSaga(gate);
    const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
    const [a, b, z] = ['a', 'b', 'z'].map((n) => uniqueKey(`kill-${n}`)) as [string, string, string];
    for (const key of [a, b, z]) await plain.handle(saga, { type: 'Start', key });
    const orm = await db().openAnother({ pool: { min: 0, max: 2 } });
    opened.push(orm);
    const hold = new FlushHold();
    orm.em.getEventManager().registerSubscriber(hold);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], groupCommit: { maxGroups: 1 }, concurrency: { baseDelayMs: 0 } });
    const units = [
      runtime.handle(saga, { type: 'Do', key: b, inc: 1, gated: true }),
      runtime.handle(saga, { type: 'Do', key: z, inc: 1, gated: true }),
    ].map((p) => p.catch((error: unknown) => error));
    await gate.all.promise;
    const blocker = hold.arm(a);
    const first = runtime.handle(saga, { type: 'Do', key: a, inc: 1 });
    await blocker.reached.promise;
    // Hold the second unit of the next group (whichever of b, z sorts second) inside the group transaction.
    const ids = [(await rowsOf(db().orm).saga(b))!.id, (await rowsOf(db().orm).saga(z))!.id];
    const second = ids[0]! < ids[1]! ? z : b;
    const secondHold = hold.arm(second);
    gate.go.resolve();
    await drainContinuations();
    blocker.release.resolve();
    await first;
    await secondHold.reached.promise;
    const killer = db().orm.em.fork();
    const killed = await killer
      .getConnection()
      .execute<{ pid: number }[]>(
        "select pg_terminate_backend(pid) as ok, pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() and state like 'idle in transaction%'",
      );
    expect(killed.length).toBe(1);
    secondHold.release.resolve();
    const errors = await Promise.all(units);
    for (const error of errors) {
      expect(error).toBeInstanceOf(SagaPersistenceError);
      expect((error as SagaPersistenceError).code).not.toBe('COMMIT_OUTCOME_UNKNOWN');
    }
    expect(await rowsOf(db().orm).saga(b)).toMatchObject({ counter: 0, version: 0 });
    expect(await rowsOf(db().orm).saga(z)).toMatchObject({ counter: 0, version: 0 });
    // The pool recovers: the next units of work on the same runtime (one alone, then a group) succeed.
    expect(await runtime.handle(saga, { type: 'Do', key: b, inc: 1 })).toMatchObject({ outcome: 'handled', version: 1 });
    const again = await Promise.all([
      runtime.handle(saga, { type: 'Do', key: b, inc: 1 }),
      runtime.handle(saga, { type: 'Do', key: z, inc: 1 }),
    ]);
    expect(again.map((r) => r.outcome)).toEqual(['handled', 'handled']);
  });
});

/** Waits (on the database's own report, not on time) until a backend of the test database waits for a row lock. */
