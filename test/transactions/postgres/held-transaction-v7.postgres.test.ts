// MikroORM 7 on PostgreSQL: the library holds a unit's transaction on a connection of MikroORM's pg pool itself
// (src/orm/mikro-orm-7/pg-held-transaction.ts) and gives MikroORM a transaction context of its own. What an application does with
// the EntityManager inside the unit (a transaction subscriber here) must run in that transaction as on kysely's own:
// typed kysely queries (`em.getKysely()`), `em.stream()`, nested `em.transactional()`; and nothing may run in it
// once it has ended.
import type { EntityManager, MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../../src/index.js';
import { ORM_MAJOR } from '../../../src/orm/orm-major.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { statementsSent } from '../../support/pg-statements.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';
import { BeforeCommit, type KyselyEm } from '../../support/transaction-hooks.js';

describe.runIf(ORM_MAJOR === 7)("a unit's transaction the library holds on MikroORM 7 (postgresql)", () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  async function setUp() {
    // A pool of one connection: anything that ran outside the unit's transaction would wait for it forever.
    const orm = await db().openAnother({ pool: { min: 0, max: 1 } });
    opened.push(orm);
    const hook = new BeforeCommit();
    orm.em.getEventManager().registerSubscriber(hook);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('held7');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    return { hook, runtime, key };
  }

  it("em.getKysely() and em.stream() in the unit read the unit's own uncommitted write, on its connection", async () => {
    const { hook, runtime, key } = await setUp();
    let typed: unknown[] = [];
    const streamed: { key: string; counter: number }[] = [];
    hook.work = async (em) => {
      const kyselyEm = em as KyselyEm;
      typed = await kyselyEm.getKysely().selectFrom('scripted_saga').select(['key', 'counter']).where('key', '=', key).execute();
      for await (const saga of kyselyEm.stream(ScriptedSaga, { where: { key } })) streamed.push({ key: saga.key, counter: saga.counter });
    };
    const sent = await statementsSent(() => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 7 }] }));
    expect(typed).toEqual([{ key, counter: 7 }]);
    expect(streamed).toEqual([{ key, counter: 7 }]);
    // The stream read through a cursor of the transaction's own.
    expect(sent.some((sql) => /^declare saga_stream_\d+ no scroll cursor for /.test(sql))).toBe(true);
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 7, version: 1 });
  });

  it("a nested em.transactional() that fails rolls back to its savepoint; the unit's own write commits", async () => {
    const { hook, runtime, key } = await setUp();
    hook.work = async (em) => {
      await em
        .transactional(async (nested) => {
          await nested
            .getConnection()
            .execute('update scripted_saga set counter = 1000 where key = ?', [key], 'run', nested.getTransactionContext());
          throw new Error('nested refused');
        })
        .catch((error: Error) => expect(error.message).toBe('nested refused'));
    };
    const sent = await statementsSent(() => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 2 }] }));
    expect(sent.some((sql) => /^savepoint "trx1"$/.test(sql))).toBe(true);
    expect(sent.some((sql) => /^rollback to savepoint "trx1"$/.test(sql))).toBe(true);
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 2, version: 1 });
  });

  it('refuses another transaction begun on its context, and any statement on a context kept after the unit ended', async () => {
    const { hook, runtime, key } = await setUp();
    let kept: { em: EntityManager; context: unknown } | undefined;
    let refusal: unknown;
    hook.work = async (em) => {
      kept = { em, context: em.getTransactionContext() };
      refusal = await (em as KyselyEm)
        .getKysely()
        .transaction()
        .execute(async () => undefined)
        .catch((error: unknown) => error);
    };
    await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
    expect(String(refusal)).toMatch(/cannot begin, commit or roll back another one/);
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
    // The fork left the transaction when it ended; a statement on the old context is refused, and sends nothing.
    expect(kept!.em.getTransactionContext()).toBeUndefined();
    const sent = await statementsSent(async () => {
      const late = await kept!.em
        .getConnection()
        .execute('select 1', [], 'all', kept!.context as never)
        .catch((error: unknown) => error);
      expect(String(late)).toMatch(/transaction has ended/);
    });
    expect(sent).toEqual([]);
  });
});
