// Lock order on PostgreSQL. Two writers that lock the same rows in opposite orders can each hold a row the other
// waits for: a deadlock (40P01 after deadlock_timeout, one of them fails). Every writer of several timer rows locks
// them in saga order (saga type by code point, as `collate "C"` orders it, then saga id), and within one saga in id
// order: a group transaction (it holds the row locks of every timer it stamped or deleted until its COMMIT), a
// single unit writing two timers of its saga, and the dispatcher's lease renewals and batched start marks (one
// statement for many rows). Each test holds one writer where the other would take the rows in the opposite order;
// neither may fail.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, type HandleResult, SagaRuntime, type TimerDelivery } from '../../src/index.js';
import { lockOrder } from '../../src/saga/unit-of-work/lock-order.js';
import { writesSeveralTimerRows } from '../../src/saga/unit-of-work/plan-statements.js';
import { createDatabaseContext } from '../../src/sql/database-context.js';
import { markDeliveriesStarted, renewLeases } from '../../src/sql/delivery-statements.js';
import type { Claim } from '../../src/sql/dispatch-tables.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { claimTimer } from '../support/claimed-timer.js';
import type { TestDatabase } from '../support/databases.js';
import { drainContinuations, FlushHold } from '../support/flush-hold.js';
import { type GatedSaga, gatedSaga } from '../support/gated-saga.js';
import { untilLockWaiters } from '../support/row-locks.js';
import { rowsOf } from '../support/rows.js';
import { StepGate } from '../support/step-gate.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/** What a dispatcher statement on its own connection answered: the rows it wrote, or its error. */
type Answer = { ids?: readonly string[]; error?: { code?: string } };

/** Opens an ORM of its own (closed after the test) for the code under test or for the dispatcher's statement. */
function opener(db: () => TestDatabase) {
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });
  return async (max: number) => {
    const orm = await db().openAnother({ pool: { min: 0, max } });
    opened.push(orm);
    return orm;
  };
}

/** The dispatcher's lease renewal (or start mark) of `claims`, on a connection of its own, settled as an {@link Answer}. */
function dispatcherStatement(orm: MikroORM, claims: readonly Claim[], statement: 'renewal' | 'start mark'): Promise<Answer> {
  const context = createDatabaseContext(orm.em);
  const sent =
    statement === 'renewal'
      ? renewLeases(context, 'saga_timer', claims, new Date(Date.now() + 900_000)).then((answer) => answer.written)
      : markDeliveriesStarted(context, 'saga_timer', claims, new Date()).then((answer) => answer.written);
  return sent.then(
    (ids) => ({ ids }),
    (error: unknown) => ({ error: error as { code?: string } }),
  );
}

/** Starts a saga on `key` with one pending timer, 'ping', claimed as a dispatcher would. */
async function sagaWithClaimedTimer(db: () => TestDatabase, runtime: SagaRuntime, saga: GatedSaga, key: string) {
  await runtime.handle(saga, { type: 'Start', key, schedule: 'ping' });
  const rows = rowsOf(db().orm);
  const [timer] = await rows.pendingTimers((await rows.saga(key))!.id);
  return claimTimer(db().orm, timer!, { type: 'Tick', inc: 1, gated: true });
}

/**
 * Lets the gated `units` of `runtime` reach one group behind a first unit on `blockerKey`, then holds that group
 * right before the flush of the unit on `secondKey` (the group has written the other unit and holds its rows).
 */
async function holdGroupBefore(
  runtime: SagaRuntime,
  saga: GatedSaga,
  hold: FlushHold,
  gate: StepGate,
  blockerKey: string,
  secondKey: string,
) {
  await gate.all.promise;
  const blocker = hold.arm(blockerKey);
  const head = runtime.handle(saga, { type: 'Do', key: blockerKey, inc: 1 });
  await blocker.reached.promise;
  const second = hold.arm(secondKey);
  gate.go.resolve();
  await drainContinuations();
  blocker.release.resolve();
  await head;
  await second.reached.promise;
  return second;
}

