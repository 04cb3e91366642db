// SQLite's deferred BEGIN on MikroORM 6 (src/orm/mikro-orm-6/knex-held-transaction.ts, queryAfterDeferredBegin; what
// is sent: deferred-begin.test.ts) keeps every unit atomic: a unit whose write is several statements goes between
// BEGIN and COMMIT, a subscriber's statements and nested transactions at afterTransactionStart belong to the unit's
// transaction, a group opened by SAVEPOINT commits the units the database accepts, and concurrent writers (version
// conflicts, another connection's write lock, an application's own transaction) lose no change.
import type { EventSubscriber, MikroORM, Options, TransactionEventArgs } from '@mikro-orm/core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { ORM_MAJOR } from '../../../src/orm/orm-major.js';
import { queryRows } from '../../../src/orm/sql-execution.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS, isSqlite, waitsForLocksSynchronously } from '../../support/databases.js';
import { refuseInserts, rowsOf } from '../../support/rows.js';
import { kinds, recordStatements } from '../../support/sqlite-statements.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/**
 * Registers on `orm` an afterTransactionStart subscriber that, while armed, inserts a row into `table` in a nested
 * `em.transactional()` of the unit's transaction (a fork without the unit's entities: its flush writes nothing of the
 * saga).
 */
function nestedWriter(orm: MikroORM, table: string): { armed: boolean } {
  const subscriber = {
    armed: false,
    async afterTransactionStart({ em }: TransactionEventArgs) {
      if (!subscriber.armed) return;
      await em!.fork({ clear: true, keepTransactionContext: true }).transactional(async (tx) => {
        await tx.getConnection('write').execute(`insert into ${table} (note) values ('nested')`, [], 'run', tx.getTransactionContext());
      });
    },
  };
  orm.em.getEventManager().registerSubscriber(subscriber as EventSubscriber);
  return subscriber;
}

