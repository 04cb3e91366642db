// A group transaction holds the row locks of every timer it stamped or deleted until its single COMMIT; the
// dispatcher's lease renewal and batched start marks update many timer rows in one statement. Were the statement to
// lock them in the order of its plan's scan (with a realistic number of pending timers PostgreSQL takes the primary
// key: heap order) while the group takes them in its own order, each could hold a row the other waits for: a
// deadlock (40P01 after deadlock_timeout). Both lock in saga order (type, id), so neither test may deadlock.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, type HandleResult, SagaRuntime, type TimerDelivery } from '../../src/index.js';
import { createDatabaseContext } from '../../src/sql/database-context.js';
import { markDeliveriesStarted, renewLeases } from '../../src/sql/dispatch-statements.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { drainContinuations, FlushHold } from '../support/flush-hold.js';
import { rowsOf } from '../support/rows.js';
import { StepGate } from '../support/step-gate.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

type Msg = MsgFields & ({ readonly type: 'Start' } | { readonly type: 'Do' } | { readonly type: 'Tick' });
type MsgFields = {
  readonly key?: string;
  readonly inc?: number;
  readonly gated?: boolean;
  readonly schedule?: boolean;
  readonly cancel?: boolean;
};

function saga(gate: StepGate) {
  const act = async (state: ScriptedSaga, message: Msg, ctx: { schedule: (...args: never[]) => void }) => {
    if (message.gated) await gate.enter();
    if (message.inc) state.counter += message.inc;
    if (message.cancel) (ctx as unknown as { cancel(name: string): void }).cancel('ping');
    if (message.schedule)
      (ctx.schedule as (n: string, after: number, m: Msg) => void)('ping', 60_000, { type: 'Tick', inc: 1, gated: true });
  };
  return defineSaga<ScriptedSaga, Msg>({
    name: 'scripted',
    state: ScriptedSaga,
    correlation: { property: 'key', from: { Start: (m) => m.key, Do: (m) => m.key } },
    startedBy: ['Start'],
    steps: { Start: act, Do: act, Tick: act },
  });
}

async function waitForLockWait(orm: MikroORM): Promise<void> {
  const sql = "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'";
  for (;;) {
    const [row] = await orm.em.fork().getConnection().execute<{ n: number }[]>(sql);
    if (row!.n > 0) return;
    await drainContinuations();
  }
}

