// Claims run under `set local enable_sort = off` and `set local jit = off` on PostgreSQL (MikroORM 6: one string;
// MikroORM 7: BEGIN, the settings, the claim and COMMIT as one string on a connection the library holds, or a
// transaction of kysely's where kysely must hand out the connection). A trigger on both dispatch tables records the
// settings each claim actually ran under and, when armed, fails the claim in a chosen way (a server error, the
// connection killed during the claim or at its commit, a claim outlasting the connection's statement_timeout). After
// each fault: the pass failed, no connection idles in a transaction, the connection the dispatcher uses next (pool of
// one) has sorting on, and the next pass claims and delivers everything.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { pgConnectionOptions } from '../../../src/orm/connection-info.js';
import { ORM_MAJOR } from '../../../src/orm/orm-major.js';
import { queryRows } from '../../../src/orm/sql-execution.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

type Fault = 'error' | 'terminate' | 'terminate at commit' | 'statement_timeout';

const TRIGGERS = `
create table saga_test_seen (tbl text, backend int, sort text, jit text);
create table saga_test_fault (kind text);
create sequence saga_test_shots;
create function saga_test_claim() returns trigger language plpgsql as $$
begin
  insert into saga_test_seen values (tg_table_name, pg_backend_pid(), current_setting('enable_sort'), current_setting('jit'));
  if exists (select 1 from saga_test_fault where kind <> 'terminate at commit') and nextval('saga_test_shots') = 1 then
    case (select kind from saga_test_fault limit 1)
      when 'error' then raise exception 'claim refused';
      when 'terminate' then perform pg_terminate_backend(pg_backend_pid()); perform pg_sleep(5);
      when 'statement_timeout' then perform pg_sleep(5);
      else null;
    end case;
  end if;
  return new;
end $$;
create function saga_test_at_commit() returns trigger language plpgsql as $$
begin
  if exists (select 1 from saga_test_fault where kind = 'terminate at commit') and nextval('saga_test_shots') = 1 then
    perform pg_terminate_backend(pg_backend_pid()); perform pg_sleep(5);
  end if;
  return null;
end $$;
create trigger saga_test_claim before update on saga_timer for each row when (old.token is distinct from new.token) execute function saga_test_claim();
create trigger saga_test_claim before update on saga_outbox for each row when (old.token is distinct from new.token) execute function saga_test_claim();
create constraint trigger saga_test_commit after update on saga_timer deferrable initially deferred for each row when (old.token is distinct from new.token) execute function saga_test_at_commit();
create constraint trigger saga_test_commit after update on saga_outbox deferrable initially deferred for each row when (old.token is distinct from new.token) execute function saga_test_at_commit();
`;

