// runUpdatesAsOne (how MikroORM 7 writes a group's UPDATEs on PostgreSQL) sends at most 8 UPDATEs per statement:
// PostgreSQL's cost of one statement of n data-modifying WITH queries grows faster than n. Each UPDATE's answer
// must still be its own, in order, whichever statement carried it, and a table with a trigger still writes nothing.
import { describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../../src/index.js';
import { freshFork, queryRows } from '../../../src/orm/index.js';
import { runUpdatesAsOne } from '../../../src/sql/saga-statements.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { ONE_STATEMENT_START, statementsSent } from '../../support/pg-statements.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

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
