// The folded BEGIN / COMMIT of a unit of work (MikroORM 6 on PostgreSQL): `begin; <statement>; commit` in one simple
// query. Whatever the statement's text ends with, COMMIT must run as a statement of its own, and a unit whose COMMIT
// did not run must never be taken for committed.

import type { EventSubscriber, MikroORM, TransactionEventArgs } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../../src/index.js';
import { executeSql } from '../../../src/orm/sql-execution.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/** Runs a test's callback once, before the next COMMIT. */
class BeforeCommit implements EventSubscriber {
  once: ((args: TransactionEventArgs) => Promise<void>) | undefined;
  async beforeTransactionCommit(args: TransactionEventArgs): Promise<void> {
    const once = this.once;
    this.once = undefined;
    await once?.(args);
  }
}

/** sqlcommenter's style: a block comment after each statement. */
const sqlCommenter = (sql: string) => `${sql} /*app='tagged'*/`;

describe('folded COMMIT (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  it("an onQuery hook that tags each statement with a trailing '--' comment does not swallow COMMIT", async () => {
    // A common way to tag queries for pg_stat_statements / logs: a line comment after the statement.
    const orm = await db().openAnother({ onQuery: (sql: string) => `${sql} -- app=tagged`, pool: { min: 0, max: 1 } });
    opened.push(orm);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('comment');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    const result = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
    expect(result.version).toBe(1);
    // Seen from another connection: the UPDATE was committed, not left open on the pooled connection.
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
    const other = uniqueKey('comment-other');
    await runtime.handle(scriptedSaga, { type: 'Start', key: other });
    await runtime.handle(scriptedSaga, { type: 'Do', key: other, actions: [{ op: 'inc' }] });
    expect(await rowsOf(db().orm).saga(other)).toMatchObject({ counter: 1, version: 1 });
  });

  it('a COMMIT an onQuery hook tagged is still read: one answered with ROLLBACK fails the unit, nothing reported handled', async () => {
    const orm = await db().openAnother({ onQuery: sqlCommenter, pool: { min: 0, max: 1 } });
    opened.push(orm);
    const hook = new BeforeCommit();
    orm.em.getEventManager().registerSubscriber(hook);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('tagged-commit');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    hook.once = async ({ em }) => {
      // A failed statement aborts the transaction; PostgreSQL answers the COMMIT after it with ROLLBACK.
      await executeSql(em!, 'select * from saga_test_missing_table', [], 'all').catch(() => undefined);
    };
    const outcome = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }).then(
      () => undefined,
      (e: unknown) => e as Error & { code?: string },
    );
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
    expect(outcome?.code).toBe('PERSISTENCE_FAILED');
  });

  it("a subscriber's nested em.transactional() as the transaction's first statement runs inside the unit's transaction", async () => {
    await executeSql(db().orm.em.fork(), 'create table if not exists tx_notes (note varchar(100) not null)', [], 'run');
    const orm = await db().openAnother({ pool: { min: 0, max: 1 } });
    opened.push(orm);
    let note: string | undefined;
    const atStart: EventSubscriber = {
      async afterTransactionStart({ em }: TransactionEventArgs) {
        if (!note) return;
        const text = note;
        // MikroORM 7 fires the event for the nested transaction too: it must not open another.
        note = undefined;
        // A savepoint on the unit's transaction: BEGIN must already be in force when it is sent.
        await em!.transactional((tx) => executeSql(tx, 'insert into tx_notes (note) values (?)', [text], 'run'), { clear: true });
      },
    };
    orm.em.getEventManager().registerSubscriber(atStart);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('nested');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    note = key;
    const result = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
    expect(result.version).toBe(1);
    const notes = await executeSql<{ note: string }[]>(db().orm.em.fork(), 'select note from tx_notes where note = ?', [key], 'all');
    expect(notes).toEqual([{ note: key }]);
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
  });

  it('many callers on one saga over a pool of three: every increment applied once, none lost or doubled', async () => {
    const orm = await db().openAnother({ pool: { min: 0, max: 3 } });
    opened.push(orm);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false, concurrency: { maxAttempts: 200 } });
    const key = uniqueKey('many');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    const results = await Promise.all(
      Array.from({ length: 24 }, () => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })),
    );
    expect(results.map((r) => r.version).sort((a, b) => (a ?? 0) - (b ?? 0))).toEqual(Array.from({ length: 24 }, (_, i) => i + 1));
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 24, version: 24 });
  });

  it('a deferred constraint that fails at the folded COMMIT: nothing written, said so, and the connection carries the next unit', async () => {
    const admin = db().orm.em.fork();
    await executeSql(
      admin,
      `create or replace function saga_test_refuse_13() returns trigger language plpgsql as $$
       begin if new.counter = 13 then raise exception 'thirteen' using errcode = 'P0013'; end if; return new; end $$`,
      [],
      'run',
    );
    await executeSql(admin, 'drop trigger if exists saga_test_refuse_13 on scripted_saga', [], 'run');
    await executeSql(
      admin,
      'create constraint trigger saga_test_refuse_13 after update on scripted_saga deferrable initially deferred for each row execute function saga_test_refuse_13()',
      [],
      'run',
    );
    try {
      const orm = await db().openAnother({ pool: { min: 0, max: 1 } });
      opened.push(orm);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
      const key = uniqueKey('deferred');
      await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc', by: 12 }] });
      const failure = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }).then(
        () => undefined,
        (e: unknown) => e as Error & { code?: string },
      );
      expect(failure?.code).toBe('PERSISTENCE_FAILED');
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 12, version: 0 });
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 2 }] });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 14, version: 1 });
    } finally {
      await executeSql(admin, 'drop trigger if exists saga_test_refuse_13 on scripted_saga', [], 'run');
    }
  });
});
