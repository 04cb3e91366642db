// Faults and hostile input on the group commit's "written together" path (src/saga/unit-of-work/group-commit.ts,
// writeTogether) on PostgreSQL: hostile values, onQuery hooks, held rows, killed connections, deadlocks, a refused
// COMMIT. MikroORM 6 sends the units' statements as one string after BEGIN and the
// lock bound; MikroORM 7 (one statement per round trip) as one statement, after BEGIN and the lock bound.
import type { Options } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { drainContinuations } from '../../support/flush-hold.js';
import { groupWriting } from '../../support/one-group.js';
import { TOGETHER_START } from '../../support/pg-statements.js';
import { untilLockWaiters } from '../../support/row-locks.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

describe('units written together, under faults and hostile input (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const { setUp, asOneGroup, hold: holdByKey, opened } = groupWriting(db);

  /** Locks the saga row of `key` in a transaction of its own; its id, and `release()`. */
  async function hold(key: string) {
    const id = (await rowsOf(db().orm).saga(key))!.id;
    return { id, ...(await holdByKey(key)) };
  }

  const together = (sent: readonly string[]) =>
    sent.filter((sql) => sql.startsWith(TOGETHER_START) && (sql.match(/update (?:"public"\.)?"scripted_saga"/g)?.length ?? 0) >= 2);

  it('hostile text values written together are stored exactly as given', async () => {
    const hostile = [
      `'; update scripted_saga set counter = 999; --`,
      `back\\slash \\' \\\\ end\\`,
      `? ?? \\? $1 $2 :name :1 %s`,
      `$$ dollar $tag$ */ /* -- ;\n; select 1;`,
      `unicode ü 漢字 🎉 \u2028 \u202e rtl`,
      `{"json":"odd","k\\"ey":[1,"?"]}`,
      'x'.repeat(200_000),
    ];
    const keys = hostile.map((_, i) => uniqueKey(`together-hostile-${i}`));
    const blockerKey = uniqueKey('together-hostile-blocker');
    const { gate, saga, runtime } = await setUp([blockerKey, ...keys], keys.length);
    const { first, started, recording } = await asOneGroup(gate, runtime, saga, blockerKey, () =>
      keys.map((key, i) => runtime.handle(saga, { type: 'Do', key, note: hostile[i]!, inc: 1, gated: true })),
    );
    await first;
    const results = await Promise.all(started);
    recording.stop();
    expect(results.map((r) => r.outcome)).toEqual(keys.map(() => 'handled'));
    expect(together(recording.sent)).toHaveLength(1);
    for (const [i, key] of keys.entries()) {
      const row = await rowsOf(db().orm).saga(key);
      expect(row!.log).toBe(hostile[i]);
      expect(row!.counter).toBe(1);
    }
  });

  it('an onQuery hook that qualifies the table name does not rewrite the state values written together', async () => {
    // A hook of MikroORM 6 (`onQuery(sql, params)`) sees SQL with `?` placeholders and the values as params, for
    // every statement MikroORM or this library sends alone: it cannot touch values. Written together, the values are
    // already formatted into the text the hook gets.
    const onQuery = (sql: string) => sql.replaceAll('"scripted_saga"', '"public"."scripted_saga"');
    const keys = ['a', 'b'].map((n) => uniqueKey(`together-onquery-${n}`));
    const blockerKey = uniqueKey('together-onquery-blocker');
    const note = 'the row of table "scripted_saga" said: hi';
    const { gate, saga, runtime } = await setUp([blockerKey, ...keys], keys.length, { overrides: { onQuery } as Partial<Options> });
    const { first, started, recording } = await asOneGroup(
      gate,
      runtime,
      saga,
      blockerKey,
      () => keys.map((key) => runtime.handle(saga, { type: 'Do', key, note, gated: true })),
      { note },
    );
    await first;
    await Promise.all(started);
    recording.stop();
    expect(together(recording.sent).length).toBeGreaterThan(0);
    // Control: the same hook and value, written by a unit alone (values as params to the hook): verbatim.
    expect((await rowsOf(db().orm).saga(blockerKey))!.log).toBe(note);
    for (const key of keys) expect((await rowsOf(db().orm).saga(key))!.log).toBe(note);
  });

  it('a NUL byte in one unit state: that unit fails alone, typed, without its values in the message; the others commit', async () => {
    const keys = ['a', 'b'].map((n) => uniqueKey(`together-nul-${n}`));
    const blockerKey = uniqueKey('together-nul-blocker');
    const { gate, saga, runtime } = await setUp([blockerKey, ...keys], 2);
    const { first, started, recording } = await asOneGroup(gate, runtime, saga, blockerKey, () => [
      runtime.handle(saga, { type: 'Do', key: keys[0]!, note: 'secret-payload\u0000tail', gated: true }).catch((e: unknown) => e),
      runtime.handle(saga, { type: 'Do', key: keys[1]!, note: 'fine', inc: 1, gated: true }),
    ]);
    await first;
    const [bad, good] = await Promise.all(started);
    recording.stop();
    expect(good).toMatchObject({ outcome: 'handled' });
    // The step's state is refused before anything is written (SagaValidationError), not by the database.
    expect(bad).toBeInstanceOf(Error);
    expect((bad as Error).message).not.toContain('secret-payload');
    expect((await rowsOf(db().orm).saga(keys[1]!))!.log).toBe('fine');
    expect((await rowsOf(db().orm).saga(keys[0]!))!.log).toBe('');
  });

  it('a row held by another transaction: the group waits for it at most lockTimeoutMs in all, not once per way of writing', async () => {
    // docs/guarantees.md: "a group transaction waits at most groupCommit.lockTimeoutMs ... for a row lock. A unit that
    // waits longer is rolled back to its savepoint ... the others commit". The statements written together wait out
    // the bound (which unit waited is not known), then the group is written again a unit at a time with what is left
    // of it (1 ms): the held unit leaves at once, the free one commits. Read here from the lock bounds the group set
    // before the free unit's COMMIT: before the fix, the second was the full bound again.
    const [free, heldKey] = ['free', 'held'].map((n) => uniqueKey(`together-lockwait-${n}`)) as [string, string];
    const blockerKey = uniqueKey('together-lockwait-blocker');
    const { gate, saga, runtime } = await setUp([blockerKey, free, heldKey], 2, { lockTimeoutMs: 300 });
    const held = await hold(heldKey);
    try {
      const { first, started, recording } = await asOneGroup(gate, runtime, saga, blockerKey, () => ({
        free: runtime.handle(saga, { type: 'Do', key: free, inc: 1, gated: true }),
        held: runtime.handle(saga, { type: 'Do', key: heldKey, inc: 1, gated: true }),
      }));
      await first;
      const freeResult = await started.free;
      const sentBeforeFreeCommitted = [...recording.sent];
      await held.release();
      const heldResult = await started.held;
      recording.stop();
      expect(freeResult).toMatchObject({ outcome: 'handled' });
      expect(heldResult).toMatchObject({ outcome: 'handled' });
      const commit = sentBeforeFreeCommitted.lastIndexOf('commit');
      const bounds = sentBeforeFreeCommitted
        .slice(0, commit)
        .flatMap((sql) => [...sql.matchAll(/else '(\d+)ms' end, true\)/g)].map((match) => Number(match[1])));
      expect(bounds).toEqual([300, 1]);
      expect((await rowsOf(db().orm).saga(free))!.counter).toBe(1);
      expect((await rowsOf(db().orm).saga(heldKey))!.counter).toBe(1);
    } finally {
      await held.release().catch(() => undefined);
    }
  });

  it('the connection of a group written together is killed while it waits: the units are written again and commit, nothing leaks', async () => {
    const [free, heldKey] = ['free', 'held'].map((n) => uniqueKey(`together-kill-${n}`)) as [string, string];
    const blockerKey = uniqueKey('together-kill-blocker');
    const { gate, saga, runtime } = await setUp([blockerKey, free, heldKey], 2);
    const held = await hold(heldKey);
    try {
      const { first, started, recording } = await asOneGroup(gate, runtime, saga, blockerKey, () => ({
        free: runtime.handle(saga, { type: 'Do', key: free, inc: 1, gated: true }).catch((e: unknown) => e),
        held: runtime.handle(saga, { type: 'Do', key: heldKey, inc: 1, gated: true }).catch((e: unknown) => e),
      }));
      await first;
      const conn = db().orm.em.fork().getConnection();
      const waiting = () =>
        conn.execute<{ pid: number }[]>(
          "select pid from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like ?",
          // The held unit's UPDATE, wherever the lock order put it in the joined string.
          [`${TOGETHER_START}%update "scripted_saga"%${held.id}%`],
        );
      let pids = await waiting();
      while (pids.length === 0) {
        await drainContinuations();
        pids = await waiting();
      }
      await conn.execute('select pg_terminate_backend(?)', [pids[0]!.pid]);
      // The group is written again (a unit at a time) on another connection: it waits for the held row again.
      await untilLockWaiters(db().orm);
      await held.release();
      const results = { free: await started.free, held: await started.held };
      recording.stop();
      expect(results).toMatchObject({ free: { outcome: 'handled' }, held: { outcome: 'handled' } });
      expect((await rowsOf(db().orm).saga(free))!.counter).toBe(1);
      expect((await rowsOf(db().orm).saga(heldKey))!.counter).toBe(1);
    } finally {
      await held.release().catch(() => undefined);
    }
  });

  for (const shape of ['together', 'savepoints'] as const) {
    it(`a COMMIT refused by a deferred constraint for one unit: the other units of the group are not failed for it (${shape})`, async () => {
      // An application's deferred constraint trigger refuses counter = 13 at COMMIT. Only unit `bad` sets it. Alone
      // (groupCommit false, or a group of one) `good` commits; the group's COMMIT is refused for the whole
      // transaction, and the units of the group that did nothing wrong should not end in PERSISTENCE_FAILED for it.
      const setup = db().orm.em.fork().getConnection();
      await setup.execute(`create or replace function saga_test_reject() returns trigger language plpgsql as $$
      begin if new.counter = 13 then raise exception 'refused by the deferred check'; end if; return null; end $$`);
      await setup.execute('drop trigger if exists saga_test_deferred on scripted_saga');
      await setup.execute(`create constraint trigger saga_test_deferred after update on scripted_saga
      deferrable initially deferred for each row execute function saga_test_reject()`);
      try {
        const keys = ['bad', 'good1', 'good2'].map((n) => uniqueKey(`together-deferred-${n}`));
        const blockerKey = uniqueKey('together-deferred-blocker');
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
        await setup.execute('drop trigger if exists saga_test_deferred on scripted_saga');
      }
    });
  }

  it('a deadlock with an application transaction after the group waited: written again, the group waits only what is left of lockTimeoutMs', async () => {
    // docs/guarantees.md: a group waits at most groupCommit.lockTimeoutMs for a row another transaction holds. The
    // statements written together lock the first unit's row, then wait for the second's, which an application
    // transaction holds; that transaction then asks for the first row: PostgreSQL's deadlock check (deadlock_timeout,
    // 1 s by default, 10 s for the application's session here) ends the group's statement with 40P01 after ~1 s of
    // waiting. The group is written again a unit at a time: as after a lock wait, it should get only what
    // is left of the bound, not the full bound again (a held row then costs the group ~2.5 s for a 1.5 s bound).
    const lockTimeoutMs = 1500;
    const keys = ['a', 'b'].map((n) => uniqueKey(`together-deadlock-${n}`));
    const blockerKey = uniqueKey('together-deadlock-blocker');
    const { gate, saga, runtime } = await setUp([blockerKey, ...keys], 2, { lockTimeoutMs });
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
            "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like ?",
            [`${TOGETHER_START}%`],
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
