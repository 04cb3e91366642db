// MikroORM 7 on PostgreSQL: the library holds a unit's transaction on a connection of MikroORM's pg pool itself
// (src/orm/mikro-orm-7/pg-held-transaction.ts) and gives MikroORM a transaction context of its own. What an
// application does with the EntityManager inside (or around) the unit must run as on kysely's own transaction: typed
// kysely queries (`em.getKysely()`, `.stream()`), `em.stream()`, nested `em.transactional()`, abort signals, onQuery
// hooks; nothing may run in the transaction once it has ended, and a connection whose transaction is still open never
// goes back to the pool.
import { type EntityManager, type EventSubscriber, LockMode, type MikroORM, type Options } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../../src/index.js';
import { ORM_MAJOR } from '../../../src/orm/orm-major.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { driverPg, KYSELY_TRANSACTIONS, statementsSent } from '../../support/pg-statements.js';
import { untilLockWaiters } from '../../support/row-locks.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';
import { AfterStart, BeforeCommit, type KyselyEm } from '../../support/transaction-hooks.js';

/** The MikroORM 7 leg's own kysely (the one MikroORM 7 runs on). */
async function legKysely(): Promise<{ PostgresDialect: new (config: object) => object }> {
  return (await import(new URL('../../../legs/mikro-orm-7/node_modules/kysely/dist/index.js', import.meta.url).href)) as never;
}

