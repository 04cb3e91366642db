// break18: the session of a unit's connection ends (pg_terminate_backend, a PostgreSQL restart, an idle-session
// timeout) after the connection was taken from the pool and before the unit sent anything on it (both majors; on
// MikroORM 7 the connection comes straight from MikroORM's pg pool, src/orm/mikro-orm-7/pg-held-transaction.ts).
import type { MikroORM, Options } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaPersistenceError, SagaRuntime } from '../../../src/index.js';
import { queryRows } from '../../../src/sql/sql-executor.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';
import { AfterStart } from '../../support/transaction-hooks.js';

describe('break18: a unit whose session ended before it sent anything (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  // Nothing of the unit reached the database: its BEGIN + UPDATE + COMMIT string was never sent (pg refuses a client
  // whose connection failed: "Client has encountered a connection error and is not queryable", no SQLSTATE). The
  // outcome is known: nothing was written, and the message can be handled again at once. Seen on both majors:
  // COMMIT_OUTCOME_UNKNOWN ("COMMIT ... failed outside the database ... may or may not have been written"), because
  // carryingCommit() reports any failure without a server's error code of the statement carrying COMMIT as COMMIT's.
  it('reports a known outcome (not COMMIT_OUTCOME_UNKNOWN) and writes nothing', async () => {
    const orm = await db().openAnother({ pool: { min: 0, max: 1 } } as Partial<Options>);
    opened.push(orm);
    const afterStart = new AfterStart();
    orm.em.getEventManager().registerSubscriber(afterStart);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('b18k');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    // The pool's only connection: the one the next unit takes.
    const [{ pid }] = (await queryRows<{ pid: number }>(orm.em.fork(), 'select pg_backend_pid() as pid', [])) as [{ pid: number }];
    const other = db().orm.em;
    afterStart.work = async () => {
      await queryRows(other.fork(), `select pg_terminate_backend(${pid})`, []);
      // Until the backend has gone (its FATAL message sent), then one more round trip so the client reads it.
      for (;;) {
        const [row] = await queryRows<{ n: number }>(
          other.fork(),
          `select count(*)::int as n from pg_stat_activity where pid = ${pid}`,
          [],
        );
        if (row!.n === 0) break;
      }
      await queryRows(other.fork(), 'select 1', []);
    };
    const error = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(afterStart.work).toBeUndefined();
    const [before] = await queryRows<{ counter: number }>(other.fork(), `select counter from scripted_saga where key = '${key}'`, []);
    expect(before!.counter).toBe(0);
    expect(error).toBeInstanceOf(SagaPersistenceError);
    expect((error as SagaPersistenceError).code).not.toBe('COMMIT_OUTCOME_UNKNOWN');
    // The next message is handled on a fresh connection.
    await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
    const [after] = await queryRows<{ counter: number }>(other.fork(), `select counter from scripted_saga where key = '${key}'`, []);
    expect(after!.counter).toBe(1);
  });
});
