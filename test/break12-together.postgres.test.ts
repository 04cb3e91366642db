// break12: attacks on the group commit's "written together" path (src/saga/unit-of-work/group-commit.ts,
// writeTogether) on MikroORM 6 + PostgreSQL. Harness copied from test/break11-together.postgres.test.ts.
import type { MikroORM, Options } from '@mikro-orm/core';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime } from '../src/index.js';
import { ORM_MAJOR } from '../src/orm/compat.js';
import { ScriptedSaga } from './fixtures/scripted-saga.js';
import { drainContinuations } from './support/flush-hold.js';
import { rowsOf } from './support/rows.js';
import { deferred, uniqueKey, useDatabase } from './support/suite.js';

type Msg = {
  readonly key?: string;
  readonly inc?: number;
  readonly note?: string;
  readonly schedule?: string;
  readonly gated?: boolean;
} & ({ readonly type: 'Start' } | { readonly type: 'Do' } | { readonly type: 'Tick' });

function recordStatements(): { readonly sent: string[]; stop(): void } {
  const sent: string[] = [];
  const original = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const [query] = args as [string | { text?: string }];
    sent.push(typeof query === 'string' ? query : (query?.text ?? ''));
    return (original as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof original;
  return {
    sent,
    stop: () => {
      pg.Client.prototype.query = original;
    },
  };
}

class StepGate {
  private entered = 0;
  readonly all = deferred();
  readonly go = deferred();
  constructor(private readonly expected: number) {}
  async enter(): Promise<void> {
    if (++this.entered === this.expected) this.all.resolve();
    await this.go.promise;
  }
}

function gatedSaga(gate: StepGate) {
  const act = async (saga: ScriptedSaga, message: Msg, ctx: { schedule: (...args: never[]) => void }) => {
    if (message.gated) await gate.enter();
    if (message.inc) saga.counter += message.inc;
    if (message.note !== undefined) saga.log = message.note;
    if (message.schedule)
      (ctx.schedule as (name: string, after: number, m: Msg) => void)(message.schedule, 60_000, { type: 'Tick', inc: 1 });
  };
  return defineSaga<ScriptedSaga, Msg>({
    name: 'scripted',
    state: ScriptedSaga,
    correlation: { property: 'key', from: { Start: (m) => m.key, Do: (m) => m.key } },
    startedBy: ['Start'],
    steps: { Start: act, Do: act, Tick: act },
  });
}

async function lockWaits(orm: MikroORM): Promise<number> {
  const sql = "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'";
  const [row] = await orm.em.fork().getConnection().execute<{ n: number }[]>(sql);
  return row!.n;
}

describe.runIf(ORM_MAJOR === 6)('break12: units written together (postgresql, MikroORM 6)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  async function hold(key: string) {
    const holder = await db().openAnother({ pool: { min: 1, max: 1 } });
    opened.push(holder);
    const held = holder.em.fork();
    await held.begin();
    const id = (await rowsOf(db().orm).saga(key))!.id;
    await held.getConnection().execute('select 1 from scripted_saga where id = ? for update', [id], 'all', held.getTransactionContext());
    return { id, release: () => held.rollback() };
  }

  /** As in group-commit-together: `units` reach one group while a first unit on `blockerKey` waits alone. */
  async function asOneGroup<T>(
    gate: StepGate,
    runtime: SagaRuntime,
    saga: ReturnType<typeof gatedSaga>,
    blockerKey: string,
    units: () => T,
    note?: string,
  ) {
    const blocker = await hold(blockerKey);
    const before = await lockWaits(db().orm);
    const first = runtime.handle(saga, { type: 'Do', key: blockerKey, inc: 1, ...(note === undefined ? {} : { note }) });
    while ((await lockWaits(db().orm)) < before + 1) await drainContinuations();
    const started = units();
    await gate.all.promise;
    gate.go.resolve();
    await drainContinuations();
    await drainContinuations();
    const recording = recordStatements();
    await blocker.release();
    return { first, started, recording };
  }

  async function setUp(keys: readonly string[], gated: number, overrides: Partial<Options> = {}, lockTimeoutMs = 60_000) {
    const gate = new StepGate(gated);
    const saga = gatedSaga(gate);
    const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
    for (const key of keys) await plain.handle(saga, { type: 'Start', key });
    const orm = await db().openAnother(overrides);
    opened.push(orm);
    const runtime = new SagaRuntime({
      em: orm.em,
      sagas: [saga],
      groupCommit: { maxGroups: 1, lockTimeoutMs },
      concurrency: { baseDelayMs: 0 },
    });
    return { gate, saga, plain, runtime };
  }

  const together = (sent: readonly string[]) =>
    sent.filter(
      (sql) =>
        /^begin; select set_config\(/.test(sql) &&
        /update (?:"public"\.)?"scripted_saga"[\s\S]*;\nupdate (?:"public"\.)?"scripted_saga"/.test(sql),
    );

  for (const shape of ['together', 'savepoints'] as const) {
    it(`a COMMIT refused by a deferred constraint for one unit: the other units of the group are not failed for it (${shape})`, async () => {
      // An application's deferred constraint trigger refuses counter = 13 at COMMIT. Only unit `bad` sets it. Alone
      // (groupCommit false, or a group of one) `good` commits; the group's COMMIT is refused for the whole
      // transaction, and the units of the group that did nothing wrong should not end in PERSISTENCE_FAILED for it.
      const setup = db().orm.em.fork().getConnection();
      await setup.execute(`create or replace function break12_reject() returns trigger language plpgsql as $$
      begin if new.counter = 13 then raise exception 'refused by the deferred check'; end if; return null; end $$`);
      await setup.execute('drop trigger if exists break12_deferred on scripted_saga');
      await setup.execute(`create constraint trigger break12_deferred after update on scripted_saga
      deferrable initially deferred for each row execute function break12_reject()`);
      try {
        const keys = ['bad', 'good1', 'good2'].map((n) => uniqueKey(`b12-deferred-${n}`));
        const blockerKey = uniqueKey('b12-deferred-blocker');
        const { gate, saga, runtime } = await setUp([blockerKey, ...keys], keys.length);
        const { first, started, recording } = await asOneGroup(gate, runtime, saga, blockerKey, () =>
          keys.map((key, i) =>
            runtime
              .handle(saga, {
                type: 'Do',
                key,
                inc: i === 0 ? 13 : 1,
                gated: true,
                ...(shape === 'savepoints' ? { schedule: 'later' } : {}),
              })
              .catch((e: unknown) => e),
          ),
        );
        await first;
        const [bad, ...good] = await Promise.all(started);
        recording.stop();
        expect(together(recording.sent)).toHaveLength(shape === 'together' ? 1 : 0);
        expect(bad).toMatchObject({ code: 'PERSISTENCE_FAILED' });
        expect(await rowsOf(db().orm).saga(keys[0]!)).toMatchObject({ counter: 0, version: 0 });
        // What should happen: the innocent units commit (as they do alone).
        expect(good.map((r) => (r as { outcome?: string; code?: string }).outcome ?? (r as { code?: string }).code)).toEqual([
          'handled',
          'handled',
        ]);
        for (const key of keys.slice(1)) expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
      } finally {
        await setup.execute('drop trigger if exists break12_deferred on scripted_saga');
      }
    });
  }

  it('a deadlock with an application transaction after the group waited: written again, the group waits only what is left of lockTimeoutMs', async () => {
    // docs/guarantees.md: a group waits at most groupCommit.lockTimeoutMs for a row another transaction holds. The
    // statements written together lock the first unit's row, then wait for the second's, which an application
    // transaction holds; that transaction then asks for the first row: PostgreSQL's deadlock check (deadlock_timeout,
    // 1 s by default, 10 s for the application's session here) ends the group's statement with 40P01 after ~1 s of
    // waiting. The group is written again a unit at a time: as after a lock wait (break11), it should get only what
    // is left of the bound, not the full bound again (a held row then costs the group ~2.5 s for a 1.5 s bound).
    const lockTimeoutMs = 1500;
    const keys = ['a', 'b'].map((n) => uniqueKey(`b12-deadlock-${n}`));
    const blockerKey = uniqueKey('b12-deadlock-blocker');
    const { gate, saga, runtime } = await setUp([blockerKey, ...keys], 2, {}, lockTimeoutMs);
    const ids = await Promise.all(keys.map(async (key) => (await rowsOf(db().orm).saga(key))!.id));
    const [firstId, secondId] = [...ids].sort();
    const app = await db().openAnother({ pool: { min: 1, max: 1 } });
    opened.push(app);
    const tx = app.em.fork();
    await tx.begin();
    const run = (sql: string, params: unknown[] = []) => tx.getConnection().execute(sql, params, 'all', tx.getTransactionContext());
    await run("set local deadlock_timeout = '10s'");
    await run('select 1 from scripted_saga where id = ? for update', [secondId]);
    try {
      const { first, started, recording } = await asOneGroup(gate, runtime, saga, blockerKey, () =>
        keys.map((key) => runtime.handle(saga, { type: 'Do', key, inc: 1, gated: true })),
      );
      await first;
      // The group's joined statement waits for the second row (the first already locked by it).
      const conn = db().orm.em.fork().getConnection();
      const groupWaiting = async () =>
        (
          await conn.execute<{ n: number }[]>(
            "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like 'begin; select set_config(%'",
          )
        )[0]!.n;
      while ((await groupWaiting()) === 0) await drainContinuations();
      // The application asks for the first row: a cycle; the group's deadlock check ends the group's statement.
      const appLocked = run('select 1 from scripted_saga where id = ? for update', [firstId]);
      await appLocked;
      const bounds = () =>
        recording.sent.flatMap((sql) => [...sql.matchAll(/else '(\d+)ms' end, true\)/g)].map((match) => Number(match[1])));
      while (bounds().length < 2) await drainContinuations();
      const seen = bounds();
      await tx.rollback();
      const results = await Promise.all(started);
      recording.stop();
      expect(results.map((r) => r.outcome)).toEqual(['handled', 'handled']);
      for (const key of keys) expect((await rowsOf(db().orm).saga(key))!.counter).toBe(1);
      expect(seen[0]).toBe(lockTimeoutMs);
      // What should happen: the second bound is what is left after ~1 s of waiting (at most ~500 ms).
      expect(seen[1]).toBeLessThan(lockTimeoutMs - 500);
    } finally {
      await tx.rollback().catch(() => undefined);
    }
  });
});
