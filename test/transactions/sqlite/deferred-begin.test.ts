// On SQLite through MikroORM 6 (knex: node-sqlite3 and better-sqlite3) a unit's BEGIN waits for the unit's first
// statement (src/orm/mikro-orm-6/knex-held-transaction.ts, queryAfterDeferredBegin): a unit whose whole write is one
// statement sends it alone, where it commits itself (SQLite runs it as a transaction of its own: all or nothing),
// without BEGIN and COMMIT; a group's transaction opens with its first unit's SAVEPOINT. A statement sent alone fails
// as it would inside BEGIN and COMMIT. Observed at the driver: what knex hands SQLite.
import type { EventSubscriber, MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaPersistenceError, SagaRuntime } from '../../../src/index.js';
import { ORM_MAJOR } from '../../../src/orm/orm-major.js';
import { queryRows } from '../../../src/orm/sql-execution.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS, isSqlite, waitsForLocksSynchronously } from '../../support/databases.js';
import { refuseInserts, rowsOf } from '../../support/rows.js';
import { kinds, recordStatements } from '../../support/sqlite-statements.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

for (const dialect of DIALECTS.filter(isSqlite)) {
  describe.runIf(ORM_MAJOR === 6)(`a unit's BEGIN waits for its first statement on SQLite (${dialect}, MikroORM 6)`, () => {
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
    const another = async (overrides = {}) => {
      const orm = await db().openAnother(overrides);
      cleanups.push(() => orm.close(true));
      return orm;
    };

    it('a message whose write is one UPDATE sends it alone, without BEGIN or COMMIT, and it is committed', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('alone');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const sent = record();
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(kinds(sent)).toEqual(['select', 'update']);
      // Read on another connection: committed, not left in an open transaction.
      const other = await db().openAnother();
      try {
        expect((await rowsOf(other).saga(key))?.counter).toBe(1);
      } finally {
        await other.close(true);
      }
    });

    it('with a subscriber listening to the transaction, the UPDATE goes between BEGIN and COMMIT', async () => {
      const orm = await db().openAnother();
      try {
        const committed: string[] = [];
        orm.em
          .getEventManager()
          .registerSubscriber({ afterTransactionCommit: async () => void committed.push('commit') } as EventSubscriber);
        const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
        const key = uniqueKey('subscribed');
        await runtime.handle(scriptedSaga, { type: 'Start', key });
        const recorder = recordStatements(orm);
        cleanups.push(recorder.stop);
        committed.length = 0;
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
        expect(kinds(recorder.sent)).toEqual(['select', 'begin', 'update', 'commit']);
        expect(committed).toEqual(['commit']);
        expect((await rowsOf(orm).saga(key))?.counter).toBe(1);
      } finally {
        await orm.close(true);
      }
    });

    it('a lone UPDATE the database refuses began nothing: no ROLLBACK, nothing written, and the same connection carries the next unit', async () => {
      const { orm } = db();
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('refused');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      // A temporary table lives as long as its connection: still there afterwards, the connection was not replaced.
      await queryRows(orm.em, 'create temp table connection_marker (id integer)', []);
      await queryRows(
        orm.em,
        `create trigger refuse_note before update on scripted_saga when new.log like '%refused;%' begin select raise(abort, 'note refused'); end`,
        [],
      );
      try {
        const sent = record();
        const error = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'note', text: 'refused' }] }).catch((e) => e);
        expect(error).toBeInstanceOf(SagaPersistenceError);
        // The load, the refused UPDATE, then only reads (the failure's diagnosis): no BEGIN, no ROLLBACK.
        expect(kinds(sent).slice(0, 2)).toEqual(['select', 'update']);
        expect(
          kinds(sent)
            .slice(2)
            .every((kind) => kind === 'select'),
        ).toBe(true);
      } finally {
        await queryRows(orm.em, 'drop trigger refuse_note', []);
      }
      expect(await rowsOf(orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
      expect((await rowsOf(orm).saga(key))?.log).not.toContain('refused');
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(await rowsOf(orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
      expect(await queryRows(orm.em, 'select count(*) as n from connection_marker', [])).toEqual([{ n: 0 }]);
    });

    it("a group's transaction opens with its first unit's SAVEPOINT: no BEGIN is sent, and every unit is committed", async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      const keys = Array.from({ length: 8 }, (_, i) => uniqueKey(`group-${i}`));
      for (const key of keys) await runtime.handle(scriptedSaga, { type: 'Start', key });
      const sent = record();
      await Promise.all(keys.map((key) => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })));
      const statements = kinds(sent);
      expect(statements).not.toContain('begin');
      // Units queued behind the first formed at least one group: its transaction began with a SAVEPOINT.
      expect(statements).toContain('savepoint');
      for (let at = statements.indexOf('commit'); at >= 0; at = statements.indexOf('commit', at + 1)) {
        const opened = statements.lastIndexOf('savepoint', at);
        expect(opened, 'every COMMIT closes a transaction a SAVEPOINT opened').toBeGreaterThanOrEqual(0);
      }
      for (const key of keys) expect((await rowsOf(db().orm).saga(key))?.counter).toBe(1);
    });

    it('a first message (INSERT of the saga) goes between BEGIN and COMMIT', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('first');
      const sent = record();
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const k = kinds(sent);
      expect(k).toContain('begin');
      expect(k.indexOf('begin')).toBeLessThan(k.indexOf('insert'));
      expect(k.at(-1)).toBe('commit');
      expect((await rowsOf(db().orm).saga(key))?.log).toBe('started;');
    });

    it('a subscriber registered only on the fork the runtime was given (cloneEventManager) still keeps BEGIN and COMMIT, and hears the commit', async () => {
      const orm = await another();
      const fork = orm.em.fork({ cloneEventManager: true });
      const committed: string[] = [];
      fork.getEventManager().registerSubscriber({ afterTransactionCommit: async () => void committed.push('commit') } as EventSubscriber);
      const runtime = new SagaRuntime({ em: fork, sagas: [scriptedSaga] });
      const key = uniqueKey('fork-sub');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const sent = record(orm);
      committed.length = 0;
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(kinds(sent)).toEqual(['select', 'begin', 'update', 'commit']);
      expect(committed).toEqual(['commit']);
    });

    // A lone UPDATE carries the COMMIT request, and a SQLite error has no SQLSTATE: the refusal must still be the
    // UPDATE's, not a failed COMMIT.
    it('a lone UPDATE the database refuses is reported as the UPDATE on the saga table that failed, as the same refusal inside BEGIN/COMMIT is, not as a failed COMMIT', async () => {
      const refusal = async (orm: MikroORM) => {
        const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
        const key = uniqueKey('refusal');
        await runtime.handle(scriptedSaga, { type: 'Start', key });
        const remove = await refuseInserts(orm, 'scripted_saga', 'log', 'started;refused;');
        try {
          return (await runtime
            .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'note', text: 'refused' }] })
            .catch((e) => e)) as Error & {
            code?: string;
          };
        } finally {
          await remove();
        }
      };
      const lone = await refusal(await another());
      const subscribed = await another();
      subscribed.em.getEventManager().registerSubscriber({ afterTransactionCommit: async () => undefined } as EventSubscriber);
      const inTransaction = await refusal(subscribed);
      expect(inTransaction.message).toMatch(/update on scripted_saga failed/);
      expect({ code: lone.code, message: lone.message.replace(/scripted\/[0-9a-f-]+/, 'ID') }).toEqual({
        code: inTransaction.code,
        message: inTransaction.message.replace(/scripted\/[0-9a-f-]+/, 'ID'),
      });
    });

    it.skipIf(waitsForLocksSynchronously(dialect))(
      "a lone UPDATE refused with SQLITE_BUSY (busy timeout 50 ms, another connection's write lock held) is a lock-wait conflict, retried and counted, as inside BEGIN/COMMIT",
      async () => {
        const outcome = async (orm: MikroORM) => {
          await orm.em.getConnection().execute('pragma busy_timeout = 50');
          const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], concurrency: { maxAttempts: 2 } });
          const key = uniqueKey('busy0');
          await runtime.handle(scriptedSaga, { type: 'Start', key });
          const holder = await another();
          const knex = (holder.em.getConnection() as unknown as { getKnex(): import('knex').Knex }).getKnex();
          const trx = await knex.transaction();
          try {
            await trx.raw("update scripted_saga set log = log || 'held;' where key = ?", [key]);
            return (await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }).catch((e) => e)) as Error & {
              code?: string;
            };
          } finally {
            await trx.rollback();
          }
        };
        const lone = await outcome(await another({ pool: { min: 1, max: 1 } }));
        const subscribed = await another({ pool: { min: 1, max: 1 } });
        subscribed.em.getEventManager().registerSubscriber({ afterTransactionCommit: async () => undefined } as EventSubscriber);
        const inTransaction = await outcome(subscribed);
        expect(inTransaction.code).toBe('CONCURRENCY_CONFLICT');
        expect({ code: lone.code, message: lone.message.replace(/scripted\/[0-9a-f-]+/, 'ID') }).toEqual({
          code: inTransaction.code,
          message: inTransaction.message.replace(/scripted\/[0-9a-f-]+/, 'ID'),
        });
      },
      30_000,
    );
  });
}