describe('claims under planner settings, faults (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];

  beforeAll(async () => {
    for (const statement of TRIGGERS.split(/;\n(?=create)/)) await db().orm.em.getConnection().execute(statement);
  });
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close(true);
    await db().orm.em.getConnection().execute('delete from saga_test_fault');
    await db().orm.em.getConnection().execute('delete from saga_test_seen');
    await db().orm.em.getConnection().execute(`select setval('saga_test_shots', 1, false)`);
  });

  async function seed(clock: FakeClock, count: number): Promise<void> {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    for (let n = 0; n < count; n++) {
      await runtime.handle(scriptedSaga, {
        type: 'Start',
        key: uniqueKey('b16'),
        actions: [
          { op: 'send', message: { type: `Out${n}` } },
          { op: 'schedule', name: 'later', after: 1_000 },
        ],
      });
    }
  }

  async function idleInTransaction(): Promise<number> {
    const [row] = await queryRows<{ n: string }>(
      db().orm.em.fork(),
      `select count(*) as "n" from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'`,
      [],
    );
    return Number(row!.n);
  }

  async function pending(): Promise<{ outbox: number; timers: number }> {
    const [row] = await queryRows<{ o: string; t: string }>(
      db().orm.em.fork(),
      `select (select count(*) from saga_outbox where dispatched_at is null) as "o", (select count(*) from saga_timer where dispatched_at is null) as "t"`,
      [],
    );
    return { outbox: Number(row!.o), timers: Number(row!.t) };
  }

  async function drainAll(clock: FakeClock): Promise<void> {
    // Whatever an earlier test left pending is delivered first by a plain dispatcher.
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger, publish: async () => undefined, batchSize: 500 });
    clock.advance(120_000);
    for (let i = 0; i < 10; i++) {
      const p = await pending();
      if (p.outbox === 0 && p.timers === 0) return;
      await dispatcher.runOnce();
    }
  }

  /** A dispatcher on an ORM of its own with a pool of one connection (`overrides` on top), recording what it publishes. */
  async function dispatcherOnOneConnection(
    clock: FakeClock,
    overrides: Parameters<ReturnType<typeof db>['openAnother']>[0] = {},
    options: { readonly concurrency?: number } = {},
  ) {
    const orm = await db().openAnother({ pool: { min: 1, max: 1 }, ...overrides });
    opened.push(orm);
    const published: string[] = [];
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
    const dispatcher = new SagaDispatcher({
      runtime,
      clock,
      logger: silentLogger,
      batchSize: 10,
      ...options,
      publish: async (envelope) => {
        published.push(envelope.type);
      },
    });
    return { orm, dispatcher, published };
  }

  for (const fault of ['error', 'terminate', 'terminate at commit', 'statement_timeout'] as Fault[]) {
    it(`a claim failing (${fault}) fails the pass, leaves no connection in a transaction, the next pass delivers`, async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      await drainAll(clock);
      await seed(clock, 3);
      const { orm, dispatcher, published } = await dispatcherOnOneConnection(
        clock,
        fault === 'statement_timeout' ? { driverOptions: pgConnectionOptions({ serverOptions: '-c statement_timeout=300' }) } : {},
        { concurrency: 4 },
      );
      await db().orm.em.getConnection().execute(`insert into saga_test_fault values ('${fault}')`);
      clock.advance(2_000);
      const failure = await dispatcher.runOnce().then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure, 'the pass fails').toBeInstanceOf(Error);
      expect(await idleInTransaction()).toBe(0);
      // The dispatcher's pool holds one connection: the one the application gets next.
      const [after] = await queryRows<{ sort: string; jit: string; tx: boolean }>(
        orm.em.fork(),
        `select current_setting('enable_sort') as "sort", current_setting('jit') as "jit", now() = statement_timestamp() as "tx"`,
        [],
      );
      expect(after).toMatchObject({ sort: 'on' });
      await db().orm.em.getConnection().execute('delete from saga_test_fault');
      const result = await dispatcher.runOnce();
      expect(published.filter((t) => t.startsWith('Out')).sort()).toEqual(['Out0', 'Out1', 'Out2']);
      expect(result.timers.fired).toBe(3);
      expect(await pending()).toEqual({ outbox: 0, timers: 0 });
      // Every claim that committed (of the failed pass and of the recovered one) ran under the settings.
      const seen = await queryRows<{ tbl: string; sort: string; jit: string }>(db().orm.em.fork(), 'select * from saga_test_seen', []);
      expect(seen.length).toBe(6);
      expect(new Set(seen.map((s) => `${s.sort}/${s.jit}`))).toEqual(new Set(['off/off']));
      expect(await idleInTransaction()).toBe(0);
    });
  }

  for (const hook of ['trailing line comment', 'leading block comment'] as const) {
    it(`an onQuery hook adding a ${hook} keeps the settings in force and swallows nothing`, async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      await drainAll(clock);
      await seed(clock, 2);
      const { orm, dispatcher, published } = await dispatcherOnOneConnection(clock, {
        onQuery: (sql: string) => (hook === 'trailing line comment' ? `${sql} -- tag` : `/* tag */ ${sql}`),
      });
      clock.advance(2_000);
      const result = await dispatcher.runOnce();
      expect(result.timers.fired).toBe(2);
      expect(published.filter((t) => t.startsWith('Out')).sort()).toEqual(['Out0', 'Out1']);
      const seen = await queryRows<{ sort: string; jit: string }>(db().orm.em.fork(), 'select * from saga_test_seen', []);
      expect(seen.length).toBe(4);
      expect(new Set(seen.map((s) => `${s.sort}/${s.jit}`))).toEqual(new Set(['off/off']));
      const [after] = await queryRows<{ sort: string }>(orm.em.fork(), `select current_setting('enable_sort') as "sort"`, []);
      expect(after).toEqual({ sort: 'on' });
      expect(await idleInTransaction()).toBe(0);
    });
  }

  // An onQuery hook that refuses the claim's `commit`, or the `rollback` after a failed claim (on MikroORM 7 they end a
  // transaction of their own): the transaction must not go back to the pool open. It did, while the library sent them
  // as statements through MikroORM (the hook threw, nothing reached the server, and kysely's connection().execute
  // released the connection as clean). Now COMMIT goes in the claim's own string (the hook is never asked about it),
  // and a ROLLBACK the hook refuses has the pool close the connection: the claim commits (the pass succeeds) or
  // rolls back (the pass fails on the claim's own error).
  for (const refused of ['commit', 'rollback'] as const) {
    // MikroORM 6 sends the settings, the claim and (implicitly) its end as one string: no such statement exists.
    it.skipIf(ORM_MAJOR === 6)(
      `an onQuery hook refusing the claim's ${refused} leaves no transaction open on the application's connection`,
      async () => {
        const clock = new FakeClock('2026-01-05T09:00:00.000Z');
        await drainAll(clock);
        await seed(clock, 2);
        // The refused statement is the one after the pass's last claim (a pass claims both tables, one after the other
        // on a pool of one): nothing the dispatcher sends later on that connection ends the transaction.
        const refuseAfterClaim = refused === 'commit' ? 2 : 1;
        let armed = false;
        let claims = 0;
        const { orm, dispatcher } = await dispatcherOnOneConnection(clock, {
          onQuery: (sql: string) => {
            if (armed && /update "saga_(timer|outbox)" set "token" =|with "locked" as/.test(sql)) claims++;
            if (armed && claims === refuseAfterClaim && sql.trim().toLowerCase() === refused) {
              armed = false;
              throw new Error(`${refused} refused by the onQuery hook`);
            }
            return sql;
          },
        });
        if (refused === 'rollback') await db().orm.em.getConnection().execute(`insert into saga_test_fault values ('error')`);
        armed = true;
        // Timers not due yet: no timer delivery (whose unit's commit would end the open transaction too) follows.
        clock.advance(refused === 'commit' ? 500 : 2_000);
        const failure = await dispatcher.runOnce().then(
          () => undefined,
          (error: unknown) => error,
        );
        if (refused === 'commit') expect(failure, 'the claim commits').toBeUndefined();
        else expect(failure, 'the pass fails on the claim').toBeInstanceOf(Error);
        await db().orm.em.getConnection().execute('delete from saga_test_fault');
        // The application's next statement on the pool's one connection: an autocommit write, then the settings.
        await orm.em.fork().getConnection().execute(`insert into saga_test_seen values ('app', pg_backend_pid(), 'app', 'app')`);
        const [after] = await queryRows<{ sort: string }>(orm.em.fork(), `select current_setting('enable_sort') as "sort"`, []);
        const state = await queryRows<{ state: string }>(
          db().orm.em.fork(),
          `select state from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() and state like 'idle%'`,
          [],
        );
        const appWrite = await queryRows<{ tbl: string }>(db().orm.em.fork(), `select tbl from saga_test_seen where tbl = 'app'`, []);
        expect({
          sort: after!.sort,
          idleInTransaction: state.filter((s) => s.state !== 'idle').length,
          appWriteVisible: appWrite.length,
        }).toEqual({
          sort: 'on',
          idleInTransaction: 0,
          appWriteVisible: 1,
        });
      },
    );
  }

  it('two dispatchers over one backlog (pool of one each) claim disjoint batches, nothing twice', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    await drainAll(clock);
    await seed(clock, 40);
    await db().orm.em.getConnection().execute('delete from saga_test_seen');
    const firedRows = async () =>
      Number(
        (await queryRows<{ n: string }>(db().orm.em.fork(), `select count(*) as "n" from saga_timer where outcome = 'fired'`, []))[0]!.n,
      );
    const firedBefore = await firedRows();
    const published: string[] = [];
    const dispatchers = [];
    for (let d = 0; d < 2; d++) {
      const orm = await db().openAnother({ pool: { min: 1, max: 1 } });
      opened.push(orm);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
      dispatchers.push(
        new SagaDispatcher({
          runtime,
          clock,
          logger: silentLogger,
          batchSize: 7,
          concurrency: 3,
          publish: async (envelope) => {
            published.push(envelope.type);
          },
        }),
      );
    }
    clock.advance(2_000);
    let fired = 0;
    for (let round = 0; round < 10 && (published.length < 40 || fired < 40); round++) {
      const results = await Promise.all(dispatchers.map((d) => d.runOnce()));
      fired += results.reduce((n, r) => n + r.timers.fired, 0);
    }
    expect(published.length).toBe(40);
    expect(new Set(published).size).toBe(40);
    // Each delivery fired a row of its own (a leftover of an earlier test may fire too): none twice.
    expect(fired).toBe((await firedRows()) - firedBefore);
    expect(fired).toBeGreaterThanOrEqual(40);
    const seen = await queryRows<{ backend: number }>(db().orm.em.fork(), 'select distinct backend from saga_test_seen', []);
    expect(seen.length).toBe(2);
  });
});
