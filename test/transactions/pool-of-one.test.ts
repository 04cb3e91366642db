// The unit of work's own transaction (MikroORM 6: BEGIN/COMMIT/ROLLBACK sent on a pooled connection) on a pool of
// one connection, so every unit runs on the same connection: what one unit's transaction leaves behind, or what a
// context kept from it can still do, must not reach the next unit.
import type { EntityManager, EventSubscriber, MikroORM, Options, TransactionEventArgs } from '@mikro-orm/core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { ORM_MAJOR } from '../../src/orm/orm-major.js';
import { executeSql, queryRows } from '../../src/orm/sql-execution.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/** Lets a test act at three of the transaction events. */
class Hooks implements EventSubscriber {
  beforeCommit: ((args: TransactionEventArgs) => Promise<void>) | undefined;
  beforeRollback: ((args: TransactionEventArgs) => Promise<void>) | undefined;
  lastTransaction: unknown;
  async beforeTransactionCommit(args: TransactionEventArgs): Promise<void> {
    this.lastTransaction = args.transaction;
    await this.beforeCommit?.(args);
  }
  async beforeTransactionRollback(args: TransactionEventArgs): Promise<void> {
    await this.beforeRollback?.(args);
  }
}

const settle = (promise: Promise<unknown>) =>
  promise.then(
    () => undefined,
    (e: unknown) => e as Error & { code?: string },
  );

