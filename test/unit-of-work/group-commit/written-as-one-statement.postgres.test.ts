// A group written as ONE statement (MikroORM 7 on PostgreSQL where kysely holds the unit's transaction:
// runUpdatesAsOne, each unit's UPDATE a WITH query of one SELECT) and, for comparison, the same groups written as one
// string of statements (MikroORM 6, and 7 where the library holds the transaction).
// One statement is not the same as its statements one after another: PostgreSQL checks what it checks at the end of
// a statement (foreign keys' NO ACTION triggers, DEFERRABLE INITIALLY IMMEDIATE constraints, AFTER triggers) once,
// on what ALL units wrote, so a unit that fails alone (and in its savepoint) must not commit when written together.
// runUpdatesAsOne sends at most 8 UPDATEs per statement (PostgreSQL's cost of n data-modifying WITH queries grows
// faster than n); each UPDATE's answer is still its own, in order, and a table with a trigger writes nothing.
import { defineEntity, type Options } from '@mikro-orm/core';
import { describe, expect, it, onTestFinished } from 'vitest';
import { SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { freshFork } from '../../../src/orm/index.js';
import { ORM_MAJOR } from '../../../src/orm/orm-major.js';
import { queryRows } from '../../../src/orm/sql-execution.js';
import { runUpdatesAsOne } from '../../../src/sql/updates-as-one.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import type { GatedState } from '../../support/gated-saga.js';
import { groupWriting } from '../../support/one-group.js';
import { KYSELY_TRANSACTIONS, ONE_STATEMENT_START, statementsSent, TOGETHER_START } from '../../support/pg-statements.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/** A saga whose table is named like the WITH queries of the one statement. */
class OddlyNamedSaga extends SagaState {
  key!: string;
  counter: number = 0;
}

const OddlyNamedSagaSchema = defineEntity({
  class: OddlyNamedSaga,
  extends: SagaStateSchema,
  tableName: 'saga_update_0',
  properties: {
    key: { type: 'string', length: 100, fieldName: 'key', unique: true },
    counter: { type: 'integer', fieldName: 'saga_update_1' },
  },
});
void OddlyNamedSagaSchema;

/** How a group's statements go: one string (the library's transaction), or WITH queries (kysely's, MikroORM 7 only). */
const WRITES: readonly (readonly [string, Partial<Options>, string])[] = [
  ['one string', {}, TOGETHER_START],
  ...(ORM_MAJOR === 7
    ? [["WITH queries, kysely's transaction", KYSELY_TRANSACTIONS as Partial<Options>, ONE_STATEMENT_START] as const]
    : []),
];

describe.each(WRITES)(
  'a group written together as %s, against constraints checked at the end of a statement (postgresql)',
  (_, overrides, togetherStart) => {
    const db = useDatabase('postgresql', [ScriptedSaga, OddlyNamedSaga]);
    const sql = (text: string, params: unknown[] = []) => db().orm.em.fork().getConnection().execute(text, params);
    const { setUp: setUpGroup, asOneGroup } = groupWriting(db);
    const setUp = <S extends GatedState = ScriptedSaga>(keys: readonly string[], gated: number, state?: new () => S) =>
      setUpGroup<S>(keys, gated, { overrides, maxAttempts: 2, ...(state ? { state } : {}) });
    const outcome = (r: unknown) => (r as { outcome?: string }).outcome ?? (r as { code?: string }).code ?? String(r);

    it('a unit whose rekey breaks a foreign key fails alone, and still fails written together with a unit that takes its old key', async () => {
      // The application's table references the saga's correlation key (a plain foreign key: NO ACTION, not deferrable).
      // Unit X moves its saga off key kx (kx -> kz); alone, or in its savepoint, its UPDATE fails at the end of its
      // statement: kx is still referenced. Unit Y moves another saga onto kx (ky -> kx); alone it fails while X holds
      // kx. docs/guarantees.md, group commit: "Each unit is still atomic. A unit whose statement fails (... unique
      // violation, any error) ... fails alone, exactly as it would in its own transaction". As ONE statement,
      // PostgreSQL would check the foreign key once, after both UPDATEs: kx exists again (Y's row), both would commit
      // and the application's row would reference saga Y instead of X, an outcome of no order of the two units.
      await sql('create table if not exists saga_key_child (saga_key varchar(100) not null references scripted_saga (key))');
      onTestFinished(() => sql('drop table if exists saga_key_child'));
      const [k1, k2] = ['one', 'two'].map((n) => uniqueKey(`one-fk-${n}`)) as [string, string];
      const blockerKey = uniqueKey('one-fk-blocker');
      const { gate, saga, runtime } = await setUp([blockerKey, k1, k2], 2);
      // X is the unit the group writes first (lock order: saga type, then id).
      const ids = { [k1]: (await rowsOf(db().orm).saga(k1))!.id, [k2]: (await rowsOf(db().orm).saga(k2))!.id };
      const [kx, ky] = ids[k1]! < ids[k2]! ? [k1, k2] : [k2, k1];
      const kz = uniqueKey('one-fk-free');
      await sql('insert into saga_key_child (saga_key) values (?)', [kx]);
      const { first, started, recording } = await asOneGroup(gate, runtime, saga, blockerKey, () => ({
        x: runtime.handle(saga, { type: 'Do', key: kx, rekeyTo: kz, gated: true }).catch((e: unknown) => e),
        y: runtime.handle(saga, { type: 'Do', key: ky, rekeyTo: kx, gated: true }).catch((e: unknown) => e),
      }));
      await first;
      const results = { x: await started.x, y: await started.y };
      recording.stop();
      // The group did go together.
      expect(recording.sent.some((s) => s.startsWith(togetherStart))).toBe(true);
      // What each unit gets alone: X refused (its old key is referenced), so kx stays X's and Y cannot take it.
      const owner = await sql('select id from scripted_saga where key = ?', [kx]);
      expect(owner).toEqual([{ id: ids[kx] }]);
      expect(outcome(results.x)).not.toBe('handled');
      expect(outcome(results.y)).not.toBe('handled');
    });

    it('two units that swap their correlation keys under a DEFERRABLE INITIALLY IMMEDIATE unique key: each fails alone, so together they must not both commit', async () => {
      // A unique key checked at the end of each statement (DEFERRABLE INITIALLY IMMEDIATE, an application's choice for
      // its correlation column). X: kx -> ky, Y: ky -> kx. Alone, or one after the other in savepoints, the first one
      // written finds the other's key taken at the end of its statement (UNIQUE_VIOLATION) and fails alone; the other
      // then finds the key still taken too. As ONE statement the key is checked once, after both: both commit.
      await sql('drop table if exists saga_key_child');
      const [constraint] = (await sql(
        "select conname from pg_constraint where conrelid = 'scripted_saga'::regclass and contype = 'u'",
      )) as {
        conname: string;
      }[];
      await sql(`alter table scripted_saga drop constraint "${constraint!.conname}"`);
      await sql(`alter table scripted_saga add constraint "${constraint!.conname}" unique (key) deferrable initially immediate`);
      try {
        const [kx, ky] = ['x', 'y'].map((n) => uniqueKey(`one-swap-${n}`)) as [string, string];
        const blockerKey = uniqueKey('one-swap-blocker');
        const { gate, saga, runtime } = await setUp([blockerKey, kx, ky], 2);
        const ids = { [kx]: (await rowsOf(db().orm).saga(kx))!.id, [ky]: (await rowsOf(db().orm).saga(ky))!.id };
        const { first, started, recording } = await asOneGroup(gate, runtime, saga, blockerKey, () => ({
          x: runtime.handle(saga, { type: 'Do', key: kx, rekeyTo: ky, gated: true }).catch((e: unknown) => e),
          y: runtime.handle(saga, { type: 'Do', key: ky, rekeyTo: kx, gated: true }).catch((e: unknown) => e),
        }));
        await first;
        const results = { x: await started.x, y: await started.y };
        recording.stop();
        expect(recording.sent.some((s) => s.startsWith(togetherStart))).toBe(true);
        expect(await sql('select id, key from scripted_saga where key in (?, ?) order by key', [kx, ky])).toEqual(
          [
            { id: ids[kx], key: kx },
            { id: ids[ky], key: ky },
          ].sort((a, b) => (a.key < b.key ? -1 : 1)),
        );
        expect([outcome(results.x), outcome(results.y)]).toEqual(['UNIQUE_VIOLATION', 'UNIQUE_VIOLATION']);
      } finally {
        await sql(`alter table scripted_saga drop constraint "${constraint!.conname}"`);
        await sql(`alter table scripted_saga add constraint "${constraint!.conname}" unique (key)`);
      }
    });

    it('a group of sagas whose table is named "saga_update_0" and whose column is named "saga_update_1": written together, every unit commits', async () => {
      const keys = ['a', 'b', 'c'].map((n) => uniqueKey(`one-odd-${n}`));
      const blockerKey = uniqueKey('one-odd-blocker');
      const { gate, saga, runtime } = await setUp([blockerKey, ...keys], keys.length, OddlyNamedSaga);
      const { first, started, recording } = await asOneGroup(
        gate,
        runtime,
        saga,
        blockerKey,
        () => keys.map((key, i) => runtime.handle(saga, { type: 'Do', key, inc: i + 1, gated: true })),
        { table: 'saga_update_0' },
      );
      await first;
      const results = await Promise.all(started);
      recording.stop();
      expect(results.map((r) => [r.outcome, r.conflicts])).toEqual(keys.map(() => ['handled', 0]));
      expect(recording.sent.filter((s) => s.startsWith(togetherStart))).toHaveLength(1);
      const rows = await sql('select key, saga_update_1 as counter, version from saga_update_0 where key in (?, ?, ?) order by key', keys);
      expect(rows).toEqual(keys.map((key, i) => ({ key, counter: i + 1, version: 1 })).sort((a, b) => (a.key < b.key ? -1 : 1)));
    });

    it("a BEFORE trigger on one unit's saga row that writes another unit's row: every unit commits, each change applied once", async () => {
      // Within one statement the second UPDATE meets a row a trigger of the first changed: PostgreSQL refuses the
      // statement (tuple already modified by an operation triggered by the current command); the group must be
      // written again a unit at a time, not fail.
      const keys = ['a', 'b'].map((n) => uniqueKey(`one-trigger-${n}`));
      const blockerKey = uniqueKey('one-trigger-blocker');
      const { gate, saga, runtime } = await setUp([blockerKey, ...keys], 2);
      const ids = await Promise.all(keys.map(async (key) => (await rowsOf(db().orm).saga(key))!.id));
      const [firstId, secondId] = [...ids].sort() as [string, string];
      await sql(`create or replace function saga_test_touch() returns trigger language plpgsql as $$
      begin if new.id::text = '${firstId}' and new.counter <> old.counter then
        update scripted_saga set log = log || 'touched;' where id = '${secondId}'; end if; return new; end $$`);
      await sql('create trigger saga_test_touch before update on scripted_saga for each row execute function saga_test_touch()');
      try {
        const { first, started, recording } = await asOneGroup(gate, runtime, saga, blockerKey, () =>
          keys.map((key) => runtime.handle(saga, { type: 'Do', key, inc: 5, gated: true }).catch((e: unknown) => e)),
        );
        await first;
        const results = await Promise.all(started);
        recording.stop();
        expect(results.map(outcome)).toEqual(['handled', 'handled']);
        const rows = await sql('select id, counter, log from scripted_saga where id in (?, ?) order by id', [firstId, secondId]);
        expect(rows).toEqual([
          { id: firstId, counter: 5, log: '' },
          { id: secondId, counter: 5, log: 'touched;' },
        ]);
      } finally {
        await sql('drop trigger if exists saga_test_touch on scripted_saga');
      }
    });
  },
);

describe('runUpdatesAsOne in statements of at most 8 UPDATEs (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);

  /** Starts `count` sagas; their keys, in order. */
  async function start(count: number): Promise<string[]> {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
    const keys = Array.from({ length: count }, () => uniqueKey('chunk'));
    for (const key of keys) await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [] });
    return keys;
  }

  /** One UPDATE per key, adding `1` to its saga's counter; keys without a saga match no row. */
  const increments = (keys: readonly string[]) =>
    keys.map((key) => ({ sql: 'update "scripted_saga" set "counter" = "counter" + 1 where "key" = ?', params: [key] }));

  async function inTransaction<T>(work: (em: ReturnType<typeof freshFork>) => Promise<T>): Promise<T> {
    return freshFork(db().orm.em).transactional(work);
  }

  it('answers each of 20 UPDATEs with its own row count, in order, from three statements', async () => {
    const keys = await start(18);
    // Two keys with no saga, one in the first statement's share and one in the last's.
    const asked = [...keys.slice(0, 3), 'no-such-key-a', ...keys.slice(3, 15), 'no-such-key-b', ...keys.slice(15)];
    expect(asked).toHaveLength(20);
    let result!: Awaited<ReturnType<typeof runUpdatesAsOne>>;
    const sent = await statementsSent(async () => {
      result = await inTransaction((em) => runUpdatesAsOne(em, increments(asked), ['"scripted_saga"']));
    });
    expect(result.plain).toBe(true);
    expect(result.answers.map((answer) => answer.affectedRows)).toEqual(asked.map((key) => (key.startsWith('no-such') ? 0 : 1)));
    expect(sent.filter((sql) => sql.startsWith(ONE_STATEMENT_START))).toHaveLength(3);
    const counters = await queryRows<{ key: string; counter: number }>(
      db().orm.em.fork(),
      `select "key", "counter" from "scripted_saga" where "key" in (${keys.map(() => '?').join(', ')})`,
      keys,
    );
    expect(counters).toHaveLength(18);
    expect(counters.every((row) => row.counter === 1)).toBe(true);
  });

  it('writes nothing when the table has a trigger, and says so', async () => {
    const keys = await start(10);
    const em = db().orm.em.fork();
    await em.getConnection().execute(`create function chunk_noop() returns trigger language plpgsql as $$ begin return new; end $$`);
    await em
      .getConnection()
      .execute(`create trigger chunk_noop after update on "scripted_saga" for each row execute function chunk_noop()`);
    try {
      const result = await inTransaction((tx) => runUpdatesAsOne(tx, increments(keys), ['"scripted_saga"']));
      expect(result).toEqual({ plain: false, answers: [] });
      const [row] = await queryRows<{ total: number }>(
        em,
        `select coalesce(sum("counter"), 0)::int as "total" from "scripted_saga" where "key" in (${keys.map(() => '?').join(', ')})`,
        keys,
      );
      expect(row!.total).toBe(0);
    } finally {
      await em.getConnection().execute('drop trigger chunk_noop on "scripted_saga"');
      await em.getConnection().execute('drop function chunk_noop()');
    }
  });
});
