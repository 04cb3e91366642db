// The unit of work's own read of a saga row (src/orm/compat.ts rowReadSql) must read where em.findOne reads: with
// read replicas configured (and `preferReadReplicas`, MikroORM's default), em.findOne outside a transaction reads a
// replica, so the saga read must too.
import { defineEntity, type EntityManager, type EntityMetadata, helper, MikroORM, wrap } from '@mikro-orm/core';
import { afterAll, describe, expect, it } from 'vitest';
import { SagaState, SagaStateSchema } from '../src/index.js';
import { hydrateRow, readRowBy, readsRowsDirectly, rowReadSql } from '../src/orm/compat.js';
import { migrateUp, updateSchema } from '../src/orm/index.js';
import { connectionOptions, createEmptyDatabase, DIALECTS, type EmptyDatabase, isSqlite } from './support/databases.js';
import { uniqueKey, useDatabase } from './support/suite.js';

class ReplicaReadSaga extends SagaState {
  key!: string;
  note: string = '';
}

const ReplicaReadSagaSchema = defineEntity({
  class: ReplicaReadSaga,
  extends: SagaStateSchema,
  tableName: 'replica_read_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    note: { type: 'text', fieldName: 'note' },
  },
});

function metaOf(em: EntityManager, entity: object): EntityMetadata {
  return em.getMetadata().find(entity as never)!;
}

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

function managedState(entity: object | null): unknown {
  if (!entity) return null;
  return { values: wrap(entity).toObject(), original: helper(entity).__originalEntityData };
}

// MikroORM's SQLite connections open the main file for replicas too: PostgreSQL only.
for (const dialect of DIALECTS.filter((d) => !isSqlite(d))) {
  describe(`the unit of work's own read of a saga row with read replicas (${dialect})`, () => {
    const db = useDatabase(dialect, [ReplicaReadSagaSchema]);
    const replicas: EmptyDatabase[] = [];
    afterAll(async () => {
      for (const replica of replicas) await replica.drop();
    });

    it('reads the row em.findOne reads (the replica) outside a transaction', async () => {
      const key = uniqueKey('replica');
      const replica = await createEmptyDatabase(dialect);
      replicas.push(replica);
      const replicaOrm = await MikroORM.init(connectionOptions(dialect, replica.location, [ReplicaReadSagaSchema]));
      await migrateUp(replicaOrm);
      await updateSchema(replicaOrm);
      for (const [orm, note] of [
        [db().orm, 'primary row'],
        [replicaOrm, 'replica row'],
      ] as const) {
        const em = orm.em.fork();
        em.create(ReplicaReadSaga, { key, note, version: 0, createdAt: new Date(), updatedAt: new Date() } as never);
        await em.flush();
      }
      await replicaOrm.close(true);

      const orm = await db().openAnother({
        replicas: [isSqlite(dialect) ? { dbName: replica.location } : { clientUrl: replica.location }],
      });
      const found = await orm.em.fork().findOneOrFail(ReplicaReadSaga, { key });
      expect(found.note).toBe('replica row');
      const read = await readAsUnit<ReplicaReadSaga>(orm.em.fork(), ReplicaReadSaga, 'key', key);
      expect(managedState(read)).toEqual(managedState(found));
    });
  });
}