describe.runIf(ORM_MAJOR === 7)("a unit's transaction the library holds on a pg connection (MikroORM 7, postgresql)", () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  async function open(overrides: Partial<Options> = {}) {
    const orm = await db().openAnother({ pool: { min: 0, max: 1 }, ...overrides } as Partial<Options>);
    opened.push(orm);
    const beforeCommit = new BeforeCommit();
    const afterStart = new AfterStart();
    orm.em.getEventManager().registerSubscriber(beforeCommit);
    orm.em.getEventManager().registerSubscriber(afterStart);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('held7');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    return { orm, beforeCommit, afterStart, runtime, key };
  }

  it("em.getKysely() and em.stream() in the unit read the unit's own uncommitted write, on its connection", async () => {
    const { beforeCommit: hook, runtime, key } = await open();
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
    const { beforeCommit: hook, runtime, key } = await open();
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
    const { beforeCommit: hook, runtime, key } = await open();
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

  // MikroORM 7 documents `driverOptions` as a ready-made Kysely dialect (or instance): MikroORM then reuses it, and
  // `connection.getNativeClient()` throws ("The native client is not available ..."). holdsPgTransactions() only
  // looks at whether getNativeClient is a function, so every unit of work goes to holdPgTransaction and fails.
  it('a unit of work commits when driverOptions is a ready-made PostgresDialect (getNativeClient() refuses there)', async () => {
    const { PostgresDialect } = await legKysely();
    const pool = new driverPg.Pool({ connectionString: db().config.clientUrl, max: 2 });
    const orm = await db().openAnother({ driverOptions: new PostgresDialect({ pool }) } as Partial<Options>);
    opened.push(orm);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('held7-dialect');
    const started = await runtime.handle(scriptedSaga, { type: 'Start', key }).catch((error: unknown) => error);
    expect(String((started as Error)?.cause ?? started)).not.toMatch(/native client is not available/);
    expect(started).not.toBeInstanceOf(Error);
    await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 3 }] });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 3, version: 1 });
  });

  // MikroORM 7 lets a query be aborted with `{ signal, inflightQueryAbortStrategy: 'cancel query' }`. kysely asks the
  // transaction's connection for `cancelQuery` before it runs the query; kysely's own PostgresConnection has it, the
  // held connection (heldConnection) has not, so the query is refused before it is sent, although nothing aborted.
  for (const [name, overrides] of [
    ['held by the library', {}],
    ["kysely's own (onReserveConnection)", KYSELY_TRANSACTIONS],
  ] as const) {
    it(`em.find() with a signal and inflightQueryAbortStrategy 'cancel query' runs in the unit (transaction ${name})`, async () => {
      const { beforeCommit, runtime, key } = await open(overrides as Partial<Options>);
      let found: unknown;
      beforeCommit.work = async (em) => {
        const signal = new AbortController().signal;
        found = await em
          .find(ScriptedSaga, { key }, { signal, inflightQueryAbortStrategy: 'cancel query' } as never)
          .then((rows) => rows.map((saga) => ({ key: saga.key, counter: saga.counter })))
          .catch((error: unknown) => error);
      };
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 4 }] }).catch(() => undefined);
      expect(String(found)).not.toMatch(/doesn't support/);
      expect(found).toEqual([{ key, counter: 4 }]);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 4, version: 1 });
    });
  }

  // A typed query with parameters as the transaction's first statement: BEGIN must go before it (in the same
  // transaction), and the unit must still commit its own write.
  it("a parameterised em.getKysely() query as the transaction's first statement runs after BEGIN, in the unit", async () => {
    const { afterStart, runtime, key } = await open();
    let typed: unknown;
    afterStart.work = async (em) => {
      typed = await (em as KyselyEm)
        .getKysely()
        .selectFrom('scripted_saga')
        .select(['key', 'counter'])
        .where('key', '=', key)
        .execute()
        .catch((error: unknown) => error);
    };
    const sent = await statementsSent(() => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 5 }] }));
    expect(typed).toEqual([{ key, counter: 0 }]);
    const begin = sent.findIndex((sql) => /^begin\b/i.test(sql));
    const select = sent.findIndex((sql) => /from "scripted_saga"/.test(sql) && /\$1/.test(sql));
    expect(begin).toBeGreaterThanOrEqual(0);
    expect(select).toBeGreaterThan(begin);
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 5, version: 1 });
  });

  // em.stream() abandoned after its first row (the loop breaks): the cursor is closed in the transaction, the unit
  // commits, and the pool's only connection serves the next unit.
  it('em.stream() abandoned mid-way: the unit commits and the next unit runs on the pool of one', async () => {
    const { orm, beforeCommit, runtime, key } = await open();
    const other = uniqueKey('held7-other');
    await runtime.handle(scriptedSaga, { type: 'Start', key: other });
    let first: unknown;
    beforeCommit.work = async (em) => {
      for await (const saga of (em as KyselyEm).stream(ScriptedSaga, { where: { key: { $in: [key, other] } }, orderBy: { key: 'asc' } })) {
        first = saga.key;
        break;
      }
    };
    await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
    expect(first).toBeDefined();
    await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 2, version: 2 });
    // Nothing of the abandoned cursor stays open on the pooled connection.
    const [cursors] = await orm.em.fork().getConnection().execute<{ n: number }[]>('select count(*)::int as n from pg_cursors');
    expect(cursors!.n).toBe(0);
  });
  // The unit's own connection is terminated by the server mid-unit (before COMMIT): the unit fails, nothing is written,
  // the pool's only slot is not leaked (the next unit runs), and orm.close() (afterEach) does not wait forever.
  it("the unit's connection terminated before COMMIT on a pool of one: nothing written, the next unit runs", async () => {
    const { beforeCommit, runtime, key } = await open();
    beforeCommit.work = async (em) => {
      await em
        .getConnection()
        .execute('select pg_terminate_backend(pg_backend_pid())', [], 'all', em.getTransactionContext())
        .catch(() => undefined);
    };
    const failed = await runtime
      .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 9 }] })
      .catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(Error);
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
    await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 1 }] });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
  });

  // An onQuery hook refuses the unit's COMMIT and its ROLLBACK (both the library's own statements): the connection,
  // its transaction still open, must not go back to the pool of one; the next unit runs on a new one, and commits.
  it('onQuery refusing COMMIT and ROLLBACK: the open transaction is not handed to the next unit', async () => {
    let refuse = false;
    const onQuery = (sql: string) => {
      if (refuse && /^\s*(commit|rollback)\s*$/i.test(sql)) throw new Error(`hook refused ${sql}`);
      return sql;
    };
    const { runtime, key, orm } = await open({ onQuery } as Partial<Options>);
    // A subscriber on the transaction's end: COMMIT is not carried by the UPDATE, so it goes through the hook.
    orm.em.getEventManager().registerSubscriber({ afterTransactionCommit: async () => undefined } as EventSubscriber);
    refuse = true;
    const failed = await runtime
      .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 9 }] })
      .catch((error: unknown) => error);
    refuse = false;
    expect(failed).toBeInstanceOf(Error);
    await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 1 }] }).catch(() => undefined);
    // Seen from another connection: the first unit's write never committed, the second's did.
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
    const [idle] = await db()
      .orm.em.fork()
      .getConnection()
      .execute<{ n: number }[]>(
        "select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'",
      );
    expect(idle!.n).toBe(0);
  });
  // The same refusal hits the library's own statements: an application whose EntityManager carries a default abort
  // signal with 'cancel query' (`em.fork({ signal, inflightQueryAbortStrategy })`, inherited by every fork the runtime
  // makes, and applied by MikroORM's `em.execute()` to every statement) cannot handle any message on the held path.
  for (const [name, overrides] of [
    ['held by the library', {}],
    ["kysely's own (onReserveConnection)", KYSELY_TRANSACTIONS],
  ] as const) {
    it(`a runtime on an EntityManager with a 'cancel query' abort signal handles messages (transaction ${name})`, async () => {
      const orm = await db().openAnother({ pool: { min: 0, max: 2 }, ...overrides } as Partial<Options>);
      opened.push(orm);
      const controller = new AbortController();
      const em = orm.em.fork({ signal: controller.signal, inflightQueryAbortStrategy: 'cancel query' } as never);
      const runtime = new SagaRuntime({ em, sagas: [scriptedSaga], groupCommit: false });
      const key = uniqueKey('held7-signal');
      const started = await runtime.handle(scriptedSaga, { type: 'Start', key }).catch((error: unknown) => error);
      expect(String((started as Error)?.cause ?? started)).not.toMatch(/doesn't support/);
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 2 }] });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 2, version: 1 });
    });
  }
  // kysely's own `.stream()` of a typed query inside the unit: a SELECT with parameters, and an UPDATE ... RETURNING
  // (kysely streams any statement that returns rows: pg-cursor on kysely's own transaction). The held connection
  // streams through `declare ... cursor for <query>`, which PostgreSQL accepts for a SELECT only.
  for (const [name, overrides] of [
    ['held by the library', {}],
    ["kysely's own (onReserveConnection)", KYSELY_TRANSACTIONS],
  ] as const) {
    it(`a typed kysely .stream() of UPDATE ... RETURNING runs in the unit (transaction ${name})`, async () => {
      const { beforeCommit, runtime, key } = await open(overrides as Partial<Options>);
      const streamed: unknown[] = [];
      let failure: unknown;
      beforeCommit.work = async (em) => {
        type Chain = { [method: string]: (...args: unknown[]) => Chain } & { stream(): AsyncIterable<unknown> };
        const kysely = (em as unknown as { getKysely(): Chain }).getKysely();
        const update = kysely.updateTable!('scripted_saga').set!({ log: 'streamed' }).where!('key', '=', key).returning!(['key', 'log']);
        try {
          for await (const row of update.stream()) streamed.push(row);
        } catch (error) {
          failure = error;
        }
      };
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 6 }] }).catch(() => undefined);
      expect(String(failure ?? '')).toBe('');
      expect(streamed).toEqual([{ key, log: 'streamed' }]);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 6, version: 1, log: 'streamed' });
    });

    it(`a typed kysely .stream() of a SELECT with parameters runs in the unit (transaction ${name})`, async () => {
      const { beforeCommit, runtime, key } = await open(overrides as Partial<Options>);
      const streamed: unknown[] = [];
      let failure: unknown;
      beforeCommit.work = async (em) => {
        const query = (em as KyselyEm)
          .getKysely()
          .selectFrom('scripted_saga')
          .select(['key', 'counter'])
          .where('key', '=', key) as unknown as {
          stream(): AsyncIterable<unknown>;
        };
        try {
          for await (const row of query.stream()) streamed.push(row);
        } catch (error) {
          failure = error;
        }
      };
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 8 }] }).catch(() => undefined);
      expect(String(failure ?? '')).toBe('');
      expect(streamed).toEqual([{ key, counter: 8 }]);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 8, version: 1 });
    });
  }
  // em.find() with a signal (kysely's default 'ignore query') aborted while it waits for a row lock in the unit: the
  // step fails, the query goes on on the unit's connection until the lock is free, then ROLLBACK; nothing of the unit
  // is written and the pool's only connection carries the next unit outside any leftover transaction.
  for (const [name, overrides] of [
    ['held by the library', {}],
    ["kysely's own (onReserveConnection)", KYSELY_TRANSACTIONS],
  ] as const) {
    it(`a query aborted in flight in the unit: nothing written, the next unit runs clean (transaction ${name})`, async () => {
      const { beforeCommit, runtime, key } = await open(overrides as Partial<Options>);
      const other = uniqueKey('held7-locked');
      await runtime.handle(scriptedSaga, { type: 'Start', key: other });
      const holder = db().orm.em.fork();
      await holder.begin();
      await holder
        .getConnection()
        .execute('select 1 from scripted_saga where key = ? for update', [other], 'all', holder.getTransactionContext());
      const controller = new AbortController();
      let aborted: unknown;
      beforeCommit.work = async (em) => {
        aborted = await em
          .find(ScriptedSaga, { key: other }, { signal: controller.signal, lockMode: LockMode.PESSIMISTIC_WRITE } as never)
          .catch((error: unknown) => error);
        throw new Error('step gave up');
      };
      const handled = runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 9 }] }).catch((error: unknown) => error);
      try {
        await untilLockWaiters(db().orm);
        controller.abort(new Error('caller gave up'));
      } finally {
        await holder.rollback();
      }
      expect(await handled).toBeInstanceOf(Error);
      expect(String(aborted)).toMatch(/caller gave up/);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 1 }] });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
      const [idle] = await db()
        .orm.em.fork()
        .getConnection()
        .execute<{ n: number }[]>(
          "select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'",
        );
      expect(idle!.n).toBe(0);
    });
  }
});