describe('a group commit vs the lease renewal or start mark of its timers (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const open = opener(db);

  /** A production-sized table: the planner then finds a statement's rows by primary key (id order), not by name. */
  async function fillTimerTable(copyOf: string) {
    const conn = db().orm.em.fork().getConnection();
    const columns = (
      (await conn.execute(
        "select column_name from information_schema.columns where table_schema = current_schema() and table_name = 'saga_timer'",
      )) as { column_name: string }[]
    ).map((r) => r.column_name);
    const fresh: Record<string, string> = {
      id: 'gen_random_uuid()',
      saga_id: 'gen_random_uuid()',
      token: 'gen_random_uuid()',
      locked_until: 'null',
    };
    const copied = columns.map((name) => fresh[name] ?? `"${name}"`);
    await conn.execute(
      `insert into saga_timer (${columns.map((n) => `"${n}"`).join(', ')}) select ${copied.join(', ')} from saga_timer, generate_series(1, 3000) where id = ?`,
      [copyOf],
    );
    await conn.execute('analyze saga_timer');
  }

  /** Two sagas whose group order (saga id) is the reverse of their timers' id order (an index scan's lock order). */
  async function sagasInReverseTimerOrder(plain: SagaRuntime, saga: GatedSaga) {
    const rows = rowsOf(db().orm);
    for (;;) {
      const keys = [uniqueKey('renew-one'), uniqueKey('renew-two')];
      for (const key of keys) await plain.handle(saga, { type: 'Start', key });
      const [s1, s2] = [(await rows.saga(keys[0]!))!, (await rows.saga(keys[1]!))!];
      const [first, second] = s1.id < s2.id ? [s1, s2] : [s2, s1];
      // The second's timer is inserted, and claimed, first: a sequential scan meets it first too.
      for (const state of [second, first]) await plain.handle(saga, { type: 'Do', key: state.key, schedule: 'ping' });
      const [t1] = await rows.pendingTimers(first.id);
      const [t2] = await rows.pendingTimers(second.id);
      if (t2!.id < t1!.id) return { first, second };
    }
  }

  for (const variant of ['renewal', 'start mark'] as const) {
    it(`a group writing two sagas' timers and the dispatcher's ${variant} of both do not deadlock (neither fails, no unit retried)`, async () => {
      const gate = new StepGate(2);
      const saga = gatedSaga(gate);
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const blockerKey = uniqueKey('renew-blk');
      await plain.handle(saga, { type: 'Start', key: blockerKey });
      const { first, second } = await sagasInReverseTimerOrder(plain, saga);
      const rows = rowsOf(db().orm);
      const deliveries: Record<string, TimerDelivery> = {};
      for (const state of [second, first]) {
        const [timer] = await rows.pendingTimers(state.id);
        deliveries[state.id] = await claimTimer(db().orm, timer!, { type: 'Tick', inc: 1, gated: true });
      }
      await fillTimerTable(deliveries[first.id]!.id);
      const heap = (await db()
        .orm.em.fork()
        .getConnection()
        .execute('select id from saga_timer where id in (?, ?) order by ctid', [deliveries[first.id]!.id, deliveries[second.id]!.id])) as {
        id: string;
      }[];
      expect(heap.map((r) => r.id)).toEqual([deliveries[second.id]!.id, deliveries[first.id]!.id]); // precondition

      const orm = await open(4);
      const hold = new FlushHold();
      orm.em.getEventManager().registerSubscriber(hold);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], groupCommit: { maxGroups: 1 }, concurrency: { baseDelayMs: 0 } });
      // renewal: the group delivers both timers (stamps them); start mark: the group's units cancel both timers
      // (messages cancelling reminders that the dispatcher is starting to fire).
      const units =
        variant === 'renewal'
          ? [runtime.deliverTimer(deliveries[first.id]!), runtime.deliverTimer(deliveries[second.id]!)]
          : [first, second].map((state) => runtime.handle(saga, { type: 'Do', key: state.key, inc: 1, cancel: 'ping', gated: true }));
      const secondHold = await holdGroupBefore(runtime, saga, hold, gate, blockerKey, second.key); // holds the first timer's row

      const claims = [deliveries[second.id]!, deliveries[first.id]!].map((d) => ({ id: d.id, token: d.token }));
      const statement = dispatcherStatement(await open(1), claims, variant);
      await untilLockWaiters(db().orm); // the statement locked the second timer and waits for the first
      secondHold.release.resolve(); // the group now stamps the second timer

      const results = (await Promise.all(units)) as HandleResult[];
      // Locked in another order: '40P01' (deadlock detected), PostgreSQL picking the dispatcher's statement.
      expect((await statement).error?.code).toBeUndefined();
      expect(results.map((r) => [r.outcome, r.conflicts])).toEqual([
        ['handled', 0],
        ['handled', 0],
      ]);
    });
  }
});

