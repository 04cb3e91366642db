// break19: the lock bound of a unit's transaction on PostgreSQL now goes as `select set_config(...)` of its own in
// the string of the unit's first statement (`begin; select set_config(...); update ...; commit`), not as a WITH query
// of the saga row's UPDATE (write-plan.ts runPlanStatements, commit 121f7ba). Attacks: the bound must still end a
// wait on a row another transaction holds (both majors), an application's lower `lock_timeout` must be kept, an
// `onQuery` hook that tags or rewrites statements must not leave the transaction open, and the bound must not
// outlive the unit on the pooled connection.
import type { MikroORM, Options } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime } from '../../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { statementsSent } from '../../support/pg-statements.js';
import { rowLocker, untilLockWaiters } from '../../support/row-locks.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

type Msg = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Bump'; readonly key: string };
/** When each run of a key's Bump step began (ms, performance.now()). */
const runs = new Map<string, number[]>();
const saga = defineSaga<ScriptedSaga, Msg>({
  name: 'scripted',
  state: ScriptedSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Bump: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start: () => undefined,
    Bump: (state, message) => {
      runs.set(message.key, [...(runs.get(message.key) ?? []), performance.now()]);
      state.counter += 1;
    },
  },
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('break19: the lock bound as a statement of its own (postgresql)', () => {
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
    const release = await hold(key);
    const started = performance.now();
    const unit = runtime.handle(saga, { type: 'Bump', key });
    // The bound ends the group's wait: the step runs again (the unit left its group) well before 3 s.
    while ((runs.get(key)?.length ?? 0) < 2 && performance.now() - started < 3_000) await sleep(5);
    const [first, second] = runs.get(key) ?? [];
    expect(second, 'the step ran again after the bound ended the wait').toBeDefined();
    expect(second! - first!).toBeGreaterThanOrEqual(250);
    expect(second! - first!).toBeLessThan(2_000);
    await untilLockWaiters(db().orm);
    await release();
    expect(await unit).toMatchObject({ outcome: 'handled' });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
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

// Found by break19 (failed on both majors until commitUnit logged it; predates 121f7ba/48b0899): a COMMIT sent in the
// string of a unit's only statement (`begin; select set_config(...); update ...\n; commit`) never appeared in
// MikroORM's query log: the log showed BEGIN, the bound and the UPDATE, and no end of the transaction.
describe("break19: MikroORM's query log against what was sent (postgresql)", () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  for (const [name, actions] of [
    ['a message that changes nothing (completed saga)', [{ op: 'inc' }]],
    ['a one-UPDATE message', [{ op: 'note', text: 'x' }]],
  ] as const) {
    it(`${name}: the log claims no BEGIN, lock bound or COMMIT that was not sent`, async () => {
      const logged: string[] = [];
      const orm = await db().openAnother({
        debug: ['query'],
        // biome-ignore lint/suspicious/noControlCharactersInRegex: MikroORM colours its log lines
        logger: (line: string) => void logged.push(line.replace(/\x1b\[[0-9;]*m/g, '').toLowerCase()),
      });
      try {
        const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
        const key = uniqueKey('log');
        await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'complete' }] });
        logged.length = 0;
        const sent = await statementsSent(() => runtime.handle(scriptedSaga, { type: 'Do', key, actions }));
        const count = (lines: readonly string[], pattern: RegExp) => lines.filter((line) => pattern.test(line)).length;
        const sentText = sent.join('\n').toLowerCase();
        const inSent = (pattern: RegExp) => (sentText.match(new RegExp(pattern.source, 'g')) ?? []).length;
        expect({
          begin: count(logged, /\bbegin\b/),
          bound: count(logged, /set_config/),
          commit: count(logged, /\bcommit\b/),
        }).toEqual({ begin: inSent(/\bbegin\b/), bound: inSent(/set_config/), commit: inSent(/\bcommit\b/) });
      } finally {
        await orm.close();
      }
    });
  }
});

// Found by break19 (failed on both majors until BEGIN was logged when sent; predates 121f7ba/48b0899): on PostgreSQL
// BEGIN was logged when the connection was taken, before it went (with the first statement): a unit that ended
// before any statement (an afterTransactionStart subscriber threw) logged a BEGIN that was never sent.
describe("break19: MikroORM's query log when a unit ends before its first statement (postgresql)", () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  it('an afterTransactionStart subscriber throws: the log claims no BEGIN (nor ROLLBACK) that was not sent', async () => {
    const logged: string[] = [];
    const orm = await db().openAnother({
      debug: ['query'],
      // biome-ignore lint/suspicious/noControlCharactersInRegex: MikroORM colours its log lines
      logger: (line: string) => void logged.push(line.replace(/\x1b\[[0-9;]*m/g, '').toLowerCase()),
    });
    try {
      const subscriber = { armed: false, afterTransactionStart: async () => {} };
      subscriber.afterTransactionStart = async () => {
        if (subscriber.armed) throw new Error('refused at start');
      };
      orm.em.getEventManager().registerSubscriber(subscriber as never);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], concurrency: { maxAttempts: 1 } });
      const key = uniqueKey('start-throws');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      logged.length = 0;
      subscriber.armed = true;
      const sent = await statementsSent(() =>
        runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }).catch(() => undefined),
      );
      const sentText = sent.join('\n').toLowerCase();
      expect({
        begin: logged.filter((line) => /\bbegin\b/.test(line)).length,
        bound: logged.filter((line) => /set_config/.test(line)).length,
      }).toEqual({ begin: (sentText.match(/\bbegin\b/g) ?? []).length, bound: (sentText.match(/set_config/g) ?? []).length });
    } finally {
      await orm.close();
    }
  });
});
