// Group commit under attack: the same saga twice in one group, duplicate message ids in one group, and a group
// whose connection is killed between two units (PostgreSQL).
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, type HandleResult, SagaPersistenceError, SagaRuntime } from '../../../src/index.js';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { drainContinuations, FlushHold } from '../../support/flush-hold.js';
import { rowsOf } from '../../support/rows.js';
import { StepGate } from '../../support/step-gate.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

type GroupMessage = { readonly key?: string; readonly inc?: number; readonly gated?: boolean } & (
  | { readonly type: 'Start' }
  | { readonly type: 'Do' }
);

function groupSaga(gate: StepGate) {
  const act = async (saga: ScriptedSaga, message: GroupMessage) => {
    if (message.gated) await gate.enter();
    if (message.inc) saga.counter += message.inc;
  };
  return defineSaga<ScriptedSaga, GroupMessage>({
    name: 'scripted',
    state: ScriptedSaga,
    correlation: { property: 'key', from: { Start: (m) => m.key, Do: (m) => m.key } },
    startedBy: ['Start'],
    steps: { Start: act, Do: act },
  });
}

for (const dialect of DIALECTS) {
  describe(`group commit (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close();
    });

    async function groupedRuntime(saga: ReturnType<typeof groupSaga>) {
      const log: string[] = [];
      const orm = await db().openAnother({ debug: ['query'], logger: (line: string) => log.push(line) });
      opened.push(orm);
      const hold = new FlushHold();
      orm.em.getEventManager().registerSubscriber(hold);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], groupCommit: { maxGroups: 1 }, concurrency: { baseDelayMs: 0 } });
      return { runtime, hold, log, orm };
    }

    /** Makes the gated units of `gate` reach their write phase together while the group of `blockerKey` is written. */
    async function inOneGroup(
      runtime: SagaRuntime,
      saga: ReturnType<typeof groupSaga>,
      hold: FlushHold,
      gate: StepGate,
      blockerKey: string,
    ) {
      await gate.all.promise;
      const blocker = hold.arm(blockerKey);
      const first = runtime.handle(saga, { type: 'Do', key: blockerKey, inc: 1 });
      await blocker.reached.promise;
      gate.go.resolve();
      await drainContinuations();
      blocker.release.resolve();
      await first;
    }

    const savepoints = (log: string[]) => log.filter((line) => /savepoint saga_unit_\d+/i.test(line) && !/rollback to/i.test(line));

    it("the same saga twice in one group: the second unit conflicts on the first one's uncommitted write and is retried, both counted", async () => {
      const gate = new StepGate(2);
      const saga = groupSaga(gate);
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const [a, s] = ['a', 's'].map((n) => uniqueKey(`twice-${n}`)) as [string, string];
      for (const key of [a, s]) await plain.handle(saga, { type: 'Start', key });
      const { runtime, hold, log } = await groupedRuntime(saga);
      const units = [
        runtime.handle(saga, { type: 'Do', key: s, inc: 1, gated: true }),
        runtime.handle(saga, { type: 'Do', key: s, inc: 10, gated: true }),
      ];
      await inOneGroup(runtime, saga, hold, gate, a);
      const results = (await Promise.all(units)) as HandleResult[];
      expect(savepoints(log).length).toBeGreaterThanOrEqual(2);
      expect(results.map((r) => r.conflicts).sort()).toEqual([0, 1]);
      expect(await rowsOf(db().orm).saga(s)).toMatchObject({ counter: 11, version: 2 });
    });

    it('one message id delivered twice in one group to a NEW saga: one start, one duplicate, the step applied once', async () => {
      const gate = new StepGate(2);
      const saga = groupSaga(gate);
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const [a, fresh] = ['a', 'fresh'].map((n) => uniqueKey(`dupnew-${n}`)) as [string, string];
      await plain.handle(saga, { type: 'Start', key: a });
      const { runtime, hold, log } = await groupedRuntime(saga);
      const units = [
        runtime.handle(saga, { type: 'Start', key: fresh, inc: 1, gated: true }, { messageId: 'm-1' }),
        runtime.handle(saga, { type: 'Start', key: fresh, inc: 1, gated: true }, { messageId: 'm-1' }),
      ].map((p) => p.catch((error: unknown) => error));
      await inOneGroup(runtime, saga, hold, gate, a);
      const results = (await Promise.all(units)) as HandleResult[];
      expect(savepoints(log).length).toBeGreaterThanOrEqual(2);
      expect(results.map((r) => r.outcome).sort()).toEqual(['duplicate', 'started']);
      const row = await rowsOf(db().orm).saga(fresh);
      expect(row).toMatchObject({ counter: 1, version: 0 });
      expect(await rowsOf(db().orm).handledMessages(row!.id)).toHaveLength(1);
    });

    it('one message id delivered twice in one group to an existing saga: one handled, one duplicate', async () => {
      const gate = new StepGate(2);
      const saga = groupSaga(gate);
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const [a, s] = ['a', 's'].map((n) => uniqueKey(`dupold-${n}`)) as [string, string];
      for (const key of [a, s]) await plain.handle(saga, { type: 'Start', key });
      const { runtime, hold } = await groupedRuntime(saga);
      const units = [
        runtime.handle(saga, { type: 'Do', key: s, inc: 1, gated: true }, { messageId: 'm-2' }),
        runtime.handle(saga, { type: 'Do', key: s, inc: 1, gated: true }, { messageId: 'm-2' }),
      ].map((p) => p.catch((error: unknown) => error));
      await inOneGroup(runtime, saga, hold, gate, a);
      const results = (await Promise.all(units)) as HandleResult[];
      expect(results.map((r) => r.outcome).sort()).toEqual(['duplicate', 'handled']);
      expect(await rowsOf(db().orm).saga(s)).toMatchObject({ counter: 1, version: 1 });
    });
  });
}

describe('group commit connection killed mid-group (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  it('the group backend terminated between two units: no unit claims success, none says outcome unknown, and the pool recovers', async () => {
    const gate = new StepGate(2);
    const saga = groupSaga(gate);
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