describe('saga types outside ASCII: the group and the by-id statements agree on saga order (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const open = opener(db);
  // JavaScript's string order (UTF-16 code units): ASTRAL < FULLWIDTH. PostgreSQL's collate "C" (UTF-8 bytes) and
  // code point order: FULLWIDTH < ASTRAL. A surrogate pair (0xD800..) sorts before U+E000..U+FFFF in UTF-16 only.
  const ASTRAL = 'brk\u{1F600}';
  const FULLWIDTH = 'brk\uFF01';

  it('the group orders two saga types as PostgreSQL\'s collate "C" does', async () => {
    const conn = db().orm.em.fork().getConnection();
    const rows = (await conn.execute(`select t from (values (?), (?)) as v(t) order by t collate "C"`, [ASTRAL, FULLWIDTH])) as {
      t: string;
    }[];
    const keys = [ASTRAL, FULLWIDTH].map((type) => ['1', type, '00000000-0000-7000-8000-000000000000']);
    const groupOrder = lockOrder(keys.map((lockKey) => ({ lockKey }))).map((i) => keys[i]![1]);
    expect(groupOrder).toEqual(rows.map((r) => r.t));
  });

  it('a group delivering a timer of each saga and the lease renewal of both do not deadlock', async () => {
    const gate = new StepGate(2);
    const astral = gatedSaga(gate, { name: ASTRAL });
    const fullwidth = gatedSaga(gate, { name: FULLWIDTH });
    const blockerSaga = gatedSaga(gate, { name: 'brk-blocker' });
    const sagas = [astral, fullwidth, blockerSaga];
    const plain = new SagaRuntime({ em: db().orm.em, sagas });
    const blockerKey = uniqueKey('blk');
    await plain.handle(blockerSaga, { type: 'Start', key: blockerKey });
    const [keyA, keyF] = [uniqueKey('astral'), uniqueKey('full')];
    const deliveries = [await sagaWithClaimedTimer(db, plain, astral, keyA), await sagaWithClaimedTimer(db, plain, fullwidth, keyF)];
    const orm = await open(4);
    const hold = new FlushHold();
    orm.em.getEventManager().registerSubscriber(hold);
    const runtime = new SagaRuntime({
      em: orm.em,
      sagas,
      // A lock timeout above deadlock_timeout (1 s): with the default 250 ms the group's unit times out of the
      // cycle first (it leaves the group, the renewal waited 250 ms); here PostgreSQL's detector sees the cycle.
      groupCommit: { maxGroups: 1, lockTimeoutMs: 5_000 },
      concurrency: { baseDelayMs: 0 },
    });
    const units = deliveries.map((d) => runtime.deliverTimer(d));
    // Whichever unit the group writes first goes on; the group is then held before the second one's flush, holding
    // the first one's timer row.
    await gate.all.promise;
    const blocker = hold.arm(blockerKey);
    const head = runtime.handle(blockerSaga, { type: 'Do', key: blockerKey, inc: 1 });
    await blocker.reached.promise;
    const holds = [hold.arm(keyA), hold.arm(keyF)];
    gate.go.resolve();
    await drainContinuations();
    blocker.release.resolve();
    await head;
    const first = await Promise.race(holds.map((h) => h.reached.promise.then(() => h)));
    const secondHold = holds.find((h) => h !== first)!;
    first.release.resolve();
    await secondHold.reached.promise;

    const renewal = dispatcherStatement(
      await open(1),
      deliveries.map((d) => ({ id: d.id, token: d.token })),
      'renewal',
    );
    // The renewal locks in "C" order, FULLWIDTH's timer first: it waits for the row the group holds. Had the group
    // written in the other order, it would hold ASTRAL's, the renewal FULLWIDTH's, which the group needs next.
    await untilLockWaiters(db().orm);
    secondHold.release.resolve();

    const results = (await Promise.all(units)) as HandleResult[];
    expect((await renewal).error?.code).toBeUndefined();
    expect(results.map((r) => [r.outcome, r.conflicts])).toEqual([
      ['handled', 0],
      ['handled', 0],
    ]);
  });
});

