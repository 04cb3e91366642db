// A unit of work that writes two timer rows of its saga (it stamps the timer it delivers and cancels another),
// while the dispatcher renews the leases of both: the renewal locks a saga's rows in id order; were the unit to
// lock them in the order of its plan (stamp, then delete), each could hold the row the other waits for, a deadlock
// (40P01). The unit locks the saga's pending timers in id order before it writes them, so neither may deadlock.
// A trigger holds the unit right after its stamp (on an advisory lock the test holds), so the renewal runs between
// the stamp and the delete.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, type HandleResult, SagaRuntime, type TimerDelivery } from '../../src/index.js';
import { writesSeveralTimerRows } from '../../src/saga/unit-of-work/write-plan.js';
import { createDatabaseContext } from '../../src/sql/database-context.js';
import { renewLeases } from '../../src/sql/dispatch-statements.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { drainContinuations } from '../support/flush-hold.js';
import { lockWaits } from '../support/pg-statements.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

type Msg = { readonly key?: string; readonly cancel?: string } & ({ readonly type: 'Start' } | { readonly type: 'Tick' });

const definition = defineSaga<ScriptedSaga, Msg>({
  name: 'scripted',
  state: ScriptedSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start: (_state, _message, ctx) => {
      ctx.schedule('one', 60_000, { type: 'Tick' });
      ctx.schedule('two', 60_000, { type: 'Tick' });
    },
    Tick: (state, message, ctx) => {
      state.counter += 1;
      if (message.cancel) ctx.cancel(message.cancel);
    },
  },
});

const HOLD_KEY = 771_771;

async function untilLockWaits(orm: MikroORM, n: number): Promise<void> {
  while ((await lockWaits(orm)) < n) await drainContinuations();
}

describe('a unit writing two timers of its saga vs the lease renewal of both (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
    const conn = db().orm.em.fork().getConnection();
    await conn.execute('drop trigger if exists saga_test_hold on saga_timer');
    await conn.execute('drop function if exists saga_test_hold()');
  });

  it('the delivery that cancels the other timer and the renewal of both do not deadlock (neither fails, no retry)', async () => {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [definition], concurrency: { baseDelayMs: 0 } });
    const key = uniqueKey('lock-order');
    await runtime.handle(definition, { type: 'Start', key });
    const rows = rowsOf(db().orm);
    const saga = (await rows.saga(key))!;
    const timers = await rows.pendingTimers(saga.id);
    expect(timers.map((t) => t.name)).toEqual(['one', 'two']);
    // The renewal locks the lower id first: the unit delivers the higher one and cancels the lower.
    const [lower, higher] = [...timers].sort((a, b) => (a.id < b.id ? -1 : 1));
    const conn = db().orm.em.fork().getConnection();
    const claim = async (id: string) => {
      const token = randomUUID();
      await conn.execute('update saga_timer set token = ?, locked_until = ? where id = ?', [token, new Date(Date.now() + 600_000), id]);
      return token;
    };
    const lowerToken = await claim(lower!.id);
    const delivery: TimerDelivery = {
      id: higher!.id,
      token: await claim(higher!.id),
      sagaType: 'scripted',
      sagaId: saga.id,
      name: higher!.name,
      messageType: 'Tick',
      payload: { type: 'Tick', cancel: lower!.name },
      dueAt: higher!.dueAt,
      attempts: 0,
      correlationId: null,
    };

    await conn.execute(
      `create function saga_test_hold() returns trigger language plpgsql as
       $$ begin perform pg_advisory_lock_shared(${HOLD_KEY}); perform pg_advisory_unlock_shared(${HOLD_KEY}); return new; end $$`,
    );
    await conn.execute(
      `create trigger saga_test_hold after update on saga_timer for each row
       when (old.dispatched_at is null and new.dispatched_at is not null) execute function saga_test_hold()`,
    );
    const holder = await db().openAnother({ pool: { min: 1, max: 1 } });
    opened.push(holder);
    await holder.em.getConnection().execute(`select pg_advisory_lock(${HOLD_KEY})`);

    const unitOrm = await db().openAnother({ pool: { min: 0, max: 2 } });
    opened.push(unitOrm);
    const unitRuntime = new SagaRuntime({ em: unitOrm.em, sagas: [definition], concurrency: { baseDelayMs: 0 } });
    const unit = unitRuntime.deliverTimer(delivery);
    await untilLockWaits(db().orm, 1); // the unit stamped its timer and waits for the advisory lock

    const renewer = await db().openAnother({ pool: { min: 0, max: 1 } });
    opened.push(renewer);
    const renewal = renewLeases(
      createDatabaseContext(renewer.em),
      'saga_timer',
      [
        { id: lower!.id, token: lowerToken },
        { id: delivery.id, token: delivery.token },
      ],
      new Date(Date.now() + 900_000),
    ).then(
      (answer) => ({ ids: answer.written }),
      (error: unknown) => ({ error }),
    );
    await untilLockWaits(db().orm, 2); // the renewal waits for a row the unit holds
    await holder.em.getConnection().execute(`select pg_advisory_unlock(${HOLD_KEY})`);

    const result = (await unit) as HandleResult;
    const renewed = await renewal;
    // Without the unit's lock in id order: '40P01' (deadlock detected) for one of them.
    expect((renewed as { error?: { code?: string } }).error?.code).toBeUndefined();
    expect([result.outcome, result.conflicts]).toEqual(['handled', 0]);
    // Both rows were the unit's by then: stamped and deleted, the renewal found neither pending.
    expect((renewed as { ids: string[] }).ids).toEqual([]);
    expect(await rows.pendingTimers(saga.id)).toEqual([]);
    expect((await rows.saga(key))!.counter).toBe(1);
  });

  it('the lock statement runs only when a plan may write two or more existing timer rows', () => {
    const base = {
      sagaType: 'scripted',
      sagaId: 's',
      messageType: 'Tick',
      sagaRow: { kind: 'none' as const },
      timerDeletes: { all: false, names: [] as string[], otherStepsThan: undefined },
      timers: [] as never[],
      replaceTimers: true,
      outbox: [],
      handledMessage: undefined,
    };
    const stamp = { id: 't', token: 'k', name: 'ping', outcome: 'fired' as const, at: new Date() };
    const timer = (name: string) => ({ name }) as never;
    expect(writesSeveralTimerRows({ ...base, timerStamp: stamp })).toBe(false);
    // A reminder that fires and schedules itself again: its stamped row is no longer pending.
    expect(writesSeveralTimerRows({ ...base, timerStamp: stamp, timers: [timer('ping')] })).toBe(false);
    expect(writesSeveralTimerRows({ ...base, timerStamp: stamp, timers: [timer('other')] })).toBe(true);
    expect(writesSeveralTimerRows({ ...base, timerStamp: stamp, timerDeletes: { ...base.timerDeletes, names: ['other'] } })).toBe(true);
    expect(writesSeveralTimerRows({ ...base, timerStamp: undefined, timerDeletes: { ...base.timerDeletes, all: true } })).toBe(true);
    expect(writesSeveralTimerRows({ ...base, timerStamp: undefined, timerDeletes: { ...base.timerDeletes, names: ['a'] } })).toBe(false);
  });
});
