// The unit of work's own read of a saga row (src/orm/direct-reads.ts rowReadSql) must read the table em.findOne reads:
// em.findOne takes the schema of the EntityManager (`em.fork({ schema })`, `em.schema = ...`) and of the config
// (`schema` option) for an entity without one of its own, and a wildcard (`schema: '*'`) entity's rows from there.
import { defineEntity, type EntityManager } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { SagaState, SagaStateSchema } from '../../../src/index.js';
import { hydrateRow, readRowBy, readsRowsDirectly, rowReadSql } from '../../../src/orm/index.js';
import { managedState, metaOf } from '../../support/managed-entity.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

class SchemaReadSaga extends SagaState {
  key!: string;
  note: string = '';
}

const SchemaReadSagaSchema = defineEntity({
  class: SchemaReadSaga,
  extends: SagaStateSchema,
  tableName: 'schema_read_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    note: { type: 'text', fieldName: 'note' },
  },
});

class WildcardReadSaga extends SagaState {
  key!: string;
  note: string = '';
}

const WildcardReadSagaSchema = defineEntity({
  class: WildcardReadSaga,
  extends: SagaStateSchema,
  tableName: 'wildcard_read_saga',
  schema: '*',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    note: { type: 'text', fieldName: 'note' },
  },
});

const TENANT = 'tenant_read';

/** The saga as a unit of work reads it on `fork`: its own SELECT when it may, else em.findOne (load-instance.ts). */
async function readAsUnit<T extends object>(fork: EntityManager, entity: object, property: string, value: unknown): Promise<T | null> {
  const meta = metaOf(fork, entity);
  const sql = rowReadSql(fork, meta, property);
  if (sql && (await readsRowsDirectly(fork, meta))) {
    const row = await readRowBy(fork, meta, sql, property, value);
    return row ? hydrateRow<T>(fork, meta, row) : null;
  }
  return (await fork.findOne(entity as never, { [property]: value } as never)) as T | null;
}

describe("the unit of work's own read of a saga row in another schema (postgresql)", () => {
  const db = useDatabase('postgresql', [SchemaReadSagaSchema, WildcardReadSagaSchema]);

  async function seed(key: string): Promise<void> {
    const em = db().orm.em.fork();
    const conn = em.getConnection();
    await conn.execute(`create schema if not exists ${TENANT}`);
    // MikroORM's schema generator leaves wildcard entities' tables to each schema's owner.
    await conn.execute('create table if not exists public.wildcard_read_saga (like public.schema_read_saga including all)');
    for (const table of ['schema_read_saga', 'wildcard_read_saga']) {
      await conn.execute(`create table if not exists ${TENANT}.${table} (like public.${table} including all)`);
      for (const [schema, note] of [
        ['public', 'public row'],
        [TENANT, 'tenant row'],
      ]) {
        await conn.execute(
          `insert into ${schema}.${table} (id, key, note, version, created_at, updated_at) values (gen_random_uuid(), ?, ?, 0, now(), now())`,
          [key, note],
        );
      }
    }
  }

  it('a fork with a schema reads the row em.findOne reads, from that schema', async () => {
    const key = uniqueKey('schema');
    await seed(key);
    const fork = () => db().orm.em.fork({ schema: TENANT });
    const found = await fork().findOneOrFail(SchemaReadSaga, { key });
    expect(found.note).toBe('tenant row');
    const read = await readAsUnit<SchemaReadSaga>(fork(), SchemaReadSaga, 'key', key);
    expect(managedState(read)).toEqual(managedState(found));
  });

  it('an ORM configured with a `schema` reads the row em.findOne reads, from that schema', async () => {
    const key = uniqueKey('configured');
    await seed(key);
    const orm = await db().openAnother({ schema: TENANT });
    const found = await orm.em.fork().findOneOrFail(SchemaReadSaga, { key });
    expect(found.note).toBe('tenant row');
    const read = await readAsUnit<SchemaReadSaga>(orm.em.fork(), SchemaReadSaga, 'key', key);
    expect(managedState(read)).toEqual(managedState(found));
  });

  it('a wildcard-schema entity reads the row em.findOne reads, in the default schema and in a fork with a schema', async () => {
    const key = uniqueKey('wildcard');
    await seed(key);
    for (const fork of [() => db().orm.em.fork(), () => db().orm.em.fork({ schema: TENANT })]) {
      const found = await fork().findOneOrFail(WildcardReadSaga, { key });
      const read = await readAsUnit<WildcardReadSaga>(fork(), WildcardReadSaga, 'key', key);
      expect(managedState(read)).toEqual(managedState(found));
    }
  });
});
