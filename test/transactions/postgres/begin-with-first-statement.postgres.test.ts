// On PostgreSQL a unit of work's BEGIN goes with the first statement of its transaction, in one round trip (the
// simple query protocol runs both in order). The statement must still run inside the transaction and answer with
// its own result, whoever sends it first: the library's write, or an application's transaction subscriber.

import type { EventSubscriber, MikroORM, TransactionEventArgs } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../../src/index.js';
import { ORM_MAJOR } from '../../../src/orm/orm-major.js';
import { queryRows } from '../../../src/orm/sql-execution.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { statementsSent } from '../../support/pg-statements.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/** Sets a transaction-local setting when the transaction starts, and reads it back before COMMIT. */
class TransactionTag implements EventSubscriber {
  tag: string | undefined;
  readBack: (string | undefined)[] = [];
  async afterTransactionStart({ em }: TransactionEventArgs): Promise<void> {
    if (!this.tag) return;
    const [row] = await queryRows<{ tag: string }>(em!, "select set_config('saga_test.tag', ?, true) as tag", [this.tag]);
    expect(row?.tag).toBe(this.tag);
  }
  async beforeTransactionCommit({ em }: TransactionEventArgs): Promise<void> {
    if (!this.tag) return;
    const [row] = await queryRows<{ tag: string }>(em!, "select current_setting('saga_test.tag', true) as tag", []);
    this.readBack.push(row?.tag);
  }
}

/**
 * The pg module MikroORM's driver uses: the repository's on MikroORM 6; the MikroORM 7 leg's own copy on 7 (the leg
 * redirects only `@mikro-orm/*` imports, so the test's `pg` import is not the driver's there).
 */

describe('BEGIN with the first statement (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  it('a statement a subscriber sends first runs in the transaction, and answers with its own rows', async () => {
    const orm = await db().openAnother();
    opened.push(orm);
    const tag = new TransactionTag();
    orm.em.getEventManager().registerSubscriber(tag);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
    const key = uniqueKey('tag');
    tag.tag = key;
    await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] });
    await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
    // set_config(..., true) lasts for its transaction only: read back before COMMIT, it proves both ran in one.
    expect(tag.readBack).toEqual([key, key]);
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 2, version: 1 });
  });

  it('a message to an existing saga costs two round trips (BEGIN, UPDATE and COMMIT together)', async () => {
    const orm = await db().openAnother();
    opened.push(orm);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
    const key = uniqueKey('trips');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    const sent = await statementsSent(() => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }));
    expect(sent[0]).toMatch(/^select /);
    expect(sent).toHaveLength(2);
    expect(sent[1]).toMatch(/^begin; .*update "scripted_saga".*; commit$/s);
    // A second statement (the outbox row): BEGIN goes with the first, COMMIT on its own after the last.
    const two = await statementsSent(() =>
      runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'send', message: { type: 'Charged' } }] }),
    );
    expect(two).toHaveLength(4);
    expect(two[1]).toMatch(/^begin; .*update "scripted_saga"/s);
    expect(two[1]).not.toMatch(/commit$/);
    expect(two[2]).toMatch(/^insert into "saga_outbox"/);
    expect(two[3]).toBe('commit');
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 2, version: 2 });
  });

  // MikroORM 7 runs `onReserveConnection` (and `onCreateConnection`, and `sessionContext: 'connection'`) as kysely
  // hands out a connection: the unit's transaction must then be kysely's, on a connection the hook prepared.
  it.runIf(ORM_MAJOR === 7)('MikroORM 7 with an onReserveConnection hook: the unit runs on a connection the hook prepared', async () => {
    const events: string[] = [];
    const orm = await db().openAnother({
      onReserveConnection: async () => {
        events.push('reserved');
      },
    } as never);
    opened.push(orm);
    orm.em.getEventManager().registerSubscriber({
      beforeTransactionStart: () => void events.push('begin'),
      afterTransactionStart: () => void events.push('begun'),
    });
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
    const key = uniqueKey('reserved');
    const sent = await statementsSent(() => runtime.handle(scriptedSaga, { type: 'Start', key }));
    // The unit's transaction took its connection through the hook, between the start events.
    expect(events.slice(events.indexOf('begin'))).toEqual(['begin', 'reserved', 'begun']);
    // kysely's transaction: BEGIN and COMMIT on their own.
    expect(sent.filter((sql) => /^(?:begin|commit)$/i.test(sql))).toHaveLength(2);
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ version: 0 });
  });

  it('a version conflict found by the first statement is retried on a working connection', async () => {
    const orm = await db().openAnother({ pool: { min: 0, max: 1 } });
    opened.push(orm);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('conflict');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    // Two messages at once on a pool of one: the second read the version the first then wrote.
    const results = await Promise.all([
      runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }),
      runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }),
    ]);
    expect(results.map((r) => r.version).sort()).toEqual([1, 2]);
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 2, version: 2 });
  });
});
