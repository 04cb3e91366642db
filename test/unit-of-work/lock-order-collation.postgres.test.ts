// FOUND (fixed: the group compares lock keys by code point, src/text/code-point-order.ts): the group commit and the
// dispatcher's by-id statements disagreed on "saga order" for saga types outside
// ASCII. A group orders its units with JavaScript string comparison (lockOrder()/compareKeys(): UTF-16 code
// units), while updateClaimedRows()/lockedInSagaOrder() lock timer rows `order by saga_type collate "C"` (the bytes
// of UTF-8). The two orders differ whenever a type holds a character above U+FFFF (a surrogate pair, 0xD800..,
// sorts BEFORE U+E000..U+FFFF in UTF-16, AFTER it in UTF-8): e.g. 'brk😀' < 'brk！' in JS, 'brk！' < 'brk😀' in
// PostgreSQL "C". defineSaga() accepts such names (nameProblem() only counts code points and refuses lone
// surrogates). A group delivering a timer of each saga then locks them in the opposite order to a lease renewal
// (or a start mark) of both: each holds the row the other waits for, PostgreSQL reports 40P01.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, type HandleResult, SagaRuntime, type TimerDelivery } from '../../src/index.js';
import { lockOrder } from '../../src/saga/unit-of-work/lock-order.js';
import { createDatabaseContext } from '../../src/sql/database-context.js';
import { renewLeases } from '../../src/sql/dispatch-statements.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { drainContinuations, FlushHold } from '../support/flush-hold.js';
import { lockWaiters } from '../support/row-locks.js';
import { rowsOf } from '../support/rows.js';
import { StepGate } from '../support/step-gate.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

type Msg = { readonly key?: string; readonly gated?: boolean; readonly schedule?: boolean } & (
  | { readonly type: 'Start' }
  | { readonly type: 'Do' }
  | { readonly type: 'Tick' }
);

// JS (UTF-16) order: ASTRAL < FULLWIDTH; PostgreSQL collate "C" (UTF-8 bytes): FULLWIDTH < ASTRAL.
const ASTRAL = 'brk\u{1F600}';
const FULLWIDTH = 'brk\uFF01';

function saga(name: string, gate: StepGate) {
  const act = async (state: ScriptedSaga, message: Msg, ctx: { schedule: (...args: never[]) => void }) => {
    if (message.gated) await gate.enter();
    if (message.type !== 'Start') state.counter += 1;
    if (message.schedule) (ctx.schedule as (n: string, after: number, m: Msg) => void)('ping', 60_000, { type: 'Tick', gated: true });
  };
  return defineSaga<ScriptedSaga, Msg>({
    name,
    state: ScriptedSaga,
    correlation: { property: 'key', from: { Start: (m) => m.key, Do: (m) => m.key } },
    startedBy: ['Start'],
    steps: { Start: act, Do: act, Tick: act },
  });
}