for (const dialect of DIALECTS.filter(isSqlite)) {
  describe.runIf(ORM_MAJOR === 6)(`units of work under SQLite's deferred BEGIN (${dialect}, MikroORM 6)`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const cleanups: (() => unknown)[] = [];
    afterEach(async () => {
      for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    });
    const record = (orm: MikroORM = db().orm) => {
      const recorder = recordStatements(orm);
      cleanups.push(recorder.stop);
      return recorder.sent;
    };
    // better-sqlite3 waits for another connection's lock with the event loop stopped: the holder, in this process,
    // cannot commit meanwhile, so every such wait ends in a conflict at the busy timeout, whatever its length. Each
    // connection gets 250 ms (docs/integration.md) instead of 5 s.
    const busyTimeoutMs = waitsForLocksSynchronously(dialect) ? 250 : undefined;
    beforeAll(async () => {
      if (busyTimeoutMs) await db().orm.em.getConnection().execute(`pragma busy_timeout = ${busyTimeoutMs}`);
    });
    const another = async (overrides: { pool?: { min: number; max: number } } = {}) => {
      const afterCreate = (conn: { pragma(sql: string): unknown }, done: (error: Error | null, conn: unknown) => void) => {
        conn.pragma(`busy_timeout = ${busyTimeoutMs}`);
        done(null, conn);
      };
      const withTimeout = busyTimeoutMs ? { ...overrides, pool: { ...overrides.pool, afterCreate } } : overrides;
      const orm = await db().openAnother(withTimeout as Partial<Options>);
      cleanups.push(() => orm.close(true));
      return orm;
    };

    it('state + timer: BEGIN ... COMMIT, and a refused timer insert leaves the saga row unchanged', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('timer');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const sent = record();
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'schedule', name: 'ok' }] });
      const k = kinds(sent);
      expect(k).toContain('begin');
      expect(k.at(-1)).toBe('commit');
      const remove = await refuseInserts(db().orm, 'saga_timer', 'name', 'bad');
      try {
        await expect(
          runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'schedule', name: 'bad' }] }),
        ).rejects.toThrow();
      } finally {
        await remove();
      }
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
    });

    it('state + handled message id: both in one transaction (BEGIN ... COMMIT); a refused id leaves the row unchanged', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('msgid');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const sent = record();
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: 'm-1' });
      const k = kinds(sent);
      expect(k).toContain('begin');
      expect(k.at(-1)).toBe('commit');
      const remove = await refuseInserts(db().orm, 'saga_handled_message', 'message_id', 'm-bad');
      try {
        await expect(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: 'm-bad' })).rejects.toThrow();
      } finally {
        await remove();
      }
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
    });

    it('state + outbox message: one transaction; a refused outbox insert leaves the row unchanged', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('outbox');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const remove = await refuseInserts(db().orm, 'saga_outbox', 'message_type', 'Bad');
      try {
        await expect(
          runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'send', message: { type: 'Bad' } }] }),
        ).rejects.toThrow();
      } finally {
        await remove();
      }
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
    });

    it('an afterTransactionStart subscriber that writes: its write is rolled back with a unit whose UPDATE is refused', async () => {
      const orm = await another();
      await queryRows(orm.em, 'create table if not exists side_effect_a (note text)', []);
      const subscriber = {
        armed: false,
        async afterTransactionStart({ em }: TransactionEventArgs) {
          if (!this.armed) return;
          await em!
            .getConnection('write')
            .execute("insert into side_effect_a (note) values ('from-start')", [], 'run', em!.getTransactionContext());
        },
      };
      orm.em.getEventManager().registerSubscriber(subscriber as EventSubscriber);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('start-sub');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const remove = await refuseInserts(orm, 'scripted_saga', 'log', 'started;refused;');
      subscriber.armed = true;
      try {
        await expect(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'note', text: 'refused' }] })).rejects.toThrow();
      } finally {
        subscriber.armed = false;
        await remove();
      }
      expect(await queryRows(orm.em, 'select count(*) as n from side_effect_a', [])).toEqual([{ n: 0 }]);
      expect(await rowsOf(orm).saga(key)).toMatchObject({ version: 0, log: 'started;' });
    });

    it('an afterTransactionStart subscriber with a nested em.transactional(): its write is rolled back with a unit whose UPDATE is refused', async () => {
      const orm = await another();
      await queryRows(orm.em, 'create table if not exists side_effect_b (note text)', []);
      const subscriber = nestedWriter(orm, 'side_effect_b');
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('nested-sub');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const remove = await refuseInserts(orm, 'scripted_saga', 'log', 'started;refused;');
      subscriber.armed = true;
      const sent = record(orm);
      try {
        await expect(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'note', text: 'refused' }] })).rejects.toThrow();
      } finally {
        subscriber.armed = false;
        await remove();
      }
      // The nested transaction's write belongs to the unit's transaction: rolled back with it.
      expect({ sent: kinds(sent), side: await queryRows(orm.em, 'select count(*) as n from side_effect_b', []) }).toMatchObject({
        side: [{ n: 0 }],
      });
      expect(await rowsOf(orm).saga(key)).toMatchObject({ version: 0, log: 'started;' });
    });

    it('an afterTransactionStart subscriber with a nested em.transactional(): the connection is not left in a transaction after a successful unit', async () => {
      const orm = await another();
      await queryRows(orm.em, 'create table if not exists side_effect_c (note text)', []);
      const subscriber = nestedWriter(orm, 'side_effect_c');
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('nested-ok');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      subscriber.armed = true;
      try {
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      } finally {
        subscriber.armed = false;
      }
      // Seen from another connection: both committed.
      const reader = await another();
      expect(await queryRows(reader.em, 'select count(*) as n from side_effect_c', [])).toEqual([{ n: 1 }]);
      expect((await rowsOf(reader).saga(key))?.counter).toBe(1);
    });

    it('timers fired by a dispatcher while handle() writes the same saga: every change and every stamp kept once', async () => {
      const clock = new FakeClock('2026-03-01T10:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const key = uniqueKey('disp');
      await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: Array.from({ length: 6 }, (_, i) => ({
          op: 'schedule' as const,
          name: `t${i}`,
          after: 1_000,
          message: { type: 'Tick', key, actions: [{ op: 'inc' }] },
        })),
      });
      clock.advance(2_000);
      const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger, batchSize: 3, concurrency: 3 });
      const handled = Array.from({ length: 6 }, () => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 100 }] }));
      for (let pass = 0; pass < 20 && (await rowsOf(db().orm).pendingTimers()).some((t) => t.name.startsWith('t')); pass++)
        await dispatcher.runOnce();
      await Promise.all(handled);
      await dispatcher.stop();
      const saga = await rowsOf(db().orm).saga(key);
      expect(saga?.counter).toBe(606);
      const timers = (await rowsOf(db().orm).timers()).filter((t) => t.sagaId === saga?.id);
      expect(timers.filter((t) => t.dispatchedAt !== null && t.dispatchedAt !== undefined)).toHaveLength(6);
    });

    for (const failing of ['first', 'middle', 'all'] as const) {
      it(`a group opened by SAVEPOINT whose ${failing} unit(s) the database refuses: the others committed, the refused not`, async () => {
        const orm = db().orm;
        const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
        const keys = Array.from({ length: 10 }, (_, i) => uniqueKey(`grp-${failing}-${i}`));
        for (const key of keys) await runtime.handle(scriptedSaga, { type: 'Start', key });
        const refused = new Set(failing === 'all' ? keys : failing === 'first' ? [keys[0], keys[1]] : [keys[5]]);
        const trigger = `refuse_group_${failing}`;
        await queryRows(
          orm.em,
          `create trigger ${trigger} before update on scripted_saga when new.log like '%refuse-me;%' begin select raise(abort, 'refused'); end`,
          [],
        );
        const sent = record();
        let results: PromiseSettledResult<unknown>[];
        try {
          results = await Promise.allSettled(
            keys.map((key) =>
              runtime.handle(scriptedSaga, {
                type: 'Do',
                key,
                actions: refused.has(key) ? [{ op: 'inc' }, { op: 'note', text: 'refuse-me' }] : [{ op: 'inc' }],
              }),
            ),
          );
        } finally {
          await queryRows(orm.em, `drop trigger ${trigger}`, []);
        }
        expect(kinds(sent)).toContain('savepoint');
        for (const [i, key] of keys.entries()) expect(results[i]!.status, key).toBe(refused.has(key) ? 'rejected' : 'fulfilled');
        const reader = await another();
        for (const key of keys) {
          expect(await rowsOf(reader).saga(key), key).toMatchObject(
            refused.has(key) ? { counter: 0, version: 0 } : { counter: 1, version: 1 },
          );
        }
        // Nothing left open: the next message on every saga is written.
        await Promise.all(keys.map((key) => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })));
        for (const key of keys) expect((await rowsOf(reader).saga(key))?.counter, key).toBe(refused.has(key) ? 1 : 2);
      });
    }

    it('version conflicts between two ORMs on one file (lone UPDATEs) are retried: no increment is lost', async () => {
      const a = db().orm;
      const b = await another();
      const runtimeA = new SagaRuntime({ em: a.em, sagas: [scriptedSaga] });
      const runtimeB = new SagaRuntime({ em: b.em, sagas: [scriptedSaga] });
      const key = uniqueKey('conflict');
      await runtimeA.handle(scriptedSaga, { type: 'Start', key });
      // better-sqlite3 waits for the other connection's lock synchronously (busy handler): fewer messages there.
      const n = waitsForLocksSynchronously(dialect) ? 6 : 20;
      const results = await Promise.allSettled(
        Array.from({ length: n }, (_, i) =>
          (i % 2 ? runtimeA : runtimeB).handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }),
        ),
      );
      const ok = results.filter((r) => r.status === 'fulfilled').length;
      const saga = await rowsOf(db().orm).saga(key);
      expect(saga?.counter).toBe(ok);
      expect(saga?.version).toBe(ok);
      expect(ok).toBe(n);
    });

    it('two runtimes on one ORM with pool max 2, same saga: every increment counted once', async () => {
      const orm = await another({ pool: { min: 1, max: 2 } });
      const r1 = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const r2 = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('pool2');
      await r1.handle(scriptedSaga, { type: 'Start', key });
      // better-sqlite3 waits for the other connection's lock synchronously (busy handler): fewer messages there.
      const n = waitsForLocksSynchronously(dialect) ? 6 : 20;
      const results = await Promise.allSettled(
        Array.from({ length: n }, (_, i) => (i % 2 ? r1 : r2).handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })),
      );
      const ok = results.filter((r) => r.status === 'fulfilled').length;
      const saga = await rowsOf(orm).saga(key);
      expect(saga?.counter).toBe(ok);
      expect(ok).toBe(n);
    });

    it.skipIf(waitsForLocksSynchronously(dialect))(
      "pool max 2: the application's own transaction that rolls back does not take a concurrent lone UPDATE with it",
      async () => {
        const orm = await another({ pool: { min: 1, max: 2 } });
        const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
        const key = uniqueKey('app-tx');
        const otherKey = uniqueKey('app-tx-other');
        await runtime.handle(scriptedSaga, { type: 'Start', key });
        await runtime.handle(scriptedSaga, { type: 'Start', key: otherKey });
        let handled: Promise<unknown> | undefined;
        const recorder = recordStatements(orm);
        cleanups.push(recorder.stop);
        await orm.em
          .fork()
          .transactional(async (tx) => {
            // Reads in the application's transaction (a SHARED lock) while the unit is written on the pool's other
            // connection, then rolls back.
            await tx.findOne(ScriptedSaga, { key: otherKey });
            handled = runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
            handled.catch(() => undefined);
            // The unit's UPDATE is on the pool's other connection while this transaction is still open.
            await recorder.whenSent('update');
            throw new Error('application rolls back');
          })
          .catch(() => undefined);
        await handled;
        const reader = await another();
        expect(await rowsOf(reader).saga(key)).toMatchObject({ counter: 1, version: 1 });
      },
    );

    it.skipIf(waitsForLocksSynchronously(dialect))(
      "a lone UPDATE that meets another connection's write lock: reported as failed or written, never half; no lock left behind",
      async () => {
        const orm = await another();
        const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
        const key = uniqueKey('busy');
        await runtime.handle(scriptedSaga, { type: 'Start', key });
        const holder = await another();
        const knex = (holder.em.getConnection() as unknown as { getKnex(): import('knex').Knex }).getKnex();
        // The holder's write lock, in a knex transaction (no MikroORM transaction context for handle() to inherit).
        const trx = await knex.transaction();
        await trx.raw("update scripted_saga set log = log || 'held;' where key = ?", [key]);
        const recorder = recordStatements(orm);
        cleanups.push(recorder.stop);
        const handled = runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
        handled.catch(() => undefined);
        // The lone UPDATE has reached the driver, which waits for the holder's lock (busy timeout).
        await recorder.whenSent('update');
        await trx.commit();
        const [outcome] = await Promise.allSettled([handled]);
        const saga = await rowsOf(holder).saga(key);
        if (outcome?.status === 'fulfilled') expect(saga).toMatchObject({ counter: 1 });
        else expect(saga).toMatchObject({ counter: 0 });
        // No lock left behind on either ORM: both can write.
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
        await holder.em.getConnection().execute("update scripted_saga set log = log || 'after;' where key = ?", [key]);
        expect((await rowsOf(holder).saga(key))?.log).toContain('after;');
      },
      60_000,
    );
  });
}