describe('group commit vs the dispatcher lease renewal (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  for (const variant of ['renewal', 'start mark'] as const) {
    it(`a group writing two sagas' timers and the dispatcher's ${variant} of both do not deadlock (neither fails, no unit retried)`, async () => {
      const gate = new StepGate(2);
      const definition = saga(gate);
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [definition] });
      const blockerKey = uniqueKey('renew-blk');
      await plain.handle(definition, { type: 'Start', key: blockerKey });
      const rows = rowsOf(db().orm);
      // Two sagas whose group order (saga id) is the reverse of their timers' id order (an index scan's lock order).
      let pair: { first: ScriptedSaga; second: ScriptedSaga } | undefined;
      while (!pair) {
        const keys = [uniqueKey('renew-one'), uniqueKey('renew-two')];
        for (const key of keys) await plain.handle(definition, { type: 'Start', key });
        const [s1, s2] = [(await rows.saga(keys[0]!))!, (await rows.saga(keys[1]!))!];
        const [first, second] = s1.id < s2.id ? [s1, s2] : [s2, s1];
        // The second's timer is inserted, and claimed, first: a sequential scan meets it first too.
        for (const state of [second, first]) await plain.handle(definition, { type: 'Do', key: state.key, schedule: true });
        const [t1] = await rows.pendingTimers(first.id);
        const [t2] = await rows.pendingTimers(second.id);
        if (t2!.id < t1!.id) pair = { first, second };
      }
      const { first, second } = pair;
      const conn = db().orm.em.fork().getConnection();
      const deliveries: Record<string, TimerDelivery> = {};
      for (const state of [second, first]) {
        const [timer] = await rows.pendingTimers(state.id);
        const token = randomUUID();
        await conn.execute('update saga_timer set token = ?, locked_until = ? where id = ?', [
          token,
          new Date(Date.now() + 600_000),
          timer!.id,
        ]);
        deliveries[state.id] = {
          id: timer!.id,
          token,
          sagaType: 'scripted',
          sagaId: state.id,
          name: 'ping',
          messageType: 'Tick',
          payload: { type: 'Tick', inc: 1, gated: true },
          dueAt: timer!.dueAt,
          attempts: 0,
          correlationId: null,
        };
      }
      // A production-sized table: many pending timers of other sagas (statistics gathered), so the planner finds
      // the renewal's rows by primary key (id order) instead of through the small partial index of pending names.
      const columns = (
        (await conn.execute(
          "select column_name from information_schema.columns where table_schema = current_schema() and table_name = 'saga_timer'",
        )) as { column_name: string }[]
      ).map((r) => r.column_name);
      const copied = columns.map((name) =>
        name === 'id' || name === 'saga_id'
          ? 'gen_random_uuid()'
          : name === 'token'
            ? 'gen_random_uuid()'
            : name === 'locked_until'
              ? 'null'
              : `"${name}"`,
      );
      await conn.execute(
        `insert into saga_timer (${columns.map((n) => `"${n}"`).join(', ')}) select ${copied.join(', ')} from saga_timer, generate_series(1, 3000) where id = ?`,
        [deliveries[first.id]!.id],
      );
      await conn.execute('analyze saga_timer');
      const heap = (await conn.execute('select id from saga_timer where id in (?, ?) order by ctid', [
        deliveries[first.id]!.id,
        deliveries[second.id]!.id,
      ])) as { id: string }[];
      expect(heap.map((r) => r.id)).toEqual([deliveries[second.id]!.id, deliveries[first.id]!.id]); // precondition

      const orm = await db().openAnother({ pool: { min: 0, max: 4 } });
      opened.push(orm);
      const hold = new FlushHold();
      orm.em.getEventManager().registerSubscriber(hold);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [definition], groupCommit: { maxGroups: 1 }, concurrency: { baseDelayMs: 0 } });
      // renewal: the group delivers both timers (stamps them); start mark: the group's units cancel both timers
      // (messages cancelling reminders that the dispatcher is starting to fire).
      const units =
        variant === 'renewal'
          ? [runtime.deliverTimer(deliveries[first.id]!), runtime.deliverTimer(deliveries[second.id]!)]
          : [first, second].map((state) => runtime.handle(definition, { type: 'Do', key: state.key, inc: 1, cancel: true, gated: true }));
      await gate.all.promise;
      const blocker = hold.arm(blockerKey);
      const head = runtime.handle(definition, { type: 'Do', key: blockerKey, inc: 1 });
      await blocker.reached.promise;
      const secondHold = hold.arm(second.key);
      gate.go.resolve();
      await drainContinuations();
      blocker.release.resolve();
      await head;
      await secondHold.reached.promise; // the group stamped the first timer and holds its row lock

      // The dispatcher's lease renewal of both claims (the real statement), on its own connection.
      const renewer = await db().openAnother({ pool: { min: 0, max: 1 } });
      opened.push(renewer);
      const claims = [deliveries[second.id]!, deliveries[first.id]!].map((d) => ({ id: d.id, token: d.token }));
      const context = createDatabaseContext(renewer.em);
      const statement =
        variant === 'renewal'
          ? renewLeases(context, 'saga_timer', claims, new Date(Date.now() + 900_000)).then((answer) => answer.written)
          : markDeliveriesStarted(context, 'saga_timer', claims, new Date());
      const renewal = statement.then(
        (ids) => ({ ids }),
        (error: unknown) => ({ error }),
      );
      await waitForLockWait(db().orm); // the renewal locked the second timer and waits for the first
      secondHold.release.resolve(); // the group now stamps the second timer

      const results = (await Promise.all(units)) as HandleResult[];
      const renewed = await renewal;
      // Fails now with '40P01' (deadlock detected): PostgreSQL picked the dispatcher's statement as the victim.
      expect((renewed as { error?: { code?: string } }).error?.code).toBeUndefined();
      expect(results.map((r) => [r.outcome, r.conflicts])).toEqual([
        ['handled', 0],
        ['handled', 0],
      ]);
    });
  }
});