describe('saga order: the group commit vs the by-id statements, saga types outside ASCII (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  it('the group orders two saga types as PostgreSQL\'s collate "C" does', async () => {
    const conn = db().orm.em.fork().getConnection();
    const rows = (await conn.execute(`select t from (values (?), (?)) as v(t) order by t collate "C"`, [ASTRAL, FULLWIDTH])) as {
      t: string;
    }[];
    const sqlOrder = rows.map((r) => r.t);
    const keys = [ASTRAL, FULLWIDTH].map((type) => ['1', type, '00000000-0000-7000-8000-000000000000']);
    const groupOrder = lockOrder(keys.map((lockKey) => ({ lockKey }))).map((i) => keys[i]![1]);
    expect(groupOrder).toEqual(sqlOrder);
  });

  it('a group delivering a timer of each saga and the lease renewal of both do not deadlock', async () => {
    const gate = new StepGate(2);
    const astral = saga(ASTRAL, gate);
    const fullwidth = saga(FULLWIDTH, gate);
    const blockerDef = saga('brk-blocker', gate);
    const plain = new SagaRuntime({ em: db().orm.em, sagas: [astral, fullwidth, blockerDef] });
    const blockerKey = uniqueKey('blk');
    await plain.handle(blockerDef, { type: 'Start', key: blockerKey });
    const keyA = uniqueKey('astral');
    const keyF = uniqueKey('full');
    await plain.handle(astral, { type: 'Start', key: keyA, schedule: true });
    await plain.handle(fullwidth, { type: 'Start', key: keyF, schedule: true });
    const rows = rowsOf(db().orm);
    const conn = db().orm.em.fork().getConnection();
    const deliveries: TimerDelivery[] = [];
    for (const [definition, key] of [
      [astral, keyA],
      [fullwidth, keyF],
    ] as const) {
      const state = (await rows.saga(key))!;
      const [timer] = await rows.pendingTimers(state.id);
      const token = randomUUID();
      await conn.execute('update saga_timer set token = ?, locked_until = ? where id = ?', [
        token,
        new Date(Date.now() + 600_000),
        timer!.id,
      ]);
      deliveries.push({
        id: timer!.id,
        token,
        sagaType: definition.name,
        sagaId: state.id,
        name: 'ping',
        messageType: 'Tick',
        payload: { type: 'Tick', gated: true },
        dueAt: timer!.dueAt,
        attempts: 0,
        correlationId: null,
      });
    }
    const orm = await db().openAnother({ pool: { min: 0, max: 4 } });
    opened.push(orm);
    const hold = new FlushHold();
    orm.em.getEventManager().registerSubscriber(hold);
    const runtime = new SagaRuntime({
      em: orm.em,
      sagas: [astral, fullwidth, blockerDef],
      // A lock timeout above deadlock_timeout (1 s): with the default 250 ms the group's unit times out of the
      // cycle first (it leaves the group, the renewal waited 250 ms); here PostgreSQL's detector sees the cycle.
      groupCommit: { maxGroups: 1, lockTimeoutMs: 5_000 },
      concurrency: { baseDelayMs: 0 },
    });
    const units = deliveries.map((d) => runtime.deliverTimer(d));
    await gate.all.promise;
    const blocker = hold.arm(blockerKey);
    const head = runtime.handle(blockerDef, { type: 'Do', key: blockerKey });
    await blocker.reached.promise;
    // Whichever unit the group writes first goes on; the group is then held before the second one's flush, holding
    // the first one's timer row (in the code-unit order this test was written against, ASTRAL's).
    const holds = [hold.arm(keyA), hold.arm(keyF)];
    gate.go.resolve();
    await drainContinuations();
    blocker.release.resolve();
    await head;
    const first = await Promise.race(holds.map((h) => h.reached.promise.then(() => h)));
    const secondHold = holds.find((h) => h !== first)!;
    first.release.resolve();
    await secondHold.reached.promise;

    const renewer = await db().openAnother({ pool: { min: 0, max: 1 } });
    opened.push(renewer);
    const renewal = renewLeases(
      createDatabaseContext(renewer.em),
      'saga_timer',
      deliveries.map((d) => ({ id: d.id, token: d.token })),
      new Date(Date.now() + 900_000),
    ).then(
      (answer) => ({ ids: answer.written }),
      (error: unknown) => ({ error }),
    );
    // The renewal locks in "C" order, FULLWIDTH's timer first: it waits for the row the group holds. Written in the
    // other order, the group held ASTRAL's: the renewal held FULLWIDTH's, which the group needs next (40P01).
    while ((await lockWaiters(db().orm)) < 1) await drainContinuations();
    secondHold.release.resolve();

    const results = (await Promise.all(units)) as HandleResult[];
    const renewed = await renewal;
    expect((renewed as { error?: { code?: string } }).error?.code).toBeUndefined();
    expect(results.map((r) => [r.outcome, r.conflicts])).toEqual([
      ['handled', 0],
      ['handled', 0],
    ]);
  });
});
