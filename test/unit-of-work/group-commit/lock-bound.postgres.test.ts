// The lock bound on PostgreSQL: a group's transaction waits at most `groupCommit.lockTimeoutMs` for a row lock
// (`lock_timeout` for the transaction, set by a statement of its own in the string of the unit's first statement,
// or as a WITH query of the saga row's UPDATE). A unit that meets a row another transaction holds leaves its group
// at the bound, runs its step again and commits once the row is free, whether it writes columns or only the version
// guard. An application's lower `lock_timeout` is kept, the bound does not outlive the unit's transaction, an
// `onQuery` hook that tags or rewrites statements leaves no transaction open, and a saga table or column named like
// the WITH query's writes as any other.
import { defineEntity, type MikroORM, type Options } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { statementsSent } from '../../support/pg-statements.js';
import { rowLocker, untilLockWaiters } from '../../support/row-locks.js';
import { rowsOf } from '../../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

type Msg =
  | { readonly type: 'Start'; readonly key: string }
  | { readonly type: 'Bump'; readonly key: string }
  | { readonly type: 'Send'; readonly key: string };
/** When each run of a key's Bump or Send step began (ms, performance.now()). */
const runs = new Map<string, number[]>();
/** Resolved when the step of a key runs for the second time (its unit left its group and read again). */
const secondRun = new Map<string, ReturnType<typeof deferred<void>>>();
function ran(key: string) {
  runs.set(key, [...(runs.get(key) ?? []), performance.now()]);
  if (runs.get(key)!.length === 2) secondRun.get(key)?.resolve();
}
const saga = defineSaga<ScriptedSaga, Msg>({
  name: 'scripted',
  state: ScriptedSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Bump: (m) => m.key, Send: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start: () => undefined,
    Bump: (state, message) => {
      ran(message.key);
      state.counter += 1;
    },
    // Changes no column: the saga row is written with the version guard only, the outbox row after it.
    Send: (_state, message, ctx) => {
      ran(message.key);
      ctx.send({ type: 'Sent' });
    },
  },
});

describe('the lock bound of a unit on a held row (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  const releases: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const release of releases.splice(0)) await release().catch(() => undefined);
    for (const orm of opened.splice(0)) await orm.close();
  });
  const open = async (overrides: Partial<Options> = {}) => {
    const orm = await db().openAnother(overrides);
    opened.push(orm);
    return orm;
  };
  const hold = async (key: string) => {
    const { lock, release } = await rowLocker(await open(), 'scripted_saga');
    releases.push(release);
    await lock('key', key);
    return release;
  };

  it('a lone unit (one UPDATE) on a row another transaction holds: its first wait ends at the bound (lockTimeoutMs), then it commits once the row is free', async () => {
    const orm = await open();
    const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], groupCommit: { lockTimeoutMs: 300 } });
    const key = uniqueKey('bound');
    await runtime.handle(saga, { type: 'Start', key });
    const ranAgain = deferred();
    secondRun.set(key, ranAgain);
    const release = await hold(key);
    const unit = runtime.handle(saga, { type: 'Bump', key });
    // The bound ends the group's wait: the step runs again (the unit left its group) while the row is still held.
    await ranAgain.promise;
    const [first, second] = runs.get(key)!;
    expect(second! - first!).toBeGreaterThanOrEqual(250);
    expect(second! - first!).toBeLessThan(2_000);
    await untilLockWaiters(db().orm);
    await release();
    expect(await unit).toMatchObject({ outcome: 'handled' });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
  });

  it('a unit that only guards the version on a held row leaves its group after the bound and commits once the row is free', async () => {
    const key = uniqueKey('guard-held');
    await new SagaRuntime({ em: db().orm.em, sagas: [saga] }).handle(saga, { type: 'Start', key });
    const release = await hold(key);
    const ranAgain = deferred();
    secondRun.set(key, ranAgain);
    const runtime = new SagaRuntime({
      em: db().orm.em,
      sagas: [saga],
      groupCommit: { lockTimeoutMs: 20 },
      concurrency: { maxAttempts: 1 },
    });
    const unit = runtime.handle(saga, { type: 'Send', key });
    // Ran its step again: it left its group, which only the group's bound (20 ms) makes it do while the row is held.
    await ranAgain.promise;
    await untilLockWaiters(db().orm);
    await release();
    expect(await unit).toMatchObject({ outcome: 'handled', version: 0, attempts: 1, conflicts: 0 });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ version: 0 });
  });

  it("an application's lower lock_timeout (the database's default for new sessions) is kept by the bound", async () => {
    const probe = await open();
    const [{ name }] = await probe.em.getConnection().execute<{ name: string }[]>('select current_database() as name');
    await probe.em.getConnection().execute(`alter database "${name}" set lock_timeout = '40ms'`);
    try {
      const orm = await open({ pool: { min: 0, max: 4 } });
      const [{ lt }] = await orm.em.getConnection().execute<{ lt: string }[]>("select current_setting('lock_timeout') as lt");
      expect(lt).toBe('40ms');
      const runtime = new SagaRuntime({
        em: orm.em,
        sagas: [saga],
        groupCommit: { lockTimeoutMs: 5_000 },
        concurrency: { maxAttempts: 1 },
      });
      const key = uniqueKey('own');
      await runtime.handle(saga, { type: 'Start', key });
      await hold(key);
      const started = performance.now();
      const error = await runtime.handle(saga, { type: 'Bump', key }).catch((e: unknown) => e);
      const took = performance.now() - started;
      // The application's 40 ms ends the wait (a lock-wait conflict, CONCURRENCY_CONFLICT after one attempt), not 5 s.
      expect(took).toBeLessThan(2_500);
      expect(error).toMatchObject({ code: 'CONCURRENCY_CONFLICT' });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
    } finally {
      await probe.em.getConnection().execute(`alter database "${name}" reset lock_timeout`);
    }
  });

  it('the bound does not outlive the unit: the next plain statement on the same pooled connection has the default lock_timeout', async () => {
    const orm = await open({ pool: { min: 0, max: 1 } });
    const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], groupCommit: { lockTimeoutMs: 123 } });
    const key = uniqueKey('scope');
    await runtime.handle(saga, { type: 'Start', key });
    const sent = await statementsSent(() => runtime.handle(saga, { type: 'Bump', key }));
    expect(sent.join('\n')).toContain('123ms');
    const [{ lt }] = await orm.em.getConnection().execute<{ lt: string }[]>("select current_setting('lock_timeout') as lt");
    expect(lt).toBe('0');
    const idle = await db()
      .orm.em.getConnection()
      .execute<{ n: number }[]>(
        "select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'",
      );
    expect(idle[0].n).toBe(0);
  });

  for (const [name, onQuery] of [
    ['appends a line comment', (sql: string) => `${sql} -- tagged`],
    ['prepends a block comment', (sql: string) => `/* app=x */ ${sql}`],
    ['appends a semicolon', (sql: string) => `${sql};`],
    ['appends a semicolon and a line comment', (sql: string) => `${sql}; -- tagged`],
  ] as const) {
    it(`an onQuery hook that ${name}: the unit commits, is visible elsewhere, and leaves no transaction open`, async () => {
      const orm = await open({ onQuery, pool: { min: 0, max: 1 } } as Partial<Options>);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('hook');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'schedule', name: 't' }] });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 2, version: 2 });
      expect(await rowsOf(db().orm).pendingTimers()).toEqual(expect.arrayContaining([expect.objectContaining({ name: 't' })]));
      const idle = await db()
        .orm.em.getConnection()
        .execute<{ n: number }[]>(
          "select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'",
        );
      expect(idle[0].n).toBe(0);
      // The same pooled connection is outside any transaction: the bound is gone.
      const [{ lt }] = await orm.em.getConnection().execute<{ lt: string }[]>("select current_setting('lock_timeout') as lt");
      expect(lt).toBe('0');
    });
  }

  it("an onQuery hook sees the saga row's UPDATE on its own, never joined with the bound", async () => {
    const seen: string[] = [];
    const orm = await open({
      onQuery: (sql: string) => {
        seen.push(sql);
        return sql;
      },
    } as Partial<Options>);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], groupCommit: { lockTimeoutMs: 300 } });
    const key = uniqueKey('seen');
    await runtime.handle(saga, { type: 'Start', key });
    seen.length = 0;
    await runtime.handle(saga, { type: 'Bump', key });
    // Documented: a hook sees each statement as if sent alone, never the bound joined with it.
    expect(seen.some((sql) => /update/i.test(sql) && /set_config/i.test(sql))).toBe(false);
  });
});