describe('a unit writing two timers of its saga vs the lease renewal of both (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const open = opener(db);
  afterEach(async () => {
    const conn = db().orm.em.fork().getConnection();
    await conn.execute('drop trigger if exists saga_test_hold on saga_timer');
    await conn.execute('drop function if exists saga_test_hold()');
  });

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

  /** Holds every unit right after it stamps a timer fired, on an advisory lock the returned ORM holds until unlocked. */
  async function holdAfterStamp() {
    const conn = db().orm.em.fork().getConnection();
    await conn.execute(
      `create function saga_test_hold() returns trigger language plpgsql as
       $$ begin perform pg_advisory_lock_shared(${HOLD_KEY}); perform pg_advisory_unlock_shared(${HOLD_KEY}); return new; end $$`,
    );
    await conn.execute(
      `create trigger saga_test_hold after update on saga_timer for each row
       when (old.dispatched_at is null and new.dispatched_at is not null) execute function saga_test_hold()`,
    );
    const holder = await open(1);
    await holder.em.getConnection().execute(`select pg_advisory_lock(${HOLD_KEY})`);
    return () => holder.em.getConnection().execute(`select pg_advisory_unlock(${HOLD_KEY})`);
  }

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
    const lowerClaim = await claimTimer(db().orm, lower!, { type: 'Tick' });
    const delivery = await claimTimer(db().orm, higher!, { type: 'Tick', cancel: lower!.name });
    const release = await holdAfterStamp();

    // A bound far above the test's waits: the unit keeps its rows while held, rather than leave its group after
    // 250 ms and let the renewal through before it waits (then no second lock waiter ever comes).
    const unitRuntime = new SagaRuntime({
      em: (await open(2)).em,
      sagas: [definition],
      concurrency: { baseDelayMs: 0 },
      groupCommit: { lockTimeoutMs: 60_000 },
    });
    const unit = unitRuntime.deliverTimer(delivery);
    await untilLockWaiters(db().orm, 1); // the unit stamped its timer and waits for the advisory lock
    const renewal = dispatcherStatement(
      await open(1),
      [lowerClaim, delivery].map((d) => ({ id: d.id, token: d.token })),
      'renewal',
    );
    await untilLockWaiters(db().orm, 2); // the renewal waits for a row the unit holds
    await release();

    const result = (await unit) as HandleResult;
    const renewed = await renewal;
    // Without the unit's lock in id order: '40P01' (deadlock detected) for one of them.
    expect(renewed.error?.code).toBeUndefined();
    expect([result.outcome, result.conflicts]).toEqual(['handled', 0]);
    // Both rows were the unit's by then: stamped and deleted, the renewal found neither pending.
    expect(renewed.ids).toEqual([]);
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
