// A unit that rolls back before it sent any statement (BEGIN still waiting to go with the first one) while an
// afterTransactionRollback subscriber runs a statement through the unit's EntityManager. The library dispatches that
// event before it lets go of the connection, with the unit's transaction context still set: the subscriber's statement
// would carry the BEGIN that never went, and the connection must not go back to the pool inside a transaction nobody
// ends.
import type { EventSubscriber, MikroORM, Options, TransactionEventArgs } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

type Executing = { execute(sql: string, params?: unknown[], method?: 'all' | 'get' | 'run'): Promise<unknown> };

/** Fails the next unit as its transaction starts, and notes the rollback with a statement of its own. */
class AuditRollback implements EventSubscriber {
  failNextStart = false;
  note: string | undefined;
  afterStatement: unknown;
  async afterTransactionStart(): Promise<void> {
    if (!this.failNextStart) return;
    this.failNextStart = false;
    throw new Error('refused at start');
  }
  async afterTransactionRollback({ em }: TransactionEventArgs): Promise<void> {
    const note = this.note;
    this.note = undefined;
    if (!note) return;
    this.afterStatement = await (em as unknown as Executing)
      .execute('update scripted_saga set log = ? where key = ?', ['rolled back', note], 'run')
      .catch((error: unknown) => error);
  }
}

describe('a statement in afterTransactionRollback of a unit that sent nothing (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  it('the connection does not go back to the pool inside the transaction that statement opened', async () => {
    const orm = await db().openAnother({ pool: { min: 0, max: 1 } });
    opened.push(orm);
    const audit = new AuditRollback();
    orm.em.getEventManager().registerSubscriber(audit);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('b17-audit');
    await runtime.handle(scriptedSaga, { type: 'Start', key });

    audit.failNextStart = true;
    audit.note = key;
    const failed = await runtime
      .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 5 }] })
      .catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(Error);

    // Whatever became of the subscriber's statement (refused, or run on its own), no session is left in a transaction.
    const idle = await db()
      .orm.em.fork()
      .getConnection()
      .execute<{ n: number }[]>(
        "select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'",
      );
    expect(idle[0]!.n).toBe(0);

    // The pool's only connection carries the next unit, whose write another connection sees committed.
    await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 1 }] });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
  });
  // The same without a throwing subscriber: an onQuery hook (a maintenance switch refusing writes to the saga table)
  // refuses the unit's first statement before anything was sent, and the audit subscriber notes the rollback.
  it("the same when an onQuery hook refused the unit's first statement", async () => {
    let readOnly = false;
    const onQuery = (sql: string) => {
      if (readOnly && /^update "scripted_saga"/.test(sql)) throw new Error('writes are switched off');
      return sql;
    };
    const orm = await db().openAnother({ pool: { min: 0, max: 1 }, onQuery } as Partial<Options>);
    opened.push(orm);
    const audit = new AuditRollback();
    orm.em.getEventManager().registerSubscriber(audit);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('b17-audit-hook');
    await runtime.handle(scriptedSaga, { type: 'Start', key });

    readOnly = true;
    audit.note = key;
    const failed = await runtime
      .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 5 }] })
      .catch((error: unknown) => error);
    readOnly = false;
    expect(failed).toBeInstanceOf(Error);

    const idle = await db()
      .orm.em.fork()
      .getConnection()
      .execute<{ n: number }[]>(
        "select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'",
      );
    expect(idle[0]!.n).toBe(0);
    await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 1 }] });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
  });
});