class BoundNamedSaga extends SagaState {
  key!: string;
  count: number = 0;
}
const BoundNamedSagaSchema = defineEntity({
  class: BoundNamedSaga,
  extends: SagaStateSchema,
  tableName: 'saga_lock_bound',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'own' },
  },
});

class OwnIdSaga extends SagaState {
  key!: string;
  count: number = 0;
}
const OwnIdSagaSchema = defineEntity({
  class: OwnIdSaga,
  extends: SagaStateSchema,
  tableName: 'Own_Id_Saga',
  properties: {
    id: { type: 'uuid', fieldName: 'own', primary: true },
    version: { type: 'integer', fieldName: 'set_config', concurrencyCheck: true },
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
  },
});

type NamedMsg = { type: 'Start'; key: string } | { type: 'Go'; key: string } | { type: 'Send'; key: string };
/** Both state classes have the same properties. */
function namedSaga(name: string, state: new () => BoundNamedSaga) {
  return defineSaga<BoundNamedSaga, NamedMsg>({
    name,
    state,
    correlation: { property: 'key', from: { Start: (m) => m.key, Go: (m) => m.key, Send: (m) => m.key } },
    startedBy: ['Start'],
    steps: {
      Start() {},
      Go(s) {
        s.count++;
      },
      // Changes no column: the version guard, with the outbox row after it.
      Send(_s, _m, ctx) {
        ctx.send({ type: 'Sent' });
      },
    },
  });
}

describe('the lock bound WITH query and the names of a saga table (postgresql)', () => {
  const db = useDatabase('postgresql', [BoundNamedSagaSchema, OwnIdSagaSchema]);

  for (const [name, state] of [
    ['table saga_lock_bound', BoundNamedSaga],
    ['id column own, version column set_config', OwnIdSaga],
  ] as const) {
    it(`updates and guards the saga row: ${name}`, async () => {
      const saga = namedSaga(name.replace(/\W/g, '_'), state as new () => BoundNamedSaga);
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const key = uniqueKey('bound');
      await runtime.handle(saga, { type: 'Start', key });
      expect(await runtime.handle(saga, { type: 'Go', key })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await runtime.handle(saga, { type: 'Send', key })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await runtime.handle(saga, { type: 'Go', key })).toMatchObject({ outcome: 'handled', version: 2 });
      const row = await db()
        .orm.em.fork()
        .findOneOrFail(state as new () => BoundNamedSaga, { key });
      expect({ count: row.count, version: row.version }).toEqual({ count: 2, version: 2 });
    });
  }
});