for (const dialect of DIALECTS) {
  describe(`a unit of work's transaction on a pool of one connection (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    beforeAll(async () => {
      await executeSql(db().orm.em, 'create table tx_notes (note varchar(100) not null)', [], 'run');
    });
    afterEach(async () => {
      // Returns only when every pooled connection went back: a leaked one would hang here.
      for (const orm of opened.splice(0)) await orm.close();
    });

    async function setUp(overrides: Partial<Options> = {}) {
      const orm = await db().openAnother({ pool: { min: 0, max: 1 }, ...overrides });
      opened.push(orm);
      const hooks = new Hooks();
      orm.em.getEventManager().registerSubscriber(hooks);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      return { orm, hooks, runtime };
    }

    const notes = async (prefix: string) =>
      (await queryRows<{ note: string }>(db().orm.em.fork(), 'select note from tx_notes where note like ?', [`${prefix}%`]))
        .map((row) => row.note)
        .sort();

    const insertNote = (em: EntityManager, note: string) => executeSql(em, 'insert into tx_notes (note) values (?)', [note], 'run');

    it("refuses a kept transaction context's statement while another unit's transaction holds the same connection", async () => {
      const { orm, hooks, runtime } = await setUp();
      const key = uniqueKey('reused');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const stale = orm.em.fork();
      stale.setTransactionContext(hooks.lastTransaction as never);

      // The next unit runs on the same (only) connection; the old context tries to write while it is open.
      let staleWrite: unknown = 'not tried';
      hooks.beforeCommit = async () => {
        hooks.beforeCommit = undefined;
        staleWrite = await settle(insertNote(stale, `${key}-stale`));
      };
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(staleWrite).toBeInstanceOf(Error);
      // MikroORM 7's kysely transaction says "Transaction is already committed".
      expect(String((staleWrite as Error).message)).toMatch(/transaction has ended|already committed/);
      expect(await notes(key)).toEqual([]);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1 });
    });

    it('refuses a nested em.transactional() on a kept transaction context once its unit ended, whatever the connection does now', async () => {
      const { orm, hooks, runtime } = await setUp();
      const key = uniqueKey('nested-stale');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const stale = orm.em.fork();
      stale.setTransactionContext(hooks.lastTransaction as never);

      // The connection is idle in the pool: a savepoint there must not run (SQLite would open a transaction with it).
      const idle = await settle(stale.transactional((tx) => insertNote(tx, `${key}-idle`)));
      expect(idle).toBeInstanceOf(Error);
      // The connection carries the next unit: a savepoint there would write into that unit.
      let inOther: unknown = 'not tried';
      hooks.beforeCommit = async () => {
        hooks.beforeCommit = undefined;
        inOther = await settle(stale.transactional((tx) => insertNote(tx, `${key}-other`)));
      };
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(inOther).toBeInstanceOf(Error);
      expect(await notes(key)).toEqual([]);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1 });
    });

    it('still sends ROLLBACK when a beforeTransactionRollback subscriber throws: the failed unit writes nothing, the next unit runs', async () => {
      const { hooks, runtime } = await setUp();
      const key = uniqueKey('rollback-hook');
      await runtime.handle(scriptedSaga, { type: 'Start', key });

      // A unit whose beforeTransactionCommit subscriber writes, then throws: COMMIT is not sent, ROLLBACK must be.
      hooks.beforeCommit = async ({ em }) => {
        hooks.beforeCommit = undefined;
        await insertNote(em!, `${key}-failed`);
        throw new Error('refused');
      };
      hooks.beforeRollback = async () => {
        hooks.beforeRollback = undefined;
        throw new Error('rollback subscriber broke');
      };
      const failed = await settle(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 10 }] }));
      expect(failed?.code).toBe('PERSISTENCE_FAILED');

      // The next unit on the same connection: its own transaction, nothing of the failed one in it.
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(await notes(key)).toEqual([]);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
    });

    it('does not hand out again a connection whose ROLLBACK could not be sent: the failed unit writes nothing, the next unit runs', async () => {
      // An `onQuery` hook (MikroORM's config) that fails once for ROLLBACK: the transaction stays open on the connection.
      let failRollback = false;
      const onQuery = (sql: string) => {
        if (failRollback && /^rollback$/i.test(sql.trim())) {
          failRollback = false;
          throw new Error('onQuery refused');
        }
        return sql;
      };
      const { hooks, runtime } = await setUp({ onQuery });
      const key = uniqueKey('rollback-unsent');
      await runtime.handle(scriptedSaga, { type: 'Start', key });

      hooks.beforeCommit = async ({ em }) => {
        hooks.beforeCommit = undefined;
        await insertNote(em!, `${key}-failed`);
        failRollback = true;
        throw new Error('refused');
      };
      const failed = await settle(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 10 }] }));
      expect(failed?.code).toBe('PERSISTENCE_FAILED');
      // MikroORM 7 sends SQLite's ROLLBACK through kysely, which does not consult onQuery: the scenario cannot happen there.
      if (ORM_MAJOR === 6 || dialect === 'postgresql') expect(failRollback).toBe(false);

      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(await notes(key)).toEqual([]);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
    });

    it('never reports success for a unit whose transaction the database rolled back at COMMIT (a subscriber swallowed a failed statement)', async () => {
      const { hooks, runtime } = await setUp();
      const key = uniqueKey('aborted');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      hooks.beforeCommit = async ({ em }) => {
        hooks.beforeCommit = undefined;
        // On PostgreSQL a failed statement aborts the transaction: COMMIT then rolls it back without an error.
        await settle(executeSql(em!, 'insert into tx_notes_missing (note) values (?)', [`${key}-x`], 'run'));
      };
      const outcome = await settle(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }));
      const row = await rowsOf(db().orm).saga(key);
      // Either the unit was written, or it failed saying so: never "handled" with nothing written.
      if (outcome === undefined) expect(row).toMatchObject({ counter: 1, version: 1 });
      else {
        expect(outcome.code).toBe('PERSISTENCE_FAILED');
        expect(outcome.message).toMatch(/rolled the transaction back at COMMIT.*nothing of it was written/);
        expect(row).toMatchObject({ counter: 0, version: 0 });
      }
      // PostgreSQL aborted the transaction; SQLite goes on after a failed statement and commits the rest.
      if (dialect === 'postgresql') expect(outcome?.code).toBe('PERSISTENCE_FAILED');
      // The connection is in working order for the next unit.
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect((await rowsOf(db().orm).saga(key))?.counter).toBe(dialect === 'postgresql' ? 1 : 2);
    });
  });
}
