// An app's saga state entity may be mapped with MikroORM 6's decorators, 7's legacy or ES decorators, or
// `defineEntity` (README "Register in your app"). Each style runs on the major that has it; the decorator
// fixtures are imported dynamically so a major never loads a decorators package it does not ship.
import { describe, expect, it } from 'vitest';
import { SagaRuntime, SagaState } from '../src/index.js';
import { ORM_MAJOR, updateSchemaSql } from '../src/orm/index.js';
import type { StyledSagaState, styledSaga } from './fixtures/entity-style-saga.js';
import { createTestDatabase, DIALECTS } from './support/databases.js';
import { uniqueKey } from './support/suite.js';

interface Style {
  readonly name: string;
  readonly major: 6 | 7 | 'both';
  readonly table: string;
  load(): Promise<{ state: new () => StyledSagaState; saga: ReturnType<typeof styledSaga<StyledSagaState>> }>;
}

/**
 * Imports a MikroORM-7-only fixture. The path is not a literal, so the main tsconfig (6's types, no
 * @mikro-orm/decorators) does not follow it; legs/mikro-orm-7/tsconfig*.json typecheck those files.
 */
// biome-ignore lint/suspicious/noExplicitAny: the fixture's types are checked against 7's types, not here.
const importV7Fixture = (file: string): Promise<any> => import(`./fixtures/v7/${file}`);

const STYLES: readonly Style[] = [
  {
    name: 'defineEntity',
    major: 'both',
    table: 'defined_saga',
    load: async () => {
      const m = await import('./fixtures/define-entity-saga.js');
      return { state: m.DefinedSaga, saga: m.definedSaga };
    },
  },
  {
    name: "MikroORM 6's decorators",
    major: 6,
    table: 'v6_decorated_saga',
    load: async () => {
      const m = await import('./fixtures/v6/decorators-saga.js');
      return { state: m.V6DecoratedSaga, saga: m.v6DecoratedSaga };
    },
  },
  {
    name: "MikroORM 7's legacy decorators",
    major: 7,
    table: 'legacy_decorated_saga',
    load: async () => {
      const m = await importV7Fixture('legacy-decorators-saga.js');
      return { state: m.LegacyDecoratedSaga, saga: m.legacyDecoratedSaga };
    },
  },
  {
    name: "MikroORM 7's ES decorators",
    major: 7,
    table: 'es_decorated_saga',
    load: async () => {
      const m = await importV7Fixture('es-decorators-saga.js');
      return { state: m.EsDecoratedSaga, saga: m.esDecoratedSaga };
    },
  },
];

for (const dialect of DIALECTS) {
  describe(`app state entity styles (${dialect})`, () => {
    for (const style of STYLES) {
      it.runIf(style.major === 'both' || style.major === ORM_MAJOR)(
        `${style.name}: the entity extends SagaState, gets the partial index, and handles messages with versions`,
        async () => {
          const { state, saga } = await style.load();
          const db = await createTestDatabase(dialect, [state]);
          try {
            const meta = db.orm.getMetadata().find(state.name)!;
            expect(meta.tableName).toBe(style.table);
            expect(meta.properties.version?.fieldNames).toEqual(['version']);
            expect(await updateSchemaSql(db.orm)).toBe('');

            const runtime = new SagaRuntime({ em: db.orm.em, sagas: [saga] });
            const key = uniqueKey(style.table);
            expect(await runtime.handle(saga, { type: 'Seen', key })).toMatchObject({ outcome: 'started', version: 0 });
            expect(await runtime.handle(saga, { type: 'Seen', key })).toMatchObject({ outcome: 'handled', version: 1 });
            const row = await db.orm.em.fork().findOneOrFail(state, { key } as never);
            expect(row).toBeInstanceOf(SagaState);
            expect(row).toMatchObject({ key, seen: 2, version: 1, completedAt: null });

            const indexes = await db.orm.em
              .fork()
              .getConnection()
              .execute<{ sql: string }[]>(
                dialect === 'postgresql'
                  ? `select indexdef as sql from pg_indexes where tablename = '${style.table}'`
                  : `select sql from sqlite_master where type = 'index' and tbl_name = '${style.table}' and sql is not null`,
              );
            expect(indexes.map((r: { sql: string }) => r.sql.replaceAll('"', '').replaceAll('`', '').toLowerCase())).toEqual(
              expect.arrayContaining([expect.stringMatching(/\(created_at\) where \(?completed_at is null\)?/)]),
            );
          } finally {
            await db.dispose();
          }
        },
      );
    }
  });
}
