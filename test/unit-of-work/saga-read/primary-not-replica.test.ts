// A unit of work reads its saga from the primary database, never from a read replica, whether it reads the row
// with its own SELECT (src/orm/direct-reads.ts rowReadSql) or through em.findOne (a saga with a formula): with read
// replicas configured and `preferReadReplicas` (MikroORM's default), em.findOne outside a transaction would read a
// replica, whose row may lag behind the one the version-guarded write checks. Here the replica holds a different
// row for the same key: a step that ran on it would write its note, or fail its version guard.
import { defineEntity, MikroORM } from '@mikro-orm/core';
import { afterAll, describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { migrateUp, updateSchema } from '../../../src/orm/schema-tools.js';
import { connectionOptions, createEmptyDatabase, DIALECTS, type EmptyDatabase, isSqlite } from '../../support/databases.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

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

/** The same with a formula: read through em.findOne. */
class ReplicaFormulaSaga extends SagaState {
  key!: string;
  note: string = '';
  noteLength?: number;
}

const ReplicaFormulaSagaSchema = defineEntity({
  class: ReplicaFormulaSaga,
  extends: SagaStateSchema,
  tableName: 'replica_formula_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    note: { type: 'text', fieldName: 'note' },
    noteLength: { type: 'integer', formula: (alias: string) => `length(${alias}.note)`, persist: false, nullable: true },
  },
});

type NoteMessage = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Append'; readonly key: string };
const appending = <S extends SagaState & { note: string }>(name: string, state: new () => S) =>
  defineSaga<S, NoteMessage>({
    name,
    state,
    correlation: { property: 'key' as never, from: { Start: (m) => m.key, Append: (m) => m.key } },
    startedBy: ['Start'],
    steps: {
      Start() {},
      Append(saga) {
        saga.note += ' +appended';
      },
    },
  });
const plainSaga = appending('replica-read', ReplicaReadSaga);
const formulaSaga = appending('replica-formula', ReplicaFormulaSaga);

// MikroORM's SQLite connections open the main file for replicas too: PostgreSQL only.
for (const dialect of DIALECTS.filter((d) => !isSqlite(d))) {
  describe(`a unit of work reads its saga from the primary, not a read replica (${dialect})`, () => {
    const entities = [ReplicaReadSagaSchema, ReplicaFormulaSagaSchema];
    const db = useDatabase(dialect, entities);
    const replicas: EmptyDatabase[] = [];
    afterAll(async () => {
      for (const replica of replicas) await replica.drop();
    });

    for (const [saga, entity] of [
      [plainSaga, ReplicaReadSaga],
      [formulaSaga, ReplicaFormulaSaga],
    ] as const) {
      it(`${saga.name}: the step sees the primary's row and its write commits there`, async () => {
        const key = uniqueKey(saga.name);
        const replica = await createEmptyDatabase(dialect);
        replicas.push(replica);
        const replicaOrm = await MikroORM.init(connectionOptions(dialect, replica.location, entities));
        await migrateUp(replicaOrm);
        await updateSchema(replicaOrm);
        for (const [orm, note, version] of [
          [db().orm, 'primary row', 0],
          [replicaOrm, 'replica row', 7],
        ] as const) {
          const em = orm.em.fork();
          em.create(entity as never, { key, note, version, createdAt: new Date(), updatedAt: new Date() } as never);
          await em.flush();
        }
        await replicaOrm.close(true);

        const orm = await db().openAnother({ replicas: [{ clientUrl: replica.location }] });
        // What em.findOne reads outside a transaction here: the replica's row.
        expect(await orm.em.fork().findOneOrFail(entity as never, { key } as never)).toMatchObject({ note: 'replica row' });

        const runtime = new SagaRuntime({ em: orm.em, sagas: [saga as never] });
        expect(await runtime.handle(saga as never, { type: 'Append', key })).toMatchObject({ outcome: 'handled', version: 1 });
        const [row] = await db()
          .orm.em.fork()
          .getConnection()
          .execute(`select note, version from ${entity === ReplicaReadSaga ? 'replica_read_saga' : 'replica_formula_saga'} where key = ?`, [
            key,
          ]);
        expect(row).toEqual({ note: 'primary row +appended', version: 1 });
      });
    }
  });
}
