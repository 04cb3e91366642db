// listSagas pages over several saga types on a PostgreSQL database whose collation is ICU en-US, which orders
// 'Payment' after 'order' where JavaScript orders it before. Paging by one row must still return every saga exactly
// once, in the order of the one-page listing.
import { randomUUID } from 'node:crypto';
import { MikroORM } from '@mikro-orm/core';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { defineSaga } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { migrateUp, updateSchema } from '../../src/orm/schema-tools.js';
import { NumberedSaga } from '../fixtures/numbered-saga.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { connectionOptions } from '../support/databases.js';
import { adminQuery, withDatabase } from '../support/postgres-server.js';

// Types that differ in case: ICU puts 'order' before 'Payment', JavaScript (and the C collation) after.
const lower = defineSaga<ScriptedSaga, { type: 'S'; key: string }>({
  name: 'order',
  state: ScriptedSaga,
  correlation: { property: 'key', from: (m) => m.key },
  startedBy: ['S'],
  steps: { S() {} },
});
const upper = defineSaga<NumberedSaga, { type: 'S'; number: number }>({
  name: 'Payment',
  state: NumberedSaga,
  correlation: { property: 'number', from: (m) => m.number },
  startedBy: ['S'],
  steps: { S() {} },
});

describe('listSagas on an ICU-collated PostgreSQL database', () => {
  const name = `saga_test_icu_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  const serverUrl = inject('postgresUrl');
  let orm: MikroORM;
  beforeAll(async () => {
    await adminQuery(serverUrl, `create database "${name}" template template0 locale_provider icu icu_locale 'en-US' locale 'C.UTF-8'`);
    orm = await MikroORM.init(connectionOptions('postgresql', withDatabase(serverUrl, name), [ScriptedSaga, NumberedSaga]));
    await migrateUp(orm);
    await updateSchema(orm);
  });
  afterAll(async () => {
    await orm?.close(true);
    await adminQuery(serverUrl, `drop database if exists "${name}" with (force)`);
  });

  it('pages by one row over types differing in case, created at the same instant, returning every saga once', async () => {
    const at = new Date('2026-11-30T09:00:00Z');
    const base = { createdAt: at, updatedAt: at, version: 0 };
    const em = orm.em.fork();
    await em.insertMany(
      ScriptedSaga,
      [1, 2, 3].map((i) => ({ ...base, id: randomUUID(), key: `k${i}`, stage: 'open', counter: 0, log: '' })),
    );
    await em.insertMany(
      NumberedSaga,
      [1, 2, 3].map((number) => ({ ...base, id: randomUUID(), number, touched: 0 })),
    );
    const ops = new SagaOperations({ em: orm.em, sagas: [lower, upper] });

    const onePage = await ops.listSagas({ limit: 10 });
    expect(onePage.items.map((s) => s.sagaType)).toEqual(['order', 'order', 'order', 'Payment', 'Payment', 'Payment']);
    const paged: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await ops.listSagas({ limit: 1, cursor });
      paged.push(...page.items.map((s) => `${s.sagaType}/${s.id}`));
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    expect(paged).toEqual(onePage.items.map((s) => `${s.sagaType}/${s.id}`));
  });
});
